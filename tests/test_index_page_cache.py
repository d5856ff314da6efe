"""The message index (storage.MessageStorage) keeps SQLite's page cache of the log attached to its
connection small: the log is only read there (the hits' text), and SQLite's default 2 MB was resident
beside the byte cache (counted against `aml.cache-bytes`), taken from its room by the daemon's RSS budget
(runtime/malloc.RssBudget). In a fresh interpreter: SQLite's own count of what it allocated
(sqlite3_memory_used, the library Python's sqlite3 module uses) over many searches."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.index.messages.index import MessageIndex
from tests.support.sqlite_memory import grown

_PROBE = """
from mateclaw_mem.index.messages.index import MessageIndex
index = MessageIndex(Path(sys.argv[1]) / "messages.db")
if sys.argv[2] == "default":
    index._storage._conn.execute("PRAGMA log.cache_size = -2000")
index.search("aml", "u", "w1 w2", limit=5)  # (the schema and the statements read)
before = lib.sqlite3_memory_used()
for k in range(150):
    index.search("aml", "u", " ".join(f"w{(k * 13 + j * 7) % 3000}" for j in range(8)), limit=100)
print(lib.sqlite3_memory_used() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the system's libsqlite3, as Python's sqlite3 links it")
def test_searches_leave_sqlites_page_caches_small(tmp_path: Path) -> None:
    rng = random.Random(3)
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    try:
        for k in range(900):  # 18,000 messages of 25 words: a file and a log of several MB each
            msgs = [NewMessage("user", " ".join(f"w{rng.randrange(3000)}" for _ in range(25)), 1683554160000 + k * 20 + j)
                    for j in range(20)]
            log.append("aml", f"s{k % 41}", msgs, owner="u", now_ms=1)
        index.sync(log)
    finally:
        index.close()
        log.close()
    assert min((tmp_path / f).stat().st_size for f in ("messages.db", "log.db")) > 3_000_000
    default, kept = grown(_PROBE, str(tmp_path), "default"), grown(_PROBE, str(tmp_path), "kept")
    assert default > 3_000_000  # the log's cache fills towards SQLite's ~2 MB default
    # 256 KiB for the log (storage.LOG_PAGE_CACHE_KIB), the file's own pages and the statements': 3.44 MB
    # with the log's default cache, 1.60 MB with this (measured).
    assert kept < 1_800_000
