"""One copy of each turn's text (issue 36.2) on the message-index side: `messages.db` keeps no text
of a turn (`docs.content` is '') and reads it from the log (log.db attached read-only; the same
database on PostgreSQL); an older file's copies are dropped once in place where the log holds the
same text, then the file compacted, and every search answers as before; a hit whose log text is
gone is no hit; the index's writes never take the log's write lock."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.aml import AmlService
from mateclaw_mem.conversations.aml_records import AmlMessage
from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.db import immediate
from mateclaw_mem.index.messages import postings
from mateclaw_mem.index.messages.delta import narrow, unpack_segment
from mateclaw_mem.index.messages.fields import FACT_BASE
from mateclaw_mem.index.messages.index import MessageIndex
from tests.support.disk_reference import disk_state, random_line, random_query, reference_state, reference_view

TS = 1683554160000


def _grown(tmp_path: Path, seed: int) -> tuple[random.Random, ConversationLog, MessageIndex]:
    rng = random.Random(seed)
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    for k in range(60):
        owner = rng.choice(("u1", "u2"))
        lines = [random_line(rng) for _ in range(rng.randint(1, 9))]
        log.append("aml", f"{owner}-c{k % 4}", [NewMessage("user", t, TS + k * 1000 + i) for i, t in enumerate(lines)],
                   owner=owner, now_ms=TS)
        index.sync(log)
    return rng, log, index


def _answers(index: MessageIndex, queries: list[tuple[str, list[str]]]) -> list[list[tuple[int, float, str]]]:
    return [[(h.id, h.score, h.content) for h in index.search("aml", owner, q, limit=100)]
            for owner in ("u1", "u2") for q, _ in queries]


def _contents(path: Path) -> dict[int, str]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT id, content FROM docs").fetchall())


def test_the_index_keeps_no_text_of_a_turn_and_its_hits_carry_the_logs(tmp_path: Path) -> None:
    _, log, index = _grown(tmp_path, 1)
    texts = {m.id: m.content for m in log.since(0, limit=100_000)}
    assert set(_contents(tmp_path / "messages.db").values()) == {""}
    hits = index.search("aml", "u1", "pottery camping beach", limit=100)
    assert hits and all(h.content == texts[h.id] for h in hits)
    for x in (index, log):
        x.close()


def test_an_older_file_drops_its_copies_once_in_place_and_answers_the_same(tmp_path: Path) -> None:
    rng, log, index = _grown(tmp_path, 2)
    queries = [random_query(rng) for _ in range(12)]
    before = _answers(index, queries)
    state = {o: disk_state(index, "aml", o) for o in ("u1", "u2")}
    index.close()
    texts = {m.id: m.content for m in log.since(0, limit=100_000)}
    changed = max(texts)  # a turn whose log text differs from the index's copy keeps the copy
    with sqlite3.connect(tmp_path / "messages.db") as old:  # as an older version wrote it: every text twice
        old.executemany("UPDATE docs SET content = ? WHERE id = ?", [(t, i) for i, t in texts.items()])
        old.execute("UPDATE docs SET content = 'Ann: words only the index kept' WHERE id = ?", (changed,))
        old.execute("INSERT INTO docs (id, agent, owner, conversation_id, role, speaker, content, ts_ms, is_question,"
                    " body_len, ctx_len, nb_len) VALUES (?, 'aml', 'u1', 'u1-c0', 'fact', NULL, 'Ann likes kilns',"
                    " ?, 0, 3, 0, 0)", (FACT_BASE + 1, TS))
        old.execute("DELETE FROM meta WHERE key = 'migrated:text-from-log'")
        old.execute("CREATE INDEX docs_by_owner ON docs (agent, owner, id)")  # (which only a rebuild read)
        old.execute("DELETE FROM meta WHERE key = 'migrated:no-docs-by-owner'")
    with sqlite3.connect(tmp_path / "messages.db") as conn:
        conn.execute("VACUUM")
    size = (tmp_path / "messages.db").stat().st_size

    again = MessageIndex(tmp_path / "messages.db")
    kept = _contents(tmp_path / "messages.db")
    assert kept[changed] == "Ann: words only the index kept" and kept[FACT_BASE + 1] == "Ann likes kilns"
    assert {i for i, t in kept.items() if t} == {changed, FACT_BASE + 1}
    with sqlite3.connect(tmp_path / "messages.db") as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'migrated:text-from-log'").fetchone()[0] == str(
            len(texts) - 1)
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'docs_by_owner'").fetchone() is None
    assert (tmp_path / "messages.db").stat().st_size < size
    with sqlite3.connect(tmp_path / "messages.db") as conn:  # (the row that differs and the fact put back)
        conn.execute("UPDATE docs SET content = '' WHERE id = ?", (changed,))
        conn.execute("DELETE FROM docs WHERE id = ?", (FACT_BASE + 1,))
    assert _answers(again, queries) == before
    assert {o: disk_state(again, "aml", o) for o in ("u1", "u2")} == state
    assert state["u1"] == reference_state(reference_view(again, "aml", "u1"))
    for x in (again, log):
        x.close()


def test_a_start_killed_before_the_compaction_leaves_it_to_the_next(tmp_path: Path) -> None:
    """The copies are dropped in the migration's transaction, the file compacted after it: a kill
    between the two left the freed pages (a third of the file and more at scale) with the marker
    committed, and no later start compacted them (seen in aml_cluster.py's migration trials: 3 of 40)."""
    rng, log, index = _grown(tmp_path, 3)
    queries = [random_query(rng) for _ in range(8)]
    before = _answers(index, queries)
    index.close()
    texts = {m.id: m.content for m in log.since(0, limit=100_000)}
    db = tmp_path / "messages.db"
    with sqlite3.connect(db) as old:  # an older file: the copies (padded: a file of some pages), compacted
        old.executemany("UPDATE docs SET content = ? WHERE id = ?", [(t * 100, i) for i, t in texts.items()])
    with sqlite3.connect(db) as conn:
        conn.execute("VACUUM")
    with sqlite3.connect(db) as killed:  # the migration's transaction committed (its marker is in), no VACUUM
        killed.execute("UPDATE docs SET content = '' WHERE id < ?", (FACT_BASE,))
        assert killed.execute("SELECT 1 FROM meta WHERE key = 'migrated:text-from-log'").fetchone()
        free, pages = (killed.execute(f"PRAGMA {p}").fetchone()[0] for p in ("freelist_count", "page_count"))
    assert free * 4 >= pages > 64

    again = MessageIndex(db)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
        assert conn.execute("PRAGMA page_count").fetchone()[0] < pages - free / 2
    assert _answers(again, queries) == before
    for x in (again, log):
        x.close()


def test_a_hit_whose_log_text_is_gone_is_no_hit(tmp_path: Path) -> None:
    _, log, index = _grown(tmp_path, 3)
    hits = index.search("aml", "u1", "pottery camping beach guitar", limit=100)
    assert len(hits) >= 2
    gone = hits[0].id
    with sqlite3.connect(tmp_path / "log.db") as conn:  # (a message removed from the log behind the index)
        conn.execute("DELETE FROM messages WHERE id = ?", (gone,))
    index.cache.clear()
    after = index.search("aml", "u1", "pottery camping beach guitar", limit=100)
    # (The rest may move: the gone turn's words no longer feed the query's feedback terms.)
    assert after and gone not in {h.id for h in after}
    assert all(h.content == m.content for h in after for m in log.by_ids([h.id]))
    for x in (index, log):
        x.close()


def test_the_index_reads_the_log_but_never_locks_or_writes_it(tmp_path: Path) -> None:
    _, log, index = _grown(tmp_path, 4)
    storage = index._storage
    with immediate(storage._conn, storage.lock) as conn:  # a write transaction of the index, reading the log
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] > 0
        with sqlite3.connect(tmp_path / "log.db", timeout=0) as other:  # would fail at once if the index held it
            other.execute("INSERT INTO messages (agent, owner, conversation_id, role, content, ts_ms, created_ms)"
                          " VALUES ('aml', 'u1', 'x', 'user', 'Ann: logged meanwhile', 0, 0)")
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("UPDATE messages SET content = 'x'")
    for x in (index, log):
        x.close()


def test_an_index_opened_before_its_log_exists_reads_it_once_it_does(tmp_path: Path) -> None:
    state = tmp_path / "ws" / ".mateclaw"
    early = MessageIndex(state / "messages.db", log_db=state / "log.db")  # a fresh workspace: no log yet
    reader = MessageIndex(state / "messages.db", log_db=state / "log.db")  # another process, never syncing
    assert early.search("aml", "u1", "anything", limit=5) == []
    log = ConversationLog(state / "log.db")
    log.append("aml", "s1", [NewMessage("user", "Ann: the lighthouse keeper", TS)], owner="u1", now_ms=TS)
    early.sync(log)
    assert [h.content for h in early.search("aml", "u1", "lighthouse", limit=5)] == ["Ann: the lighthouse keeper"]
    assert [h.content for h in reader.search("aml", "u1", "lighthouse", limit=5)] == ["Ann: the lighthouse keeper"]
    for x in (early, reader, log):
        x.close()


@pytest.fixture
def pg_service(pg_database: str) -> Iterator[tuple[AmlService, str, Any]]:
    pytest.importorskip("psycopg")
    from mateclaw_mem.conversations.pg import open_store

    store = open_store(pg_database)
    try:
        yield AmlService(store.log, store.index, ManualClock(datetime(2023, 5, 8, tzinfo=UTC))), pg_database, store
    finally:
        store.close()


def test_postgresql_keeps_one_copy_packs_postings_and_migrates_an_older_database(
        pg_service: tuple[AmlService, str, Any]) -> None:
    import psycopg

    from mateclaw_mem.conversations.pg import open_store

    service, dsn, store = pg_service
    rng = random.Random(5)
    for k in range(8):
        service.add(f"r{k}", "u1", f"s{k % 2}", [AmlMessage(role="user", content=random_line(rng), timestamp=TS + k)])
    storage = store.index._storage
    with immediate(storage._conn, storage.lock) as conn:  # (the Adds' postings folded into segments)
        assert postings.merge_owner(conn, conn.execute("SELECT okey FROM powners").fetchone()[0]) > 0
    queries = [random_query(rng)[0] for _ in range(8)]
    before = [[(i.id, i.score, i.content) for i in service.search(q, "u1", 100)] for q in queries]
    assert any(before)
    with psycopg.connect(dsn, autocommit=True) as raw:
        assert [r[0] for r in raw.execute("SELECT DISTINCT content FROM docs")] == [""]
        # As the store was before migration 5: every turn's text in `docs` too (and the index 6 drops).
        raw.execute("UPDATE docs SET content = m.content FROM messages m WHERE m.id = docs.id")
        raw.execute("CREATE INDEX docs_by_owner ON docs (agent, owner, id)")
        # ... and every segment of postings as an older version wrote it (ordinals as uint32, counts narrowed).
        segs = raw.execute("SELECT okey, term, first, ords, packed FROM postings").fetchall()
        assert segs and all(bytes(r[4]) == b"" for r in segs)
        for okey, term, first, ords, packed in segs:
            o, p = unpack_segment(bytes(ords), bytes(packed))
            raw.execute("UPDATE postings SET ords = %s, packed = %s WHERE okey = %s AND term = %s AND first = %s",
                        (o.tobytes(), narrow(p), okey, term, first))
        raw.execute("DELETE FROM schema_version WHERE version >= 5")
    again = open_store(dsn)
    try:
        assert again.migrated == [5, 6, 7]
        with psycopg.connect(dsn, autocommit=True) as raw:
            assert [r[0] for r in raw.execute("SELECT DISTINCT content FROM docs")] == [""]
            assert raw.execute("SELECT to_regclass('docs_by_owner')").fetchone()[0] is None
            assert [r[0] for r in raw.execute("SELECT DISTINCT length(packed) FROM postings")] == [0]
        later = AmlService(again.log, again.index, ManualClock(datetime(2023, 5, 8, tzinfo=UTC)))
        assert [[(i.id, i.score, i.content) for i in later.search(q, "u1", 100)] for q in queries] == before
    finally:
        again.close()
