#!/usr/bin/env python3
"""The `status` report as the daemon makes it (`runtime.status.collect`, in-process), median of N, ms,
on a workspace of daily notes written two ways: dropped in as files (no history) and written through
the store an hour apart (a kept version each, dated as the file's mtime, as the daemon's own writes
over weeks leave them: the last-writes part then reads the history and looks for hand edits).

    .venv/bin/python scripts/bench/status_report.py [--notes 1000] [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _figures import record  # scripts/bench/_figures.py (this script's folder is on sys.path)

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.runtime.status import collect
from mateclaw_mem.settings import load_settings


def note(i: int) -> tuple[str, str]:
    body = "".join(f"\n## Note {i * 10 + s}\n\ngarden tomato river coffee meeting item{i * 10 + s}.\n"
                   for s in range(10))
    return f"memory/{2000 + i // 336}-{1 + i // 28 % 12:02d}-{1 + i % 28:02d}.md", f"# day {i}\n{body}"


def timed(ws: Path, runs: int) -> float:
    svc = Services(load_settings(None, ws))
    try:
        collect(svc, daemon={"running": True, "pid": 1})  # opens what the daemon has open
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            collect(svc, daemon={"running": True, "pid": 1})
            times.append((time.perf_counter() - t0) * 1000)
        return statistics.median(times)
    finally:
        svc.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--notes", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=7)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for kind in ("files dropped in", "written by the daemon"):
            ws = Path(tmp) / kind.replace(" ", "-")
            clock = ManualClock(datetime(2025, 1, 1, tzinfo=UTC))
            svc = Services(load_settings(None, ws), clock=clock)
            svc.store.ensure_agent("default")
            for i in range(opts.notes):
                rel, text = note(i)
                if kind == "files dropped in":
                    path = svc.store.agent_dir("default") / rel
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text, encoding="utf-8")
                else:
                    clock.advance(timedelta(hours=1))
                    svc.store.write("default", rel, text, expected_sha=None, actor="extract")
                    when = clock.now().timestamp()
                    os.utime(svc.store.agent_dir("default") / rel, (when, when))
            svc.close()
            rows.append((kind, timed(ws, opts.runs)))
        print(f"{opts.notes} daily notes, median of {opts.runs}")
        for kind, ms in rows:
            print(f"status report, notes {kind:<24}{ms:>8.1f} ms")
            record(f"status report in the daemon, {opts.notes} notes {kind}", ms, "ms")


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
