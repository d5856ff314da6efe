"""The dates a Search hit carries (`created_at`, and the "[2023-05-08 Mon]" its content starts with):
exact to the millisecond in UTC, before 1970 too, and formatted from a cache of days, not of timestamps
(one of timestamps held ~3 MB once a few thousand hits had been shown, resident beside the Add/Search
cache and taken from its room under aml.cache-bytes)."""

from __future__ import annotations

import random
import tracemalloc
from datetime import UTC, datetime, timedelta

from mateclaw_mem.conversations import aml

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")  # (not %a: that is the locale's)


def test_created_at_and_the_date_prefix_are_exact() -> None:
    rng = random.Random(5)
    stamps = [rng.randrange(-10**12, 4 * 10**12) for _ in range(20_000)]
    stamps += [0, -1, 999, 1000, 86_399_999, 86_400_000, -86_400_001, 1_683_554_160_000]
    for ts in stamps:
        d = EPOCH + timedelta(milliseconds=ts)  # (integer arithmetic: the reference has no float rounding)
        assert aml._iso(ts) == d.isoformat(timespec="milliseconds").replace("+00:00", "Z"), ts
        assert aml._date_prefix(ts) == f"[{d:%Y-%m-%d} {DAYS[d.weekday()]}]", ts


def test_many_hits_leave_no_cache_of_their_timestamps() -> None:
    start = 1_683_554_160_000
    aml._iso(start), aml._date_prefix(start)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k in range(20_000):  # 20,000 hits over ~30 days
            ts = start + k * 129_600 + k % 1000
            aml._iso(ts), aml._date_prefix(ts)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 100_000  # a few dozen days' strings (cached by timestamp, 8,192 of each: 2.95 MB)
