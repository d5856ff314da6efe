#!/usr/bin/env python3
"""Learning memory costs: recording a result, reflecting at the cap (rotation), entering a task
with a full learning memory and a long run log, reading the harness lineage. Median / p90 in ms.

    .venv/bin/python scripts/bench/learning.py [--runs 200] [--history 2000] [--threads 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings


def timed(fn, runs: int) -> list[float]:
    out = []
    for i in range(runs):
        t0 = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def row(name: str, times: list[float]) -> None:
    times = sorted(times)
    p90 = times[int(len(times) * 0.9) - 1] if len(times) >= 10 else times[-1]
    print(f"{name:<46}{statistics.median(times):>10.2f}{p90:>10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--history", type=int, default=2000, help="runs already in the log for the task")
    parser.add_argument("--threads", type=int, default=8)
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(workspace=Path(tmp) / "ws", overrides={})
        services = Services(settings)
        services.store.ensure_agent("default")
        learning = services.learning
        for i in range(10):
            learning.add_strategy("default", f"strategy number {i} " + "x" * 80, actor="bench")
            learning.set_category("default", f"category {i}", "notes " * 50, actor="bench")
        for i in range(20):
            learning.reflect("default", "maze", f"lesson {i} " + "y" * 300, actor="bench")
        for i in range(a.history):
            learning.runs.record(f"old-{i}", "default", "maze", memoryless=i % 5 == 0, score=i % 1000,
                                 breakdown={}, completed=i % 3 != 0, at="2026-01-01T00:00:00", harness_hash=None)

        print(f"{'operation':<46}{'median ms':>10}{'p90 ms':>10}")
        row("record_result (file + run log, one write)",
            timed(lambda i: learning.record_result("default", "maze", i, {"a": i}, actor="bench"), a.runs))
        row("record_result memoryless (run log only)",
            timed(lambda i: learning.record_result("default", "maze", i, memoryless=True, actor="bench"), a.runs))
        row("reflect at the cap (rotates one to the archive)",
            timed(lambda i: learning.reflect("default", "maze", f"more {i}", actor="bench"), a.runs))
        row(f"enter (full memory, {a.history + 2 * a.runs} runs logged)",
            timed(lambda i: learning.enter("default", "maze"), a.runs))
        row("enter memoryless", timed(lambda i: learning.enter("default", "maze", memoryless=True), a.runs))
        row("harness lineage read (includes check)", timed(lambda i: services.lineage.versions("default"), a.runs))

        # Throughput with contention: N threads recording results on one task at once.
        per_thread = max(1, a.runs // a.threads)
        barrier = threading.Barrier(a.threads)

        def worker() -> None:
            barrier.wait()
            for i in range(per_thread):
                learning.record_result("default", "race", i, actor="bench")

        threads = [threading.Thread(target=worker) for _ in range(a.threads)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        count = learning.task_memory("default", "race").attempt_count
        print(f"\n{a.threads} threads x {per_thread} results on one task: {count} attempts recorded "
              f"(expected {a.threads * per_thread}), {count / elapsed:.0f} results/s")
        services.close()


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
