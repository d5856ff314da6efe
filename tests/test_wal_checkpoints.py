"""WAL checkpoints off the write path (db.WalCheckpoints): an adopted connection stops checkpointing
inside its commits, the background thread checkpoints what was written, and `stop` gives the
connection its own checkpoints back."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from mateclaw_mem.db import WalCheckpoints, connect

PAGE = 4096
ROW = "x" * 3000  # about one WAL page per committed row


def _wal_frames(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return max(0, (wal.stat().st_size - 32) // (PAGE + 24)) if wal.exists() else 0


def _writer(path: Path) -> tuple[sqlite3.Connection, threading.RLock]:
    conn = connect(path)
    conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body TEXT)")
    return conn, threading.RLock()


def _commit_rows(conn: sqlite3.Connection, n: int, cp: WalCheckpoints | None, path: Path) -> None:
    for _ in range(n):
        conn.execute("INSERT INTO t (body) VALUES (?)", (ROW,))  # autocommit: one commit each
        if cp is not None:
            cp.wrote(path)


def test_an_adopted_connection_no_longer_checkpoints_inside_its_commits(tmp_path: Path) -> None:
    path = tmp_path / "hot.db"
    conn, lock = _writer(path)
    cp = WalCheckpoints(interval=3600)  # the thread never gets to run here
    cp.start()
    try:
        cp.adopt(conn, lock, path)
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        _commit_rows(conn, 1500, cp, path)
        # SQLite's own checkpoint would have kept the WAL at about 1,000 pages.
        assert _wal_frames(path) > 1400
    finally:
        cp.stop()
    # stop(): a last checkpoint, and the connection checkpoints itself again.
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    busy, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert (busy, log) != (0, -1) and log == done
    conn.close()


def test_the_background_thread_checkpoints_what_was_written_and_nothing_is_lost(tmp_path: Path) -> None:
    path = tmp_path / "hot.db"
    conn, lock = _writer(path)
    cp = WalCheckpoints(interval=0.01)
    cp.start()
    try:
        cp.adopt(conn, lock, path)
        _commit_rows(conn, 300, cp, path)
        deadline = time.monotonic() + 30
        while cp.runs == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cp.runs > 0
        # Everything in the WAL was copied into the database file by the thread's checkpoint.
        other = sqlite3.connect(path)
        _, log, done = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert log == done
        assert other.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 300
        other.close()
    finally:
        cp.stop()
        conn.close()


def test_no_writes_no_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "idle.db"
    conn, lock = _writer(path)
    cp = WalCheckpoints(interval=0.001)
    cp.start()
    try:
        cp.adopt(conn, lock, path)
        time.sleep(0.05)  # not a timing assertion: only gives an idle thread the chance to misbehave
        assert cp.runs == 0
    finally:
        cp.stop()
        conn.close()
