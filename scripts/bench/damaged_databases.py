#!/usr/bin/env python3
"""Damaged databases against a start of the daemon: how many keep it down (the goal is 0).

    .venv/bin/python scripts/bench/damaged_databases.py [--timeout 60] [--only log.db]

One workspace is filled once (tests/support/damage.py: memory files, a 600-turn conversation log,
both indexes, facts with events, a tombstone, bookkeeping) and copied for every case: each of the
six databases under `.mateclaw/` x each damage (garbage bytes, cut to half, a zeroed header, one
garbage page inside a table, emptied, a garbage WAL, a garbage shared-memory file). For each case
`mateclaw-mem serve --port 0` (this interpreter) is started on the copy, and counted:

- down: it exited, or did not log "listening on" within --timeout seconds (its log's last lines
  are printed);
- set aside: a `<name>.damaged-<time>` file appeared beside the damaged one;
- reported: `/health` names the file (`set_aside`);
- found: a search over HTTP finds the word only MEMORY.md holds (the file index is whole again);
- markdown changed: any memory file's bytes differ from before the start (or it is gone);
- cli failed: on a second damaged copy, with no daemon, `reindex` or `search WORD` exited non-zero
  or did not find the word;
- salvaged: for a log, the rows `doctor --salvage` copied back into the new file afterwards.

Prints one line per case, the totals and `os.getloadavg()` (the machine is shared: a slow start
under load is the machine, a start that never listens is us).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from _daemon import start_daemon  # noqa: E402  (this script's folder is on sys.path)

from tests.support.damage import DAMAGES, DATABASES, WORD, populate  # noqa: E402

FLAGS = ("down", "set_aside", "reported", "found", "markdown_changed", "cli_failed")


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def _markdown(ws: Path) -> dict[str, str]:
    return {str(p.relative_to(ws)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(ws.rglob("*.md")) if ".mateclaw" not in p.parts}


def _found(url: str, deadline: float) -> bool:
    """The search finds WORD once the watcher's start-up catch-up is done (asked until `deadline`)."""
    while time.monotonic() < deadline:
        health = _get(f"{url}/health")
        if (health.get("index") or {}).get("state") == "ready":
            hits = _get(f"{url}/api/v1/agents/default/workspace/memory/search?q={WORD}")
            return any(WORD in json.dumps(h) for h in hits["hits"])
        time.sleep(0.1)
    return False


def run_case(template: Path, work: Path, db: str, damage: str, timeout: float) -> dict:
    ws = work / "ws"
    shutil.copytree(template, ws)
    before = _markdown(ws)
    DAMAGES[damage](ws / ".mateclaw" / db)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
    env["MATECLAW_CONFIG"] = str(work / "mateclaw.yaml")
    (work / "mateclaw.yaml").write_text((template.parent / "mateclaw.yaml").read_text(), encoding="utf-8")
    log = work / "daemon.log"
    cmd = [sys.executable, "-m", "mateclaw_mem.cli.main", "--workspace", str(ws), "serve", "--port", "0"]
    proc, url = start_daemon(cmd, log, env=env, cwd=work, timeout=timeout)
    out = {"db": db, "damage": damage, "down": url is None, "set_aside": False, "reported": False, "found": False}
    try:
        if url is not None:
            health = _get(f"{url}/health")
            out["reported"] = db in json.dumps(health.get("set_aside"))
            out["found"] = _found(url, time.monotonic() + timeout)
    except OSError as exc:
        out["error"] = str(exc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    moved = [p for p in (ws / ".mateclaw").iterdir() if re.fullmatch(re.escape(db) + r"\.damaged-[0-9T]+", p.name)]
    out["set_aside"] = bool(moved)
    after = _markdown(ws)
    out["markdown_changed"] = any(after.get(name) != sha for name, sha in before.items())
    if out["down"]:
        out["log_tail"] = log.read_text(errors="replace").strip().splitlines()[-3:]
    cli = [sys.executable, "-m", "mateclaw_mem.cli.main", "--workspace", str(ws), "--json"]
    if moved and db not in ("index.db", "messages.db"):
        proc = subprocess.run([*cli, "doctor", "--salvage", str(moved[0])], env=env, capture_output=True, text=True)
        out["salvaged"] = json.loads(proc.stdout).get("copied") if proc.stdout.startswith("{") else proc.stderr
    shutil.rmtree(ws)
    shutil.copytree(template, ws)  # the second copy: CLI commands first, no daemon
    DAMAGES[damage](ws / ".mateclaw" / db)
    failed = []
    for args in (["reindex"], ["search", WORD]):
        proc = subprocess.run([*cli, *args], env=env, capture_output=True, text=True)
        if proc.returncode != 0 or (args[0] == "search" and WORD not in proc.stdout):
            failed.append(f"{args[0]}: {proc.returncode} {proc.stderr.strip()[-200:]}")
    out["cli_failed"] = bool(failed)
    if failed:
        out["cli_errors"] = failed
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a start may take to listen")
    parser.add_argument("--only", choices=DATABASES, help="one database only")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="damaged-dbs-") as tmp:
        template = populate(Path(tmp) / "template")
        for db in [args.only] if args.only else DATABASES:
            for damage in DAMAGES:
                work = Path(tmp) / f"{db}-{damage}"
                work.mkdir()
                r = run_case(template, work, db, damage, args.timeout)
                results.append(r)
                flags = " ".join(k for k in FLAGS if r[k])
                flags += f" salvaged={r['salvaged']}" if "salvaged" in r else ""
                print(f"{db:<12} {damage:<13} {flags or '-'}" + (f"  {r['log_tail']}" if r["down"] else "")
                      + (f"  {r['cli_errors']}" if r["cli_failed"] else ""), flush=True)
                shutil.rmtree(work)
    total = len(results)
    counts = {k: sum(1 for r in results if r[k]) for k in FLAGS}
    print(f"python {platform.python_version()}  cases {total}  " + "  ".join(f"{k} {v}" for k, v in counts.items())
          + f"  loadavg {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
