#!/usr/bin/env python3
"""Start-up time of `mateclaw-mem --help` and `mateclaw-mem status` (median of N runs), in ms.

    .venv/bin/python scripts/bench/startup.py [--runs 15] [--no-bytecode-cache]

Bytecode is cached in a folder of the run's own (`PYTHONPYCACHEPREFIX`), as an installed package
has its `.pyc` files: a checkout under `PYTHONDONTWRITEBYTECODE=1` would otherwise recompile every
module edited since its last `.pyc` on every run (see daemon_start.py, which also times `status`
beside a running daemon).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def measure(args: list[str], runs: int, cwd: str) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "mateclaw_mem.cli.main", *args]
        subprocess.run(cmd, cwd=cwd, capture_output=True, check=True)
        times.append((time.perf_counter() - t0) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="leave PYTHONDONTWRITEBYTECODE / PYTHONPYCACHEPREFIX as the environment has them")
    opts = parser.parse_args()
    runs = opts.runs
    with tempfile.TemporaryDirectory() as tmp:
        if not opts.no_bytecode_cache:
            os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
            os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, ".pycache")
        measure(["init"], 1, tmp)
        for args in (["--help"], ["status"], ["ls"]):  # warms the bytecode cache for what is timed below
            measure(args, 1, tmp)
        floor = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            floor.append((time.perf_counter() - t0) * 1000)
        python_ms = statistics.median(floor)
        print(f"{'command':<28}{'median ms':>10}{'p90 ms':>10}")
        print(f"{'python -c pass (floor)':<28}{python_ms:>10.1f}{'':>10}")
        for args in (["--help"], ["status"], ["ls"]):
            t = sorted(measure(args, runs, tmp))
            name = "mateclaw-mem " + " ".join(args)
            print(f"{name:<28}{statistics.median(t):>10.1f}{t[int(len(t) * 0.9) - 1]:>10.1f}")


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
