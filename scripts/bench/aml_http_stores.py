"""The LoCoMo dev bench over HTTP (`aml_bench.py`, unchanged) against `serve --aml-only` on each store,
printed side by side: the figures must be the same on SQLite and PostgreSQL, 0 contract violations.

    python scripts/bench/aml_http_stores.py --data LOCOMO_DEV.json --bench aml_bench.py [--daemons 2] [--dsn DSN]

SQLite is one daemon (one file, one process by design). PostgreSQL runs `--daemons` daemons over one
database (a throw-away server, as the tests start one, unless `--dsn` names an empty database): the
bench's Adds go to the first, its searches to the last - every search reads what another daemon
wrote. (The round-robin campaign with kills is scripts/bench/aml_cluster.py.)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support.postgres import PostgresServer, _free_port  # noqa: E402


def start_daemon(folder: Path, config: str, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    folder.mkdir(parents=True)
    (folder / "c.yaml").write_text(config, encoding="utf-8")
    port = _free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
    proc = subprocess.Popen([sys.executable, "-m", "mateclaw_mem.cli.main", "serve", "--aml-only", "--workspace",
                             str(folder / "ws"), "--config", str(folder / "c.yaml"), "--port", str(port)],
                            cwd=REPO, env={**base, **env}, stdout=(folder / "out.log").open("wb"),
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the daemon exited: {(folder / 'out.log').read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        time.sleep(0.2)
    raise RuntimeError("the daemon did not answer /health in 120 s")


def run_bench(args: argparse.Namespace, add: str, search: str) -> str:
    done = subprocess.run([sys.executable, args.bench, "--data", args.data, "--categories", "all",
                           "--run-id", f"stores-{int(time.time())}", "--add-url", add + "/v1/aml/add",
                           "--search-url", search + "/v1/aml/search", "--progress-every", "0"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"aml_bench.py failed: {done.stderr[-2000:]}")
    return done.stdout


def figures(out: str) -> dict[str, str]:
    got = {}
    for key, pattern in (("overall", r"^overall .*$"), ("latency", r"^latency ms: .*$"),
                         ("violations", r"^contract violations: .*$")):
        m = re.search(pattern, out, re.M)
        got[key] = m.group(0) if m else "(missing)"
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("AML_DATA"), required=os.environ.get("AML_DATA") is None)
    ap.add_argument("--bench", default=os.environ.get("AML_BENCH"), required=os.environ.get("AML_BENCH") is None)
    ap.add_argument("--daemons", type=int, default=2)
    ap.add_argument("--dsn", default="")
    args = ap.parse_args()
    results: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        proc, url = start_daemon(root / "sqlite", "{}\n", {})
        stack.callback(lambda p=proc: (p.terminate(), p.wait(30)))
        results["sqlite, 1 daemon"] = figures(run_bench(args, url, url))
        proc.terminate()
        proc.wait(30)
        dsn = args.dsn
        if not dsn:
            dsn = stack.enter_context(PostgresServer.start()).create_database()
        urls = []
        for i in range(args.daemons):
            proc, url = start_daemon(root / f"pg{i}", "aml:\n  store: postgresql\n", {"MATECLAW_PG_DSN": dsn})
            stack.callback(lambda p=proc: (p.terminate(), p.wait(30)))
            urls.append(url)
        results[f"postgresql, {args.daemons} daemon(s): adds on the first, searches on the last"] = figures(
            run_bench(args, urls[0], urls[-1]))
    for name, got in results.items():
        print(f"== {name}")
        for line in got.values():
            print("   " + line)
    same = len({r["overall"] for r in results.values()}) == 1
    print(f"overall lines identical: {same}; load average {os.getloadavg()} ({os.cpu_count()} cores)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
