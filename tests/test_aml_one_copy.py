"""One copy of each Add/Search turn on the file-index side (issue 36.2): AML Add's turns live in the
log and the message index, never again in index.db; the file search of the AML agent's
conversations reads them from the message index (owner isolation kept, a deleted user gone); an
index.db an older version filled with copies loses them once, in place, its pages given back."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.aml import AmlMessage
from mateclaw_mem.conversations.log import NewMessage
from mateclaw_mem.index.files.ingest import AML_COPIES_DROPPED
from mateclaw_mem.memory.forget.scan import patterns, walk
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings

ANN = "Zorbleflax quintessential lighthouse"
BOB = "Grumwhistle saffron lighthouse"
CHAT = "Quillibrant chat lighthouse"  # a turn the AML agent was told through the chat log, not Add


def _services(tmp_path: Path, clock: ManualClock) -> Services:
    cfg = tmp_path / "iso.yaml"
    cfg.write_text("timezone: UTC\nowner-isolation: true\n", encoding="utf-8")
    return Services(load_settings(cfg, tmp_path / "ws"), clock)


def _fill(services: Services) -> None:
    services.aml.add("r1", "ann", "s1", [AmlMessage("user", f"Caroline: my {ANN} story"),
                                          AmlMessage("user", "Mel: tell me more")])
    services.aml.add("r1", "bob", "s1", [AmlMessage("user", f"Bob: the {BOB} tale")])
    services.log.append("aml", "chat-1", [NewMessage("user", f"Ann: a {CHAT}")], owner="ann",
                        now_ms=int(services.clock.now().timestamp() * 1000))


def _copies(index_db: Path) -> dict[str, int]:
    """index.db's message chunks by text (what a copy of a logged turn is there)."""
    with sqlite3.connect(index_db) as db:
        rows = db.execute("SELECT text FROM chunks WHERE message_id IS NOT NULL").fetchall()
    db.close()
    return {r[0]: 1 for r in rows}


def _seen(services: Services, query: str, owner: str | None) -> list[tuple[str | None, str]]:
    hits = services.search.search(query, agent="aml", owner=owner, scope="conversations", record=False).hits
    return [(h.owner, h.snippet) for h in hits]


def test_add_turns_are_not_copied_and_the_file_search_reads_them_from_the_message_index(
    tmp_path: Path, clock: ManualClock,
) -> None:
    services = _services(tmp_path, clock)
    try:
        _fill(services)
        services.file_index.sync_messages(services.log)
        assert list(_copies(services.settings.index_db)) == [f"Ann: a {CHAT}"]  # the chat turn only
        ann = _seen(services, "zorbleflax lighthouse", "ann")
        assert ann and ann[0][0] == "ann" and "Zorbleflax" in ann[0][1], ann
        found = services.search.search("lighthouse", agent="aml", owner="ann", scope="all", record=False).hits
        assert {h.message_id for h in found} == {1, 4}  # ann's Add turn and her chat turn, once each
        assert all(h.kind == "conversation" and h.conversation_id in ("s1", "chat-1") for h in found)
        # Owner isolation: bob's words are not ann's to find, nor hers his; no owner sees no one's.
        assert _seen(services, "grumwhistle", "ann") == []
        assert [o for o, _ in _seen(services, "grumwhistle saffron", "bob")] == ["bob"]
        assert _seen(services, "zorbleflax", None) == []
        assert services.search.search("zorbleflax", agent="default", owner="ann", record=False).hits == []
        services.aml_users.delete("ann")
        assert _seen(services, "zorbleflax lighthouse", "ann") == []
    finally:
        services.close()
    found = walk(tmp_path / "ws", {"bob": patterns("grumwhistle")}).hits["bob"]
    assert {f["file"] for f in found} <= {".mateclaw/log.db", ".mateclaw/messages.db"}, found
    assert {f["file"] for f in found} >= {".mateclaw/log.db"}, found


def test_copies_an_older_version_made_are_dropped_once_in_place(tmp_path: Path, clock: ManualClock) -> None:
    services = _services(tmp_path, clock)
    try:
        _fill(services)
        # What an older version did: every logged turn copied into index.db, no marker of the drop.
        storage = services.file_index._db
        with storage.tx() as conn:
            conn.execute("DELETE FROM meta WHERE key = ?", (AML_COPIES_DROPPED,))
            old = [dataclasses.replace(m, trigger_source="chat") for m in services.log.since(0)]
            storage.insert_messages(conn, "", old)
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('messages_watermark', ?)",
                         (str(max(m.id for m in old)),))
        assert len(_copies(services.settings.index_db)) == 4
    finally:
        services.close()
    services = _services(tmp_path, clock)
    try:
        services.file_index.sync_messages(services.log)  # what the watcher's start-up reconcile calls
        assert list(_copies(services.settings.index_db)) == [f"Ann: a {CHAT}"]
        with sqlite3.connect(services.settings.index_db) as db:
            marker = db.execute("SELECT value FROM meta WHERE key = ?", (AML_COPIES_DROPPED,)).fetchone()
            free = db.execute("PRAGMA freelist_count").fetchone()[0]
        db.close()
        assert marker == ("3",) and free == 0  # the three Add turns; their pages given back
        found = services.search.search("zorbleflax lighthouse", agent="aml", owner="ann", scope="conversations",
                                       record=False).hits
        assert [h.message_id for h in found] == [1, 4]  # still found, each once, the Add turn first
        # Once: a copy made after the drop (an older process still running) is not looked for again.
        with services.file_index._db.tx() as conn:
            services.file_index._db.insert_messages(conn, "", [dataclasses.replace(services.log.since(0)[0],
                                                                                   trigger_source="chat")])
        services.file_index.sync_messages(services.log)
        assert len(_copies(services.settings.index_db)) == 2
    finally:
        services.close()


def test_the_file_search_finds_an_add_its_indexing_thread_has_not_reached(tmp_path: Path, clock: ManualClock) -> None:
    """An Add answers before its turns are indexed (index/messages/index.py: sync_later); the file
    search of the AML conversations catches the index up first, as the AML search does."""
    services = _services(tmp_path, clock)
    try:
        services.message_index._indexer.stop()  # as if it never got the CPU
        services.aml.add("r1", "ann", "s1", [AmlMessage("user", f"Caroline: my {ANN} story")])
        assert services.message_index.watermark() < services.log.since(0)[-1].id  # logged, not indexed
        ann = _seen(services, "zorbleflax lighthouse", "ann")
        assert ann and "Zorbleflax" in ann[0][1], ann
    finally:
        services.close()


def test_the_file_index_reads_past_add_turns_without_reading_them(tmp_path: Path) -> None:
    """The log leaves the Add/Search turns out of what the file index's catch-up reads (it read them all,
    one Python object each, to skip them), and the watermark still moves past them."""
    from mateclaw_mem.conversations.log import ConversationLog

    log = ConversationLog(tmp_path / "log.db")
    try:
        def put(source: str, text: str) -> int:
            return log.append("aml", "c1", [NewMessage("user", text)], trigger_source=source, now_ms=1)[0]

        chat1 = put("chat", "one")
        for n in range(5):
            put("aml", f"add {n}")
        chat2 = put("chat", "two")
        last = put("aml", "add last")
        got, upto = log.since_kept(0, skip_source="aml", limit=10)
        assert [m.id for m in got] == [chat1, chat2] and upto == last  # (the log's end: fewer than 10)
        got, upto = log.since_kept(0, skip_source="aml", limit=1)
        assert [m.id for m in got] == [chat1] and upto == chat1  # (a full batch: read up to its last)
        assert log.since_kept(last, skip_source="aml") == ([], last)
    finally:
        log.close()


def test_the_file_index_watermark_moves_past_add_turns(tmp_path: Path, clock: ManualClock) -> None:
    services = _services(tmp_path, clock)
    try:
        _fill(services)
        for n in range(30):
            services.aml.add(f"more-{n}", "ann", "s2", [AmlMessage("user", f"Caroline: filler {n}")])
        assert services.file_index.sync_messages(services.log, batch=4) == 1  # the chat turn
        with sqlite3.connect(services.settings.index_db) as db:
            mark = int(db.execute("SELECT value FROM meta WHERE key = 'messages_watermark'").fetchone()[0])
        db.close()
        assert mark == services.log.since_kept(0, skip_source="", limit=10_000)[1]  # the log's last id
        assert list(_copies(services.settings.index_db)) == [f"Ann: a {CHAT}"]
        assert services.file_index.sync_messages(services.log) == 0
    finally:
        services.close()
