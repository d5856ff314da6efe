"""An index built by another tokenizer version (an upgrade changed the stemmer) is rebuilt on open:
its stored tokens would silently stop matching the queries' tokens."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mateclaw_mem.conversations.log import NewMessage
from mateclaw_mem.index.tokenizer import TOKENIZER_VERSION
from mateclaw_mem.runtime.services import Services


def _age(db: Path, table: str, columns: tuple[str, ...], key: str = "rowid") -> None:
    """Make `db` look built by an older tokenizer: other tokens (distinct per `key`), another version in meta."""
    conn = sqlite3.connect(db)
    with conn:
        for col in columns:
            conn.execute(f"UPDATE {table} SET {col} = 'oldstem' || {key}")
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('tokenizer', 'light-0')")
    conn.close()


def _version(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT value FROM meta WHERE key = 'tokenizer'").fetchone()[0]
    finally:
        conn.close()


def test_the_file_index_is_rebuilt_when_its_tokenizer_is_outdated(settings, clock) -> None:
    svc = Services(settings, clock)
    svc.store.ensure_agent("default")
    svc.store.write("default", "MEMORY.md", "# Memory\n\n## Family\n\nThey finished the adoption papers.\n",
                    expected_sha=None, actor="person")
    assert svc.search.search("adopting").hits
    svc.close()
    db = settings.state_dir / "index.db"
    _age(db, "fts", ("title", "body"))
    assert _version(db) == "light-0"

    svc = Services(settings, clock)
    try:
        assert svc.file_index.stale_tokenizer() is None
        hits = svc.search.search("adopting").hits
        assert hits and hits[0].file == "MEMORY.md"
        assert _version(db) == TOKENIZER_VERSION
    finally:
        svc.close()


def test_the_message_index_is_rebuilt_when_its_tokenizer_is_outdated(settings, clock) -> None:
    svc = Services(settings, clock)
    svc.log.append("aml", "s1", [NewMessage("user", "Caroline: We finished the adoption papers!")], owner="u1",
                   now_ms=1_700_000_000_000)
    svc.message_index.sync(svc.log)
    assert svc.message_index.search("aml", "u1", "adopting", limit=5)
    svc.close()
    db = settings.state_dir / "messages.db"
    _age(db, "postings", ("term",), key="term")  # (the fields are made from the text when read: only the terms are stored)

    svc = Services(settings, clock)
    try:
        hits = svc.message_index.search("aml", "u1", "adopting", limit=5)
        assert [h.content for h in hits] == ["Caroline: We finished the adoption papers!"]
        assert _version(db) == TOKENIZER_VERSION
    finally:
        svc.close()


def test_a_fresh_index_is_stamped_and_never_rebuilt(settings, clock) -> None:
    svc = Services(settings, clock)
    try:
        assert svc.message_index.stale_tokenizer() is None and svc.file_index.stale_tokenizer() is None
        assert _version(settings.state_dir / "messages.db") == TOKENIZER_VERSION
        assert _version(settings.state_dir / "index.db") == TOKENIZER_VERSION
    finally:
        svc.close()
