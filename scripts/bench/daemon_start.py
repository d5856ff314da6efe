#!/usr/bin/env python3
"""Daemon start to first healthy `/health`, `status` with and without a daemon, `--help` and a
one-shot CLI `search`, on a workspace of daily notes (default 10,000 `##` sections); median of N runs, ms.

    .venv/bin/python scripts/bench/daemon_start.py [--sections 10000] [--runs 5]

The workspace is indexed once (one `serve` run) before timing, as a user's would be: the figures
are the start of a daemon on a workspace it already knows, not a first full index. "healthy" is the
first 200 from `/health`; its `index` field says whether catch-up was still running at that moment.
The rows under it split that start by the daemon's own log lines: everything before its first line
is the interpreter, the imports and the settings.

Bytecode: an installed package has its `.pyc` files (pip writes them), but a checkout run with
`PYTHONDONTWRITEBYTECODE=1` recompiles every module edited since its last `.pyc` on every start
(~0.1-0.3 s here). The children therefore cache bytecode in a folder of their own
(`PYTHONPYCACHEPREFIX`, never the tree) unless `--no-bytecode-cache` asks for the environment as is.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import date, datetime, timedelta
from pathlib import Path

from _figures import record  # scripts/bench/_figures.py (this script's folder is on sys.path)

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "mateclaw_mem.cli.main"]
LATER_ROUTE = "/api/v1/memory/default/dreaming/status"  # one of the routes built after the daemon listens
WORDS = ("garden tomato river coffee meeting deadline python lisbon guitar marathon budget invoice "  # noqa: SIM905
         "dentist birthday sister harbour climbing recipe novel train").split()


def make_workspace(ws: Path, sections: int) -> None:
    subprocess.run([*CLI, "--workspace", str(ws), "init"], check=True, capture_output=True, cwd=ROOT)
    notes = ws / "default" / "memory"
    notes.mkdir(parents=True, exist_ok=True)
    per_note = 10
    day = date(2020, 1, 1)
    for n in range(0, sections, per_note):
        body = [f"# {day:%Y-%m-%d}\n"]
        for s in range(per_note):
            i = n + s
            w = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(12)]
            body.append(f"\n## Note {i}\n\n{' '.join(w)} item{i}.\n")
        (notes / f"{day:%Y-%m-%d}.md").write_text("".join(body), encoding="utf-8")
        day += timedelta(days=1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_daemon(ws: Path, log: Path) -> tuple[subprocess.Popen, int, float, dict]:
    port = free_port()
    t0 = time.perf_counter()
    wall0 = time.time()  # the log's timestamps are wall-clock
    proc = subprocess.Popen([*CLI, "--workspace", str(ws), "serve", "--port", str(port), "--log-level", "INFO"],
                            cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT)
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                body = json.loads(r.read())
            healthy = (time.perf_counter() - t0) * 1000
            # The daemon builds the routes after the AML contract's once it listens (api/deferred.py):
            # the first call to one of them, sent right away, waits for that build.
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{LATER_ROUTE}", timeout=30) as r:
                r.read()
            body["_later"] = (time.perf_counter() - t0) * 1000
            deadline = time.monotonic() + 10  # the log's last start-up line comes after both answers
            while "start-up took" not in log.read_text(errors="replace") and time.monotonic() < deadline:
                time.sleep(0.01)
            body["_phases"] = phases(log, wall0)
            return proc, port, healthy, body
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"the daemon exited ({proc.returncode}); its log:\n{log.read_text()}")
            time.sleep(0.005)


def phases(log: Path, wall0: float) -> dict[str, float]:
    """Where a start went, from the daemon's own log lines: until its first line (the interpreter,
    the imports, the settings), `services built in`, `HTTP API composed in`, and its first line to
    `listening on`. Empty when the log does not have them (an older or newer wording)."""
    out: dict[str, float] = {}
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue
        out.setdefault("first log line", (at - wall0) * 1000)
        if m := re.search(r"(services built|HTTP API composed|HTTP routes after the AML contract's built"
                          r"|the other services and HTTP routes built) in (\d+) ms", line):
            out[m.group(1)] = float(m.group(2))
        if "listening on" in line:
            out["first log line to listening"] = (at - wall0) * 1000 - out["first log line"]
        if "start-up took" in line:
            break
    return out


def stop_daemon(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)


def wait_caught_up(port: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            index = json.loads(r.read()).get("index") or {}
        if index.get("state", "ready") == "ready":
            return
        time.sleep(0.05)


def cli_ms(ws: Path, args: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([*CLI, "--workspace", str(ws), *args], cwd=ROOT, capture_output=True, check=True)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


DEPENDENCIES = ("import fastapi, fastapi.openapi.utils, fastapi_offline, uvicorn, uvicorn.loops.uvloop, "
                "uvicorn.protocols.http.httptools_impl, uvicorn.lifespan.on, pydantic_settings, yaml, filelock, "
                "frontmatter, watchdog.observers, Stemmer, apscheduler.schedulers.background, "
                "apscheduler.triggers.cron, sqlite3, pydantic.v1")


def python_ms(args: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, check=True)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="leave PYTHONDONTWRITEBYTECODE / PYTHONPYCACHEPREFIX as the environment has them")
    opts = parser.parse_args()
    os.environ.pop("MATECLAW_CONFIG", None)
    with tempfile.TemporaryDirectory() as tmp:
        if not opts.no_bytecode_cache:
            os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
            os.environ["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
            # Warm it for every path timed below (the first serve run warms the daemon's).
            subprocess.run([*CLI, "--help"], cwd=ROOT, capture_output=True, check=True)
        ws, log = Path(tmp) / "ws", Path(tmp) / "serve.log"
        make_workspace(ws, opts.sections)
        proc, port, _, _ = start_daemon(ws, log)  # the first run indexes everything
        wait_caught_up(port)
        stop_daemon(proc)
        starts, states, parts, later = [], [], [], []
        for _ in range(opts.runs):
            proc, port, ms, body = start_daemon(ws, log)
            starts.append(ms)
            parts.append(body.pop("_phases"))
            later.append(body.pop("_later"))
            states.append((body.get("index") or {}).get("state", "-"))
            wait_caught_up(port)
            stop_daemon(proc)
        rows = [("daemon start to healthy", statistics.median(starts), f"index at first 200: {states[0]}")]
        for name in parts[0]:
            rows.append((f"  {name}", statistics.median(p.get(name, 0.0) for p in parts), "(from its log)"))
        rows.append(("start to a later route's answer", statistics.median(later),
                     f"(GET {LATER_ROUTE}, sent once healthy)"))
        rows.append(("status (no daemon)", cli_ms(ws, ["status"], opts.runs), ""))
        rows.append(("search (one-shot, no daemon)", cli_ms(ws, ["search", "tomato river"], opts.runs), ""))
        proc, port, _, _ = start_daemon(ws, log)
        try:
            wait_caught_up(port)
            rows.append(("status (daemon running)", cli_ms(ws, ["status"], opts.runs), ""))
        finally:
            stop_daemon(proc)
        rows.append(("--help", cli_ms(ws, ["--help"], opts.runs), ""))
        # The machine's speed, for reading the rows above: the interpreter alone, and the import of
        # the libraries the daemon is built on (nothing of ours) - a floor no daemon on them is under.
        rows.append(("python -c pass", python_ms(["-c", "pass"], opts.runs), "(the interpreter's start)"))
        rows.append(("import of the libraries alone", python_ms(["-c", DEPENDENCIES], opts.runs),
                     "(fastapi, uvicorn, pydantic-settings, APScheduler, watchdog, ...)"))
        cache = "as the environment has it" if opts.no_bytecode_cache else "cached (as installed)"
        print(f"{opts.sections} sections, median of {opts.runs}; bytecode {cache}")
        print(f"{'figure':<32}{'median ms':>10}  note")
        for name, ms, note in rows:
            print(f"{name:<32}{ms:>10.0f}  {note}")
        goals = {"daemon start to healthy": 1000, "status (daemon running)": 150, "--help": 60}
        for name, ms, _ in rows:
            goal = goals.get(name)
            record(f"{name.strip()} ({opts.sections} sections)", ms, "ms", goal=f"<= {goal} ms" if goal else "",
                   met=ms <= goal if goal else None)


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
