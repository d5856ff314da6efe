"""conversations/log.ConversationLog keeps a small SQLite page cache: a stream of Adds only ever needs the
b-trees' interior pages and the leaves it appends to, and whatever more the cache held stayed resident in
the daemon, taken from the Add/Search cache's room under `aml.cache-bytes` (runtime/malloc.RssBudget).
In a fresh interpreter: SQLite's own count of what it allocated (sqlite3_memory_used, the library Python's
sqlite3 module uses)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.sqlite_memory import grown

_PROBE = """
from mateclaw_mem.conversations.log import ConversationLog, NewMessage
log = ConversationLog(Path(sys.argv[1]) / "log.db")
if sys.argv[2] == "default":
    log._conn.execute("PRAGMA cache_size = -2000")
before = lib.sqlite3_memory_used()
for k in range(1500):  # 30,000 messages: ~8 MB of log, Adds of 20 turns in 37 conversations
    msgs = [NewMessage("user", f"Caroline: turn {k}-{j} about the lake and the {k * 7 % 101} pines", 1683554160000 + k * 20 + j)
            for j in range(20)]
    log.append_once(f"r{k}", f"h{k}", "{}", "aml-agent", f"s{k % 37}", msgs, owner="u1", now_ms=1)
print(lib.sqlite3_memory_used() - before)
"""


def _grown(tmp: Path, mode: str) -> int:
    (tmp / mode).mkdir()
    return grown(_PROBE, str(tmp / mode), mode)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the system's libsqlite3, as Python's sqlite3 links it")
def test_a_stream_of_adds_leaves_the_logs_page_cache_small(tmp_path: Path) -> None:
    assert _grown(tmp_path, "default") > 1_500_000  # SQLite's default cache fills to its 2,000 KiB
    assert _grown(tmp_path, "kept") < 600_000  # ConversationLog.CACHE_KIB (256) and the statements'
