"""Damaged databases on purpose: a workspace whose every SQLite file holds rows, and the ways a file
gets damaged (a disk, a sync tool, a copy cut short), for tests/test_damaged_databases.py and
scripts/bench/damaged_databases.py.

Every damage is deterministic (a seeded random source, pages chosen by their number), so a failing
case can be rerun as it was.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

from mateclaw_mem.clock import Clock, SystemClock
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings

DATABASES = ("index.db", "messages.db", "facts.db", "forget.db", "log.db", "state.db")
# A word only MEMORY.md holds: a search that finds it searched a rebuilt index.
WORD = "quokkaberry"
CONFIG = ("timezone: Europe/Berlin\n"
          "mate:\n  memory:\n    fact:\n      projection-enabled: true\n      forget-enabled: true\n")
TURNS = 600  # enough log rows for the message table to span many pages


def populate(root: Path, clock: Clock | None = None) -> Path:
    """A workspace under `root/ws` whose six databases all hold rows (closed, WAL checkpointed):
    memory files, a long conversation log, both indexes, facts with events, a tombstone, bookkeeping."""
    from mateclaw_mem.conversations.log import NewMessage

    root.mkdir(parents=True, exist_ok=True)
    cfg = root / "mateclaw.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")
    services = Services(load_settings(cfg, root / "ws"), clock or SystemClock())
    try:
        services.build()
        store = services.store
        services.seed_agents()  # the agents a daemon seeds: its start then writes no memory file
        memory = ("# Memory\n\n## Pets\n\n- The cat is called Miso\n- Breakfast is " + WORD + " jam\n\n"
                  "## Work\n\n- Works on the lighthouse survey\n- Takes the 7:40 ferry to the island office\n")
        store.write("default", "MEMORY.md", memory, expected_sha=None, actor="person")
        store.write("default", "PROFILE.md", "# Profile\n\n- name: Ada\n- city: Lisbon\n- tea: oolong\n",
                    expected_sha=None, actor="person")
        now = int(services.clock.now().timestamp() * 1000)
        for i in range(TURNS // 2):
            services.log.append("default", f"c{i % 7}", [
                NewMessage("user", f"turn {i}: the harbour crane lifted container {i} onto the barge " * 3),
                NewMessage("assistant", f"noted {i}: crane, container and barge " * 3),
            ], now_ms=now + i)
        services.message_index.sync(services.log)
        services.file_index.rebuild(services.log)
        services.facts.rebuild()
        for fact in services.facts.list("default", None)[:3]:
            services.facts.confirm("default", None, fact.id)
        services.forget.forget("default", None, "Takes the 7:40 ferry to the island office", actor="person")
    finally:
        services.close()
    return root / "ws"


def rows(path: Path, table: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def _garbage(path: Path) -> None:
    path.write_bytes(random.Random(path.name).randbytes(max(path.stat().st_size, 4096)))


def _truncated(path: Path) -> None:
    with path.open("r+b") as fh:
        fh.truncate(path.stat().st_size // 2)


def _zero_header(path: Path) -> None:
    with path.open("r+b") as fh:
        fh.write(bytes(100))


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def leaf_pages(path: Path) -> list[int]:
    """The leaf pages of the file's largest table, in page order (from SQLite's dbstat table)."""
    conn = sqlite3.connect(path)
    try:
        table = conn.execute("SELECT name FROM dbstat WHERE name NOT LIKE 'sqlite_%' GROUP BY name "
                             "ORDER BY sum(pgsize) DESC, name LIMIT 1").fetchone()[0]
        return [r[0] for r in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno", (table,))]
    finally:
        conn.close()


def corrupt_page(path: Path, page: int | None = None) -> int:
    """Overwrite one page with garbage (default: a leaf of the largest table two thirds of the way
    along): a file that opens and reads its schema, and fails `quick_check` and the rows on it."""
    conn = sqlite3.connect(path)
    try:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    if page is None:
        leaves = leaf_pages(path)
        page = leaves[len(leaves) * 2 // 3] if leaves else 2
    with path.open("r+b") as fh:
        fh.seek((page - 1) * size)
        fh.write(random.Random(page).randbytes(size))
    return page


def _garbage_wal(path: Path) -> None:
    Path(f"{path}-wal").write_bytes(random.Random("wal").randbytes(64 * 1024))


def _garbage_shm(path: Path) -> None:
    Path(f"{path}-shm").write_bytes(random.Random("shm").randbytes(32 * 1024))


DAMAGES: dict[str, Callable[[Path], object]] = {
    "garbage": _garbage,
    "truncated": _truncated,
    "zero_header": _zero_header,
    "corrupt_page": corrupt_page,
    "empty": _empty,
    "garbage_wal": _garbage_wal,
    "garbage_shm": _garbage_shm,
}
