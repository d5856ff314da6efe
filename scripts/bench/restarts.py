#!/usr/bin/env python3
"""Restarts after kill -9 with extraction work pending: how many came up and served, how many hung.

    .venv/bin/python scripts/bench/restarts.py [--restarts 20] [--timeout 20]

Each round starts `mateclaw-mem serve` (this interpreter) on one temp workspace and a free loopback
port, waits up to --timeout seconds for it to listen, checks /health and a file read, posts a burst
of turns (no cooldown, so every one is extraction work due at once) and kills it with SIGKILL. The
next start resumes that work while it is still starting. A start that does not listen in time is
counted as hung (a start that exits instead is counted as exited and its log printed), killed, and
the rounds go on. Prints one line: python, restarts, up, hung, exited, and in how many rounds the
kill left extraction work pending (the scenario under test).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from _daemon import start_daemon  # scripts/bench/_daemon.py (this script's folder is on sys.path)

MEM = "/api/v1/memory/default"
OWNERS = 4
CONFIG = ("timezone: Europe/Berlin\n"
          "mate:\n  memory:\n    cooldown-minutes: 0\n    min-messages-for-summarize: 0\n")


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status


def _post(url: str, body: dict) -> int:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status


def start(tmp: Path, n: int, timeout: float) -> tuple[subprocess.Popen[bytes], str | None]:
    cmd = [sys.executable, "-m", "mateclaw_mem.cli.main", "serve", "--workspace", str(tmp / "ws"),
           "--config", str(tmp / "mateclaw.yaml"), "--port", "0"]
    # A hung start is sent SIGABRT: faulthandler then prints every thread's stack to the log.
    return start_daemon(cmd, tmp / f"daemon-{n}.log", cwd=tmp, timeout=timeout,
                        env={**os.environ, "PYTHONFAULTHANDLER": "1"})


def pending(workspace: Path) -> int:
    db = sqlite3.connect(workspace / ".mateclaw" / "state.db")
    try:
        return int(db.execute("SELECT COUNT(*) FROM extraction_pending").fetchone()[0])
    except sqlite3.Error:
        return 0
    finally:
        db.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--restarts", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds a start may take before it counts as hung")
    parser.add_argument("--stacks", action="store_true", help="print the thread stacks of every hung start")
    args = parser.parse_args()
    up = hung = exited = left_pending = 0
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        (tmp / "mateclaw.yaml").write_text(CONFIG, encoding="utf-8")
        for n in range(args.restarts + 1):  # round 0 is the first start, not a restart
            proc, url = start(tmp, n, args.timeout)
            try:
                if url is None:
                    alive = proc.poll() is None
                    if n:
                        hung += alive
                        exited += not alive
                    if args.stacks or not alive:
                        if alive:
                            proc.send_signal(signal.SIGABRT)
                            proc.wait()
                        what = "hung" if alive else f"exited ({proc.returncode})"
                        print(f"--- start {n} {what} ---\n{(tmp / f'daemon-{n}.log').read_text(errors='replace')}")
                    continue
                ok = _get(url + "/health") == 200 and _get(
                    url + "/api/v1/agents/default/workspace/memory/file?path=MEMORY.md") == 200
                if n:
                    up += ok
                    hung += not ok
                for i in range(OWNERS * 2):
                    _post(f"{url}{MEM}/conversations/chat-{n}-{i % OWNERS}/turns",
                          {"user": f"Remember that round {n} item {i} is a blue umbrella number {i}.",
                           "assistant": "Noted.", "owner": f"person-{i % OWNERS}"})
            finally:
                proc.kill()
                proc.wait()
                left_pending += url is not None and pending(tmp / "ws") > 0
    print(f"python {platform.python_version()}  restarts {args.restarts}  up {up}  hung {hung}  exited {exited}"
          f"  kills-with-pending-work {left_pending}/{args.restarts + 1}")


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
