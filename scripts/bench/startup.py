#!/usr/bin/env python3
"""Start-up time of `mateclaw-mem --help` and `mateclaw-mem status` (median of N runs), in ms.

    .venv/bin/python scripts/bench/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
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
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        measure(["init"], 1, tmp)
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
    main()
