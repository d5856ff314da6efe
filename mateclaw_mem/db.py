"""SQLite connections configured the same way everywhere (WAL, busy timeout, Row factory).

Files under `workspace/.mateclaw/`: `log.db` (conversation log, runs, usage: logs),
`state.db` (cooldowns, watermarks, schedules, lineage: bookkeeping), `index.db` (derived,
rebuildable). Table owners subclass `SharedConnection` and take their path from Settings
(`settings.log_db`, `settings.state_db`), never join it themselves.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path


def owner_column(owner: str | None) -> str:
    """The spelling of "no owner" in every `owner` column: "" (services say None; SQL keys need a value)."""
    return owner or ""


def connect(path: Path, *, check_same_thread: bool = False) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=30, check_same_thread=check_same_thread, isolation_level=None)
    conn.row_factory = sqlite3.Row
    _wal(conn)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def _wal(conn: sqlite3.Connection, *, patience: float = 30.0) -> None:
    # Switching a new file to WAL takes an exclusive lock, and SQLite answers "database is locked"
    # at once (no busy handler) when another connection opens the same new file at that moment —
    # two services starting together. Try again until the other one has switched it.
    deadline = time.monotonic() + patience
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


@contextmanager
def immediate(conn: sqlite3.Connection, lock: threading.RLock | threading.Lock) -> Iterator[sqlite3.Connection]:
    """A write transaction on a connection shared by threads: the lock serialises this process's
    threads, BEGIN IMMEDIATE (with the busy timeout) other processes'; rolled back on any error."""
    with lock:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


def run_once(
    conn: sqlite3.Connection,
    lock: threading.RLock | threading.Lock,
    marker: str,
    migrate: Callable[[sqlite3.Connection], int],
) -> None:
    """Run an in-place migration of this database once, ever: `migrate` (in one write transaction)
    returns how many rows it changed, kept in `meta` under `marker` (for `status`). The marker is
    checked again inside the transaction, so two processes opening the file never both run it.

    Runs with `secure_delete` on: a migration that rewrites text (redaction) must not leave the
    old bytes in freed pages of the file."""
    with lock:
        conn.execute(META)
        if conn.execute("SELECT 1 FROM meta WHERE key = ?", (marker,)).fetchone() is not None:
            return
        previous = conn.execute("PRAGMA secure_delete").fetchone()[0]
        conn.execute("PRAGMA secure_delete = ON")
        try:
            with immediate(conn, lock):
                if conn.execute("SELECT 1 FROM meta WHERE key = ?", (marker,)).fetchone() is not None:
                    return
                changed = migrate(conn)
                conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (marker, str(changed)))
        finally:
            conn.execute(f"PRAGMA secure_delete = {int(previous)}")


def migrated(conn: sqlite3.Connection, prefix: str) -> dict[str, int]:
    """The `run_once` markers starting with `prefix`, without it: {name: rows changed}."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone() is None:
        return {}
    rows = conn.execute("SELECT key, value FROM meta WHERE key LIKE ? || '%'", (prefix,)).fetchall()
    return {r["key"][len(prefix) :]: int(r["value"]) for r in rows}


class SharedConnection:
    """One connection shared by this process's threads behind a lock, its schema created on open.

    One connection rather than one per thread: every operation is a few milliseconds and SQLite
    serialises writers anyway; across processes, BEGIN IMMEDIATE plus the busy timeout keeps
    writers from interleaving. Subclasses read with `self._conn` under `self._lock` and write in
    `with self._write() as conn:`.
    """

    def __init__(self, db_path: Path, schema: str) -> None:
        self.path = db_path
        self._lock = threading.RLock()
        self._conn = connect(db_path)
        with self._lock:
            self._conn.executescript(schema)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        return immediate(self._conn, self._lock)
