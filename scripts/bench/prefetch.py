#!/usr/bin/env python3
"""What provider prefetch costs a prompt.

    .venv/bin/python scripts/bench/prefetch.py [--runs 200] [--daily 90] [--messages 2000]

Workspace: MEMORY.md at its 8,000-char ceiling, `--daily` daily notes of ~1,500 chars, and
`--messages` conversation messages over 100 conversations (a quarter Chinese). Prints the median and
p90 of: each built-in provider called directly, the registry running both (threads, deadlines,
report), and a whole prompt build with the RECALLED MEMORY block against one without it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from _services import bench_services
from _text import fill, sentence  # scripts/bench/_text.py (this script's folder is on sys.path)

from mateclaw_mem.conversations.log import NewMessage
from mateclaw_mem.memory.context.assembly import ContextService
from mateclaw_mem.providers.conversation_hits import ConversationHitsProvider
from mateclaw_mem.providers.search_hits import SearchHitsProvider
from mateclaw_mem.runtime.services import Services


def build(root: Path, daily: int, messages: int) -> Services:
    services = bench_services(root)
    store = services.store
    rng = random.Random(7)
    store.write("default", "MEMORY.md", fill("MEMORY.md", 8000, rng), expected_sha=None, actor="person")
    for d in range(daily):
        store.write("default", f"memory/2026-{1 + d // 28:02d}-{1 + d % 28:02d}.md", fill("day", 1500, rng),
                    expected_sha=None, actor="person")
    t0 = 1_764_000_000_000
    for i in range(messages):
        services.log.append("default", f"c{i % 100}", [NewMessage("user" if i % 2 == 0 else "assistant",
                                                                  sentence(rng, i))], now_ms=t0 + i * 60_000)
    services.search.search("warm up the index", record=False)
    return services


def measure(fn, runs: int) -> tuple[float, float]:
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9) - 1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--daily", type=int, default=90)
    parser.add_argument("--messages", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        services = build(Path(tmp), args.daily, args.messages)
        query = "how is the garden tomato budget going? 预算"
        history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "x" * 300}
                   for i in range(20)]
        with_recall = services.context
        without = ContextService(services.store, services.structured, with_recall.window, log=services.log)
        search_hits = SearchHitsProvider(lambda: services.search)
        conv_hits = ConversationHitsProvider(lambda: services.message_index, lambda: services.log, services.clock.tz)
        built = with_recall.build("default", query=query, history=history)
        recalled = built.recalled
        print(f"workspace: {args.daily} daily notes, {args.messages} messages; RECALLED block "
              f"{len(recalled.text) if recalled else 0} chars, {len(recalled.items) if recalled else 0} items,"
              f" {recalled.duplicates if recalled else 0} duplicates dropped")
        print(f"{'configuration':<52}{'median ms':>10}{'p90 ms':>10}")
        rows = [
            ("search_hits provider alone (records retrievals)",
             lambda: search_hits.prefetch("default", None, query, deadline=0.0)),
            ("conversation_hits provider alone", lambda: conv_hits.prefetch("default", None, query, deadline=0.0)),
            ("registry: both, concurrently", lambda: services.providers.prefetch("default", None, query)),
            ("prompt build with prefetch (wired)", lambda: with_recall.build("default", query=query,
                                                                             history=history)),
            ("prompt build without prefetch", lambda: without.build("default", query=query, history=history)),
        ]
        for name, fn in rows:
            median, p90 = measure(fn, args.runs)
            print(f"{name:<52}{median:>10.2f}{p90:>10.2f}")
        status = services.providers.status()["providers"]
        print("circuits:", {n: (p["circuit"], p["timeouts"]) for n, p in status.items()})
        services.close()


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
