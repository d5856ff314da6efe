"""The on-disk message index ranks exactly as the in-memory view it replaced: on random
conversations of several owners, added in chunks with searches between them (so the byte cache is
kept and invalidated along the way) and with facts among the turns, the tables hold the view's
statistics, counts, lengths, features and links, and every search gives the view's top 100 - the
same turns, the same order, the same scores - for the default ranking and knobs that take other
branches. The in-memory view is itself held to the plain loops (test_aml_candidates.py,
test_aml_scoring.py)."""

from __future__ import annotations

import logging
import random
import re
import sqlite3
import threading
from collections import Counter
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.index.messages import postings
from mateclaw_mem.index.messages.delta import narrow, pack_segment, unpack_segment
from mateclaw_mem.index.messages.disk_view import ByteCache
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.index.messages.ranking import rank
from mateclaw_mem.index.messages.storage import _Merger
from mateclaw_mem.index.messages.view_cache import Overlay
from mateclaw_mem.index.tokenizer import tokenize
from tests.support.disk_reference import (
    BASE,
    RANKINGS,
    disk_state,
    disk_view,
    random_line,
    random_query,
    reference_state,
    reference_view,
)

TS = 1683554160000


@dataclass(frozen=True)
class _Fact:
    id: int
    agent: str
    owner: str | None
    conversation_id: str
    text: str
    ts_ms: int
    source_ids: tuple[int, ...]


class _Facts:
    """A fact store's `facts_since` over a list (index.sources.FactSource)."""

    def __init__(self) -> None:
        self.facts: list[_Fact] = []

    def facts_since(self, after_id: int, *, limit: int = 1000) -> list[_Fact]:
        return [f for f in self.facts if f.id > after_id][:limit]


def _grown(tmp_path: Path, seed: int, owners: tuple[str, ...], adds: int, convs: int, *, searches: bool = True,
           **kw: int) -> tuple[random.Random, ConversationLog, MessageIndex]:
    rng = random.Random(seed)
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db", **kw)
    _grow(rng, log, index, _Facts(), owners, adds=adds, convs=convs, searches=searches)
    return rng, log, index


def _grow(rng: random.Random, log: ConversationLog, index: MessageIndex, facts: _Facts, owners: tuple[str, ...],
          adds: int, convs: int, searches: bool) -> None:
    for k in range(adds):
        owner = rng.choice(owners)
        conv = f"{owner}-c{rng.randint(0, convs - 1)}"
        lines = [random_line(rng) for _ in range(rng.randint(1, 9))]
        ts = TS + rng.randint(0, 400) * 86_400_000
        log.append("aml", conv, [NewMessage("user", t, ts + i) for i, t in enumerate(lines)], owner=owner, now_ms=TS)
        index.sync(log)
        if rng.random() < 0.15:
            last = log.since(0, limit=100_000)[-1]
            facts.facts.append(_Fact(len(facts.facts) + 1, "aml", last.owner, last.conversation_id,
                                     random_line(rng).split(": ", 1)[-1], last.ts_ms, (last.id,)))
            index.sync_facts(facts)
        if searches and k % 3 == 0:
            index.search("aml", owner, random_query(rng)[0], limit=10)


@pytest.mark.parametrize("seed", range(10))
def test_the_disk_index_ranks_exactly_like_the_in_memory_view(tmp_path: Path, seed: int,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    if seed >= 8:  # tiny segments and merges at nearly every Add: every path of the segment writes
        monkeypatch.setattr(postings, "SEG_POSTINGS", 4)
        monkeypatch.setattr(postings, "DELTA_MAX", 40 * (seed - 7))
    rng = random.Random(seed)
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    facts = _Facts()
    owners = ("u1", "u2")
    _grow(rng, log, index, facts, owners, adds=20 + 25 * (seed % 8), convs=2 + seed % 5, searches=True)
    compared = found = 0
    for owner in owners:
        ref = reference_view(index, "aml", owner)
        assert disk_state(index, "aml", owner) == reference_state(ref)
        for _ in range(12):
            query, options = random_query(rng)
            for name, r in RANKINGS.items():
                # A fresh view per search, as the index opens one; the cache carries between them. Under
                # the lock, as a search reads: the merger (seeds 8, 9 merge all along) takes it too, and a
                # merge landing between the view's reads would count its folded rows twice.
                with index.lock:
                    got = rank(disk_view(index, "aml", owner), query, options, r, limit=100)
                want = rank(ref, query, options, r, limit=100)
                assert got == want, (seed, owner, query, options, name)
                compared += 1
                found += bool(got)
        # And through the index's own search (its cache warm from the searches above).
        query, options = random_query(rng)
        hits = index.search("aml", owner, query, limit=100, options=options)
        assert [(h.score, h.id) for h in hits] == [(round(s, 6), i) for s, i in rank(ref, query, options, BASE,
                                                                                       limit=100)]
    assert found > compared * 0.7
    for x in (index, log):
        x.close()


def test_the_name_boosts_test_of_each_candidate_is_the_subset_test_of_its_names(tmp_path: Path) -> None:
    """`Columns.names_within` (a who/where question's boost: each distinct set of names tested once)
    gives, for every turn of both views, what `names <= known` of the turn itself gives."""
    rng, _log, index = _grown(tmp_path, 11, ("u1",), adds=60, convs=4)
    ref = reference_view(index, "aml", "u1")
    with index.lock:
        view = disk_view(index, "aml", "u1")
        rank(view, "Who went where with the dog?", [], BASE, limit=100)  # (positions for the turns it met)
        pos = np.arange(len(view.ids))
        view.prepare(pos)
    every = sorted({n for i in ref.ids for n in ref.by_id[i].names})
    assert len(every) > 3 and len(pos) > 50
    for known in (frozenset(), frozenset(every), *(frozenset(rng.sample(every, k)) for k in (1, 2, 3, 3))):
        for v, at in ((view, pos), (ref, np.arange(len(ref.ids)))):
            want = [v.by_id[int(v.ids[p])].names <= known for p in at.tolist()]
            assert v.cols.names_within(at, known).tolist() == want, (sorted(known), type(v).__name__)
            assert sum(want) not in (0, len(want)) or known in (frozenset(), frozenset(every))


def _pending(index: MessageIndex, owner: str) -> int:
    with index._lock:
        r = index._storage._conn.execute("SELECT pending FROM powners WHERE agent = 'aml' AND owner = ?",
                                         (owner,)).fetchone()
    return int(r[0])


def test_an_add_leaves_the_merge_to_the_merger_and_every_moment_ranks_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postings, "SEG_POSTINGS", 4)
    monkeypatch.setattr(postings, "DELTA_MAX", 300)
    monkeypatch.setattr(_Merger, "QUIET", 3600.0)  # the merger waits: what the Adds left is seen
    monkeypatch.setattr(_Merger, "PATIENCE", 3600.0)
    rng, log, index = _grown(tmp_path, 17, ("u1",), adds=40, convs=3, searches=False)
    before = _pending(index, "u1")
    # The Adds crossed the threshold and left their rows unmerged (up to the bound past which an
    # Add merges itself), the owner handed to the merger.
    assert postings.DELTA_MAX < before <= postings.DELTA_HARD * postings.DELTA_MAX + 1000
    assert index._storage.merger._due
    queries = [random_query(rng) for _ in range(15)]
    ref = reference_view(index, "aml", "u1")
    want = [rank(ref, q, o, BASE, limit=100) for q, o in queries]
    assert [rank(disk_view(index, "aml", "u1"), q, o, BASE, limit=100) for q, o in queries] == want
    index._storage.merger.run_now()
    assert _pending(index, "u1") == 0
    assert disk_state(index, "aml", "u1") == reference_state(ref)
    assert [rank(disk_view(index, "aml", "u1"), q, o, BASE, limit=100) for q, o in queries] == want
    for x in (index, log):
        x.close()


@pytest.mark.parametrize("seed", range(3))
def test_what_a_merge_leaves_in_the_cache_ranks_like_a_fresh_read_at_every_step(
        tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A merge keeps a term's cached postings and saturated values below the segments it rewrote
    (ByteCache.wrote's cuts); a search after it reads and scores only the rest. Searched and held
    to the in-memory view after every Add - merges every few Adds, unmerged rows between them, turns
    of older conversations growing below a cut - and against a cold cache."""
    monkeypatch.setattr(postings, "SEG_POSTINGS", 6)
    monkeypatch.setattr(postings, "DELTA_MAX", 60)
    monkeypatch.setattr(_Merger, "QUIET", 3600.0)  # merged when the test says (run_now)
    monkeypatch.setattr(_Merger, "PATIENCE", 3600.0)
    # A history long enough for the average lengths to hold still over most Adds (kept values are
    # of one set of averages), then Adds to four conversations in turn.
    rng, log, index = _grown(tmp_path, 1000 + seed, ("u1",), adds=120, convs=4, searches=False)
    kept: Counter[str] = Counter()  # what was read of the entries a merge left
    read = ByteCache.get

    def counting(cache: ByteCache, key: tuple[object, ...], version: int | None = None) -> object:
        got = read(cache, key, version)
        if got is not None and key[0] in ("tp", "vp", "va"):
            kept[str(key[0])] += 1
        return got

    monkeypatch.setattr(ByteCache, "get", counting)
    adds_after = Overlay.adds_after

    def extending(overlay: Overlay, *args: Any) -> bool:
        got = adds_after(overlay, *args)
        kept["extended" if got else "not extended"] += 1
        return got

    monkeypatch.setattr(Overlay, "adds_after", extending)
    index._storage.merger.run_now()
    queries = [random_query(rng) for _ in range(4)] + [("the and my", []), ("When did Caroline and Melanie?", [])]
    for k in range(30):
        conv = f"c{rng.randint(0, 3)}"
        lines = [random_line(rng) for _ in range(rng.randint(1, 5))]
        log.append("aml", conv, [NewMessage("user", t, TS + k * 1000 + i) for i, t in enumerate(lines)], owner="u1",
                   now_ms=TS)
        index.sync(log)
        if k % 4 == 3:
            index._storage.merger.run_now()
        ref = reference_view(index, "aml", "u1")
        for query, options in queries:
            want = rank(ref, query, options, BASE, limit=100)
            with index.lock:
                assert rank(disk_view(index, "aml", "u1"), query, options, BASE, limit=100) == want, (k, query)
            if k % 5 == 4:
                assert rank(disk_view(index, "aml", "u1", ByteCache(1 << 30)), query, options, BASE,
                            limit=100) == want
    assert kept["tp"] > 20 and kept["vp"] > 20, kept
    # Values that unmerged rows extend (ByteCache.drop_values): mostly scored on from where they
    # ended; not where a grown turn's new entry falls among them.
    assert kept["extended"] > 20 and kept["not extended"] > 0, kept
    for x in (index, log):
        x.close()


def test_the_merger_thread_merges_between_adds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postings, "DELTA_MAX", 300)
    monkeypatch.setattr(_Merger, "QUIET", 0.0)
    rng, log, index = _grown(tmp_path, 23, ("u1", "u2"), adds=40, convs=3, searches=True)
    assert index._storage.merger._thread is not None  # (the Adds crossed the threshold)
    for _ in range(500):  # the thread's turn (no timing asserted: it gets up to 5 s)
        if all(_pending(index, o) <= postings.DELTA_MAX for o in ("u1", "u2")):
            break
        threading.Event().wait(0.01)
    for owner in ("u1", "u2"):
        assert _pending(index, owner) <= postings.DELTA_MAX
        ref = reference_view(index, "aml", owner)
        assert disk_state(index, "aml", owner) == reference_state(ref)
        query, options = random_query(rng)
        assert rank(disk_view(index, "aml", owner), query, options, BASE, limit=100) == rank(
            ref, query, options, BASE, limit=100)
    for x in (index, log):
        x.close()


def test_a_cache_too_small_for_anything_and_a_cold_one_answer_the_same(tmp_path: Path) -> None:
    rng, log, index = _grown(tmp_path, 99, ("u1",), adds=60, convs=3)
    tiny = ByteCache(0)
    for _ in range(20):
        query, options = random_query(rng)
        want = rank(reference_view(index, "aml", "u1"), query, options, BASE, limit=100)
        assert rank(disk_view(index, "aml", "u1", tiny), query, options, BASE, limit=100) == want
        assert rank(disk_view(index, "aml", "u1", ByteCache(1 << 30)), query, options, BASE, limit=100) == want
    assert tiny.size == 0
    for x in (index, log):
        x.close()


def test_a_search_reads_through_few_statement_texts_and_finds_what_it_did(tmp_path: Path) -> None:
    """Every `IN (...)` a search binds holds a power of two of values (the last repeated): a search's
    lists differ in length, and each length was a statement of its own, prepared again once the
    connection's statement cache had moved past it (disk_docs.in_list)."""
    rng, log, index = _grown(tmp_path, 7, ("u1", "u2"), adds=90, convs=4, searches=False, cache_bytes=0)
    sizes: Counter[int] = Counter()
    lists = re.compile(r" IN \(([^()]*)\)")
    literal = re.compile(r"'(?:[^']|'')*'|-?\d+")

    def seen(sql: str) -> None:
        sizes.update(len(literal.findall(inner)) for inner in lists.findall(sql))

    conn = index._storage._conn
    for _ in range(30):
        owner = rng.choice(("u1", "u2"))
        query, options = random_query(rng)
        conn.set_trace_callback(seen)
        hits = index.search("aml", owner, query, limit=100, options=options)
        conn.set_trace_callback(None)
        want = rank(reference_view(index, "aml", owner), query, options, BASE, limit=100)
        assert [(h.score, h.id) for h in hits] == [(round(sc, 6), i) for sc, i in want]
    assert sum(sizes.values()) > 60 and len(sizes) > 3  # (lists of several lengths were read)
    assert all(n & (n - 1) == 0 for n in sizes), sorted(sizes)
    for x in (index, log):
        x.close()


def test_the_cache_stays_within_its_bytes(tmp_path: Path) -> None:
    rng, log, index = _grown(tmp_path, 5, ("u1", "u2", "u3"), adds=80, convs=4, searches=False, cache_bytes=20_000)
    for _ in range(40):
        index.search("aml", rng.choice(("u1", "u2", "u3")), random_query(rng)[0], limit=20)
        assert 0 < index.cache.size <= 20_000
    for x in (index, log):
        x.close()


def test_an_older_file_is_migrated_once_in_place(tmp_path: Path) -> None:
    """A messages.db written before the postings existed (documents only) gets them at its first
    open, once: the next open finds the marker, and the searches rank as the in-memory view did."""
    rng, log, index = _grown(tmp_path, 11, ("u1",), adds=30, convs=3, searches=False)
    ref = reference_view(index, "aml", "u1")
    index.close()
    with sqlite3.connect(tmp_path / "messages.db") as old:  # as an older version left it
        old.executescript("DROP TABLE powners; DROP TABLE postings; DROP TABLE pdocs; DROP TABLE pfeat;"
                          " DROP TABLE pspeakers; DROP TABLE pdelta; DELETE FROM meta WHERE key = 'migrated:postings-2';")
    again = MessageIndex(tmp_path / "messages.db")
    with sqlite3.connect(tmp_path / "messages.db") as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'migrated:postings-2'").fetchone()[0] == str(ref.n)
    assert disk_state(again, "aml", "u1") == reference_state(ref)
    for _ in range(10):
        query, options = random_query(rng)
        assert rank(disk_view(again, "aml", "u1"), query, options, BASE, limit=100) == \
            rank(ref, query, options, BASE, limit=100)
    again.close()
    with sqlite3.connect(tmp_path / "messages.db") as conn:  # a postings row the next open must not rebuild
        conn.execute("UPDATE powners SET version = version + 1000")
    third = MessageIndex(tmp_path / "messages.db")
    with sqlite3.connect(tmp_path / "messages.db") as conn:
        assert conn.execute("SELECT MIN(version) FROM powners").fetchone()[0] >= 1000
    for x in (third, log):
        x.close()


def test_a_rebuild_and_a_forget_leave_the_tables_as_a_fresh_index_would(tmp_path: Path) -> None:
    _, log, index = _grown(tmp_path, 21, ("u1", "u2"), adds=40, convs=3)
    assert index.rebuild(log, batch=7) > 0
    for owner in ("u1", "u2"):
        assert disk_state(index, "aml", owner) == reference_state(reference_view(index, "aml", owner))
    assert index.rebuild(log) > 0  # twice: the tables built aside are swapped in again
    hits = index.search("aml", "u1", "pottery glazes kiln camping", limit=5)
    target = hits[0].id if hits else log.since(0, limit=1)[0].id
    # As a forget does it: the log's text rewritten first (the index reads the text from it), then the index.
    old = next(m.content for m in log.since(target - 1, limit=1))
    changes = log.rewrite("aml", "u1", lambda t: "Ann: [forgotten]" if t == old else t)["messages"]
    assert changes[target] == "Ann: [forgotten]"
    assert index.rewrite("aml", "u1", changes) == len(changes)
    state = disk_state(index, "aml", "u1")
    assert state == reference_state(reference_view(index, "aml", "u1"))
    # The forgotten words left the turn's own field: only the new text's terms count in its body.
    in_body = {t for t, d in state.postings.items() if d.get(target, 0) & 0xFFFF}
    assert in_body == set(tokenize("[forgotten]"))
    for x in (index, log):
        x.close()


def _as_older_layout(path: Path) -> None:
    """`postings` as versions before the clustered table made it: a rowid table and a unique index."""
    with sqlite3.connect(path) as conn:
        conn.executescript("""
            CREATE TABLE postings_old (okey INTEGER NOT NULL, term TEXT NOT NULL, first INTEGER NOT NULL,
                df INTEGER NOT NULL, ords BLOB NOT NULL, packed BLOB NOT NULL, UNIQUE (okey, term, first));
            INSERT INTO postings_old SELECT okey, term, first, df, ords, packed FROM postings;
            DROP TABLE postings;
            ALTER TABLE postings_old RENAME TO postings;""")
    with closing(sqlite3.connect(path)) as conn:
        assert postings.has_rowid(conn)


def test_segments_are_stored_gap_encoded_and_narrow_and_older_segments_are_packed_once(tmp_path: Path) -> None:
    """A segment is one blob (`delta.pack_segment`): its ordinals as gaps and its four counts at 2
    bits a field when each is under 4, 16 when one is not (a word said 300 times in a turn); an
    older file's segments (ordinals as uint32, counts in `packed`, narrowed or wide) are read as they
    are and packed in place once, the file compacted, and every count and ranking stays what the
    in-memory view computes."""
    rng, log, index = _grown(tmp_path, 31, ("u1",), adds=40, convs=3, searches=False)
    log.append("aml", "u1-c0", [NewMessage("user", "Ann: " + "zebra " * 300, TS)], owner="u1", now_ms=TS)
    index.sync(log)
    index._storage.merger.run_now()
    postings.merge_owner(index._storage._conn, 1)  # (every entry in the segments, the delta empty)
    ref = reference_view(index, "aml", "u1")
    assert disk_state(index, "aml", "u1") == reference_state(ref)
    index.close()

    def layout() -> dict[str, set[tuple[int, int]]]:
        """Per term, its segments' (count width code, bytes an entry in `packed`: 0 once packed)."""
        with sqlite3.connect(tmp_path / "messages.db") as conn:
            got: dict[str, set[tuple[int, int]]] = {}
            for term, ords, packed in conn.execute("SELECT term, ords, packed FROM postings"):
                got.setdefault(term, set()).add((ords[0] >> 2 & 3, len(packed) * 4 // len(ords)) if packed
                                                else (ords[0] >> 2 & 3, 0))
            return got

    now = layout()
    zebra = tokenize("zebra")[0]
    assert now.pop(zebra) == {(3, 0)}, "a count of 300 takes 16 bits a field"
    assert {w for segs in now.values() for w, _ in segs} <= {0, 1} and (0, 0) in set().union(*now.values())
    _as_older_layout(tmp_path / "messages.db")
    with sqlite3.connect(tmp_path / "messages.db") as old:  # as older versions wrote them: narrowed, and wide
        old.create_function("old_ords", 2, lambda o, p: unpack_segment(o, p)[0].tobytes())
        old.create_function("old_packed", 3, lambda o, p, wide: (
            unpack_segment(o, p)[1].tobytes() if wide else narrow(unpack_segment(o, p)[1])))
        old.execute("UPDATE postings SET ords = old_ords(ords, packed), packed = old_packed(ords, packed, rowid % 2)")
        old.execute("DELETE FROM meta WHERE key = 'migrated:packed-postings'")
    assert all(size > 0 for segs in layout().values() for _, size in segs)
    # Read as they are, before any migration (another process, or PostgreSQL's older rows).
    with sqlite3.connect(tmp_path / "messages.db") as conn:
        for ords, packed in conn.execute("SELECT ords, packed FROM postings"):
            o, p = unpack_segment(ords, packed)
            assert unpack_segment(pack_segment(o, p), b"")[0].tolist() == o.tolist()
    size = (tmp_path / "messages.db").stat().st_size

    again = MessageIndex(tmp_path / "messages.db")
    assert layout() == {**now, zebra: {(3, 0)}}
    with sqlite3.connect(tmp_path / "messages.db") as conn:
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert (tmp_path / "messages.db").stat().st_size < size
    assert disk_state(again, "aml", "u1") == reference_state(ref)
    for _ in range(10):
        query, options = random_query(rng)
        assert rank(disk_view(again, "aml", "u1"), query, options, BASE, limit=100) == \
            rank(ref, query, options, BASE, limit=100)
    # The older layout stays the file's until a rebuild (`reindex`), and Adds write it as exactly.
    _grow(rng, log, again, _Facts(), ("u1",), adds=30, convs=3, searches=False)
    again._storage.merger.run_now()
    with sqlite3.connect(tmp_path / "messages.db") as conn:
        assert postings.has_rowid(conn)
    assert disk_state(again, "aml", "u1") == reference_state(reference_view(again, "aml", "u1"))
    for x in (again, log):
        x.close()


def test_a_new_file_clusters_postings_by_term_and_a_rebuild_moves_an_older_file_to_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """`postings` is a table clustered by (owner, term, first) with no rowid and no second index
    (what the unique index cost: ~60 B a message at 1,000 owners x 300 turns); its segments stay
    small enough to be stored inside a page. An older file's rowid table is read and written as it
    is, and `rebuild` (`mateclaw-mem reindex`) makes it the new one, ranking the same."""
    rng, log, index = _grown(tmp_path, 41, ("u1", "u2"), adds=40, convs=3, searches=False)
    path = tmp_path / "messages.db"
    with closing(sqlite3.connect(path)) as conn:
        assert not postings.has_rowid(conn)
        assert conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE tbl_name = 'postings' AND type = 'index'"
                            ).fetchone()[0] == 0
    index.close()
    _as_older_layout(path)
    with caplog.at_level(logging.INFO, logger="mateclaw_mem.index.messages.storage"):
        index = MessageIndex(path)
    assert "`mateclaw-mem reindex` rebuilds it" in caplog.text  # (said at every open until then)
    caplog.clear()
    assert index.rebuild(log) > 0
    with closing(sqlite3.connect(path)) as conn:
        assert not postings.has_rowid(conn)
    ref = {u: reference_view(index, "aml", u) for u in ("u1", "u2")}
    for u in ("u1", "u2"):
        assert disk_state(index, "aml", u) == reference_state(ref[u])
        for _ in range(5):
            query, options = random_query(rng)
            assert rank(disk_view(index, "aml", u), query, options, BASE, limit=100) == \
                rank(ref[u], query, options, BASE, limit=100)
    index.close()
    with caplog.at_level(logging.INFO, logger="mateclaw_mem.index.messages.storage"):
        MessageIndex(path).close()
    assert "reindex" not in caplog.text
    log.close()


def test_a_packed_segment_reads_back_every_ordinal_and_count() -> None:
    """`pack_segment` / `unpack_segment` over the widths each picks: gaps of 1, 2 and 4 bytes, counts
    of 2, 4, 8 and 16 bits a field, one entry and many."""
    rng = random.Random(5)
    for gap in (1, 300, 70_000):
        for most in (3, 15, 255, 65_535):
            for n in (1, 2, 513):
                ords, at = [], rng.randrange(1000)
                for _ in range(n):
                    ords.append(at)
                    at += rng.randint(1, gap)
                counts = [[rng.randint(0, most) for _ in range(4)] for _ in range(n)]
                counts[-1][rng.randrange(4)] = most  # (the widest field the segment holds)
                packed = [c[0] | c[1] << 16 | c[2] << 32 | c[3] << 48 for c in counts]
                blob = pack_segment(np.array(ords, dtype=np.uint32), np.array(packed, dtype=np.uint64))
                o, p = unpack_segment(blob, b"")
                assert (o.dtype, p.dtype) == (np.uint32, np.uint64)
                assert (o.tolist(), p.tolist()) == (ords, packed), (gap, most, n)
