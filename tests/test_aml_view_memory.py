"""A search's view of the message index is freed when the search returns (issue 36.3).

A view and its parts (`_Docs`, `_Df`, `DocInfo`) referred to each other, so each search's view -
its columns and arrays, megabytes at 100k messages - was cyclic garbage that only a full collection
freed: 300 warm searches at 100k messages held RSS ~100 MB above the byte cache's bound. With the
collector off, nothing of a search may be left for it."""

from __future__ import annotations

import gc
from pathlib import Path

from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.index.messages.disk_docs import DocInfo
from mateclaw_mem.index.messages.disk_view import DiskView
from mateclaw_mem.index.messages.index import MessageIndex

TS = 1_683_554_160_000


def _alive(kind: type) -> int:
    return sum(1 for o in gc.get_objects() if type(o) is kind)


def test_a_search_leaves_no_view_for_the_cyclic_collector(tmp_path: Path) -> None:
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    try:
        for n in range(6):
            lines = [f"Caroline: the lighthouse painting number {n} is blue", f"Melanie: I love painting {n}",
                     "Caroline: thanks! what about the pottery class?", f"Melanie: pottery on day {n}"]
            log.append("aml", f"s{n}", [NewMessage("user", t, TS + 10 * n + i) for i, t in enumerate(lines)],
                       owner="u", now_ms=TS)
        index.sync(log)
        assert index.search("aml", "u", "what did Caroline paint?", limit=5)  # imports and caches warmed
        gc.collect()
        gc.disable()
        try:
            hits = index.search("aml", "u", "when is the pottery class Melanie mentioned?", limit=5)
            assert hits and any("pottery" in h.content for h in hits)
            # The ranking read documents (DocInfo, through the view's `by_id`) and frequencies (`df`).
            assert (_alive(DiskView), _alive(DocInfo)) == (0, 0)
        finally:
            gc.enable()
    finally:
        index.close()
        log.close()


def test_the_byte_cache_keeps_no_more_than_it_counts(tmp_path: Path) -> None:
    """`aml.cache-bytes` bounds RSS only if the cache's count is what its entries take: every byte
    Python allocates for them (arrays, keys, the dict's nodes, a row's strings) is traced, and must fit
    in the count - and the count must not be far above it (a bound that holds half of what it says)."""
    import random
    import tracemalloc

    rng = random.Random(7)
    words = [f"w{k}" for k in range(400)] + ["pottery", "lighthouse", "painting", "class", "camping", "book"]
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    try:
        for n in range(40):
            lines = [f"{rng.choice(['Caroline', 'Melanie', 'Gina'])}: {' '.join(rng.choices(words, k=12))}"
                     for _ in range(20)]
            log.append("aml", f"s{n}", [NewMessage("user", t, TS + 100 * n + i) for i, t in enumerate(lines)],
                       owner="u", now_ms=TS)
            index.sync(log)
        queries = [" ".join(rng.choices(words, k=4)) + "?" for _ in range(40)]

        def searches() -> None:
            for q in queries:
                assert index.search("aml", "u", q, limit=20)

        searches()  # imports, compiled patterns and the like made once
        index.cache.clear()
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            searches()
            gc.collect()
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        counted = index.cache.size
        assert counted > 100_000  # (the searches did fill it)
        assert kept <= counted <= 1.5 * kept, (kept, counted)
    finally:
        index.close()
        log.close()


def test_the_searchs_kept_arrays_follow_the_cache_bound(tmp_path: Path) -> None:
    """The first stage's dense arrays stay resident between searches (candidates._Dense) within a
    sixteenth of `aml.cache-bytes`: none at all with 0, the promise that RSS stays within the bound of
    the idle daemon (the arrays of another index's earlier searches are let go too)."""
    from mateclaw_mem.index.messages import candidates

    log = ConversationLog(tmp_path / "log.db")
    try:
        for n in range(8):
            lines = [f"Caroline: the lighthouse painting number {n} is blue", f"Melanie: I love painting {n}"]
            log.append("aml", f"s{n}", [NewMessage("user", t, TS + 10 * n + i) for i, t in enumerate(lines)],
                       owner="u", now_ms=TS)
        for bound, kept in ((64 << 20, True), (0, False), (64 << 20, True), (16 * 8 * 20, True), (16 * 8 * 10, False)):
            index = MessageIndex(tmp_path / f"messages-{bound}.db", cache_bytes=bound)
            try:
                index.sync(log)
                assert index.search("aml", "u", "what did Caroline paint?", limit=5)
                held = sum(b.nbytes for b, _ in candidates._DENSE._free)
                assert (held > 0) == kept and held <= min(candidates.KEEP_BYTES, bound // 16), (bound, held)
            finally:
                index.close()
    finally:
        log.close()
