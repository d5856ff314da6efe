#!/usr/bin/env python3
"""Prompt assembly time for an agent with full-size files and 1,000 structured entries.

    .venv/bin/python scripts/bench/context_build.py [--runs 200] [--entries 1000] [--daily 90]

Workspace: PROFILE.md at its 4,000-char ceiling, MEMORY.md at its 8,000-char ceiling, the seeded
AGENTS.md and SOUL.md, `--daily` daily notes (disabled, as they are by default: they cost a listing,
not prompt space), and `--entries` structured entries spread over the four types (half Latin, a
quarter Chinese). Each build assembles the system message (files, the budgeted structured block,
relevant project/reference entries for a query) plus a 20-message history. Prints the median and
p90 per configuration; the aim is a median under 5 ms.
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

from mateclaw_mem.memory.context.assembly import ContextService
from mateclaw_mem.memory.structured.entries import TYPES, StructuredMemory, search_relevance
from mateclaw_mem.runtime.services import Services


def build_workspace(root: Path, entries: int, daily: int) -> Services:
    services = bench_services(root)
    store = services.store
    rng = random.Random(7)
    store.write("default", "PROFILE.md", fill("PROFILE.md", 4000, rng), expected_sha=None, actor="person")
    store.write("default", "MEMORY.md", fill("MEMORY.md", 8000, rng), expected_sha=None, actor="person")
    for d in range(daily):
        store.write("default", f"memory/2026-{1 + d // 28:02d}-{1 + d % 28:02d}.md",
                    "---\nenabled: false\n---\n" + fill("day", 1500, rng), expected_sha="", actor="person")
    per_type = entries // len(TYPES)
    for t in TYPES:
        body = "".join(f"## {t}-{i}\n{sentence(rng, i)}\n> Source: bench | Updated: 2026-{1 + i % 12:02d}-"
                       f"{1 + i % 28:02d}\n\n" for i in range(per_type))
        store.write("default", f"structured/{t}.md", "---\nenabled: false\n---\n" + body, expected_sha="",
                    actor="person")
    return services


def measure(fn, runs: int) -> list[float]:
    fn()  # warm caches (parsed structured files, imports)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return sorted(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--daily", type=int, default=90)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        services = build_workspace(Path(tmp), args.entries, args.daily)
        history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "x" * 300}
                   for i in range(20)]
        query = "how is the garden tomato budget going?"
        ctx_overlap = services.context  # as wired: token overlap over the project/reference entries
        via_search = StructuredMemory(services.store, services.clock, max_chars=4000, max_entries_per_type=40,
                                      relevance=search_relevance(lambda: services.search))
        ctx_search = ContextService(services.store, via_search, ctx_overlap.window, log=services.log)
        # Assembly alone: the same wiring without the provider prefetch stage (two keyword searches).
        ctx_no_prefetch = ContextService(services.store, services.structured, ctx_overlap.window, log=services.log)
        built = ctx_overlap.build("default", query=query, history=history)
        print(f"workspace: {args.entries} structured entries, {args.daily} daily notes; prompt ~{built.tokens} tokens,"
              f" structured block {len(built.structured.text)} chars ({built.structured.omitted_total} left out),"
              f" {len(built.relevant)} relevant entries")
        print(f"{'configuration':<52}{'median ms':>10}{'p90 ms':>10}")
        rows = [
            ("build, query, as wired (with prefetch)", lambda: ctx_overlap.build("default", query=query,
                                                                                          history=history)),
            ("build, query, assembly only (no prefetch)", lambda: ctx_no_prefetch.build("default", query=query,
                                                                                        history=history)),
            ("build, query, relevance via the search index", lambda: ctx_search.build("default", query=query,
                                                                                     history=history)),
            ("build, no query", lambda: ctx_overlap.build("default", history=history)),
            ("build, memoryless", lambda: ctx_overlap.build("default", query=query, history=history,
                                                            memoryless=True)),
        ]
        for name, fn in rows:
            t = measure(fn, args.runs)
            print(f"{name:<52}{statistics.median(t):>10.2f}{t[int(len(t) * 0.9) - 1]:>10.2f}")
        services.close()


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
