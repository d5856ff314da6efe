"""How long evidence scoring takes at the candidate cap (prints figures; asserts nothing).

    python scripts/bench/dream_scoring.py [--sections 100] [--facts 5]

Builds a synthetic week of daily-note sections (mixed English/Chinese, a share of them recurring)
and times `candidates.score` (shingles, IDF-weighted Jaccard clustering, scoring) and a full rules-mode
dream over a temp workspace.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from _services import bench_services  # scripts/bench/_services.py (this script's folder is on sys.path)

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.memory.dreaming import candidates as cand

WORDS = ["project", "atlas", "deadline", "editor", "dark", "mode", "terminal", "python", "deploy", "review",
         "budget", "meeting", "design", "customer", "invoice", "garden", "running", "coffee", "tea", "train",
         "berlin", "lisbon", "porto", "friday", "weekend"]
ZH = ["用户喜欢喝绿茶", "用户周日早上跑步", "项目截止日期是周五", "用户对花生过敏", "团队决定使用Python",
      "用户住在柏林"]


def fact(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return rng.choice(ZH) + rng.choice(["", "。", "，记住"])
    return " ".join(rng.sample(WORDS, 6)).capitalize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sections", type=int, default=100)
    ap.add_argument("--facts", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    rng = random.Random(7)
    pool = [fact(rng) for _ in range(a.sections * a.facts // 3)]  # ~3x reuse: plenty of recurrence
    today = date(2026, 12, 1)
    cands = [
        cand.Candidate(rel=f"memory/{today - timedelta(days=i % 7):%Y-%m-%d}.md", day=today - timedelta(days=i % 7),
                       heading=f"{i % 24:02d}:00 Note {i}", time=f"{i % 24:02d}:00", text="", line_start=1,
                       line_end=2, explicit=False, facts=tuple(rng.choice(pool) for _ in range(a.facts)))
        for i in range(a.sections)
    ]
    times = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        scored = cand.score(cands, today=today)
        times.append(time.perf_counter() - t0)
    print(f"score(): {a.sections} sections x {a.facts} facts -> {len(scored.clusters)} clusters; "
          f"median {statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms")

    with tempfile.TemporaryDirectory() as tmp:
        tz = ZoneInfo("Europe/Berlin")
        clock = ManualClock(datetime(2026, 11, 24, 9, 0, tzinfo=tz))
        svc = bench_services(Path(tmp), clock)
        for c in cands:
            when = datetime.combine(c.day, datetime.min.time(), tzinfo=tz) + timedelta(hours=int(c.time[:2]))
            svc.store.append_daily("default", c.heading[6:], "\n".join(f"- {f}" for f in c.facts),
                                   actor="extraction", when=when)
        clock.set(datetime(2026, 12, 1, 3, 0, tzinfo=tz))
        t0 = time.perf_counter()
        out = svc.dreaming.dream("default")
        took = time.perf_counter() - t0
        print(f"rules-mode dream over the same week: {out.status}, {len(out.promoted)} promoted, "
              f"{took * 1000:.0f} ms (incl. reading notes, writing MEMORY.md and DREAMS.md)")
        svc.close()


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
