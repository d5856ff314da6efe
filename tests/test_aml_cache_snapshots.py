"""The byte cache (messages/view_cache.py) with searches beside a writer, each in its own snapshot (the
PostgreSQL store's searches run so): a search reading one version of an owner while a writer commits
the next, in both orders of the interleaving, ranks as its version did, and every later search as the
next version read afresh; a search of an older index generation keeps nothing for the new one."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.db import connect, immediate
from mateclaw_mem.index.messages import postings
from mateclaw_mem.index.messages.disk_view import ByteCache, DiskView, open_view
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.index.messages.ranking import Ranking, rank
from mateclaw_mem.index.messages.storage import _Merger
from tests.support.disk_reference import disk_view, random_line, random_query

TS = 1683554160000
BASE = Ranking()


@pytest.fixture(autouse=True)
def _merges_when_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postings, "SEG_POSTINGS", 6)
    monkeypatch.setattr(postings, "DELTA_MAX", 60)
    monkeypatch.setattr(_Merger, "QUIET", 3600.0)  # merged when the test says
    monkeypatch.setattr(_Merger, "PATIENCE", 3600.0)


def _add(rng: random.Random, log: ConversationLog, k: int) -> None:
    lines = [random_line(rng) for _ in range(rng.randint(1, 6))]
    log.append("aml", f"c{rng.randint(0, 3)}", [NewMessage("user", t, TS + k * 1000 + i) for i, t in enumerate(lines)],
               owner="u1", now_ms=TS)


def _grown(tmp_path: Path, seed: int, adds: int) -> tuple[random.Random, ConversationLog, MessageIndex]:
    rng = random.Random(seed)
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    for k in range(adds):
        _add(rng, log, k)
        index.sync(log)
        if k % 7 == 6:
            index._storage.merger.run_now()
    return rng, log, index


def _queries(rng: random.Random) -> list[tuple[str, list[str]]]:
    return [random_query(rng) for _ in range(12)] + [("the and my", []), ("When did Caroline and Melanie?", [])]


def _cold(index: MessageIndex, queries: list[tuple[str, list[str]]]) -> list[list[tuple[float, int]]]:
    """The committed index's ranking read afresh (an empty cache), on the writer's connection."""
    cache = ByteCache(1 << 30)
    with index.lock:
        return [rank(disk_view(index, "aml", "u1", cache), q, o, BASE, limit=100) for q, o in queries]


def _okey(index: MessageIndex) -> int:
    with index.lock:
        return int(index._storage._conn.execute("SELECT okey FROM powners WHERE owner = 'u1'").fetchone()[0])


@contextmanager
def _second(index: MessageIndex) -> Iterator[sqlite3.Connection]:
    """Another connection to the index's file, the log attached read-only as the index's own has it."""
    conn = connect(index.path, uri=True)
    try:
        conn.execute("ATTACH DATABASE ? AS log", (f"file:{quote(str(index._storage.log_db.resolve()))}?mode=ro",))
        yield conn
    finally:
        conn.close()


@pytest.mark.parametrize("write", ["merge", "add"])
@pytest.mark.parametrize("order", ["reader-first", "writer-first"])
def test_the_cache_stays_right_while_a_search_reads_a_version_and_a_writer_commits_the_next(
        tmp_path: Path, write: str, order: str) -> None:
    """A search on the owner's version v, with a writer making v+1: `reader-first` - the search's
    snapshot and cache check before the write, its reads (cache gets and puts) after the writer told
    the cache and committed; `writer-first` - the writer told the cache (ByteCache.wrote) inside its
    still open transaction, then the search checks v, reads and keeps what it read, then the writer
    commits. Both times the search ranks as v did, and every later search as v+1 read afresh does."""
    rng, log, index = _grown(tmp_path, 11 + (write == "add"), adds=70)
    _add(rng, log, 70)
    index.sync(log)  # unmerged rows
    queries = _queries(rng)
    for q, o in queries:  # a warm cache, of version v
        index.search("aml", "u1", q, limit=10, options=o)
    old = _cold(index, queries)
    storage, okey = index._storage, _okey(index)

    def write_now() -> None:
        if write == "merge":
            assert postings.merge_owner(storage._conn, okey, index.cache) > 0
        else:
            for k in range(71, 74):
                _add(rng, log, k)
            mark = int(storage._conn.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()[0])
            msgs = log.since(mark, limit=1000)
            storage._add_batch(msgs)
            storage._conn.execute("UPDATE meta SET value = ? WHERE key = 'watermark'", (str(msgs[-1].id),))

    def read(view_of: Callable[[], DiskView | None]) -> list[list[tuple[float, int]]]:
        out = []
        for q, o in queries:
            view = view_of()
            assert view is not None
            out.append(rank(view, q, o, BASE, limit=100))
        return out

    with _second(index) as rc:
        rc.execute("BEGIN")
        if order == "reader-first":
            view = open_view(rc, "aml", "u1", index.cache)  # the snapshot and the cache's check: v
            with index.lock, immediate(storage._conn, index.lock):
                write_now()
            during = read(lambda: view)
        else:
            with index.lock, immediate(storage._conn, index.lock):
                write_now()
                during = read(lambda: open_view(rc, "aml", "u1", index.cache))
        rc.execute("COMMIT")
    assert during == old
    new = _cold(index, queries)
    if write == "add":
        assert new != old  # (the write changed answers: a stale cache would show)
    with _second(index) as rc:
        def fresh() -> DiskView | None:
            rc.execute("BEGIN")
            try:
                return open_view(rc, "aml", "u1", index.cache)
            finally:
                rc.execute("COMMIT")

        for _ in range(2):  # what the cache kept, then what it keeps of these reads
            assert read(fresh) == new
    for x in (index, log):
        x.close()




def test_a_search_of_an_older_generation_keeps_nothing_for_the_new_one() -> None:
    """A search still reading the snapshot before a rebuild (generation g1) and one after it (g2), the
    owner's key and version the same in both (a rebuild numbers versions afresh): what the first
    reads is not kept as the second's."""
    cache = ByteCache(1 << 20)
    cache.check("g1", 1, 3)  # the older search opens its view
    cache.check("g2", 1, 3)  # the newer one
    old = np.arange(4, dtype=np.uint32)
    cache.put(("t", 1, "tomato"), old, old.nbytes, ("g1", 3))  # the older search keeps what it read
    assert cache.get(("t", 1, "tomato"), ("g2", 3)) is None
    new = np.arange(5, dtype=np.uint32)
    cache.put(("t", 1, "tomato"), new, new.nbytes, ("g2", 3))
    assert cache.get(("t", 1, "tomato"), ("g2", 3)) is new
    assert cache.get(("t", 1, "tomato"), ("g1", 3)) is None
