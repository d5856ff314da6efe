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

from mateclaw_mem.clock import SystemClock
from mateclaw_mem.memory.context import ContextService
from mateclaw_mem.memory.structured import TYPES, StructuredMemory, search_relevance
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings

WORDS = ["garden", "tomato", "python", "sqlite", "berlin", "coffee", "running", "sunday", "meeting", "budget",
         "invoice", "travel", "kyoto", "train", "music", "jazz", "piano", "daughter", "school", "dentist", "report",
         "deadline", "release", "server"]
ZH = "用户喜欢周日早上跑步咖啡花园项目预算会议旅行音乐钢琴学校报告发布服务器"


def _sentence(rng: random.Random, i: int) -> str:
    if i % 4 == 3:
        return "".join(rng.choice(ZH) for _ in range(rng.randint(12, 30)))
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))).capitalize() + "."


def _fill(title: str, size: int, rng: random.Random) -> str:
    out = [f"# {title}\n"]
    n = 0
    while sum(map(len, out)) < size - 200:
        out.append(f"\n## Section {n}\n\n" + "".join(f"- {_sentence(rng, j)}\n" for j in range(6)))
        n += 1
    return "".join(out)


def build_workspace(root: Path, entries: int, daily: int) -> Services:
    cfg = root / "bench.yaml"
    cfg.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    services = Services(load_settings(cfg, root / "ws"), SystemClock())
    store = services.store
    store.ensure_agent("default")
    rng = random.Random(7)
    store.write("default", "PROFILE.md", _fill("PROFILE.md", 4000, rng), expected_sha=None, actor="person")
    store.write("default", "MEMORY.md", _fill("MEMORY.md", 8000, rng), expected_sha=None, actor="person")
    for d in range(daily):
        store.write("default", f"memory/2026-{1 + d // 28:02d}-{1 + d % 28:02d}.md",
                    "---\nenabled: false\n---\n" + _fill("day", 1500, rng), expected_sha="", actor="person")
    per_type = entries // len(TYPES)
    for t in TYPES:
        body = "".join(f"## {t}-{i}\n{_sentence(rng, i)}\n> Source: bench | Updated: 2026-{1 + i % 12:02d}-"
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
        built = ctx_overlap.build("default", query=query, history=history)
        print(f"workspace: {args.entries} structured entries, {args.daily} daily notes; prompt ~{built.tokens} tokens,"
              f" structured block {len(built.structured.text)} chars ({built.structured.omitted_total} left out),"
              f" {len(built.relevant)} relevant entries")
        print(f"{'configuration':<52}{'median ms':>10}{'p90 ms':>10}")
        rows = [
            ("build, query, relevance by token overlap (wired)", lambda: ctx_overlap.build("default", query=query,
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
    main()
