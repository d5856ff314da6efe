"""A forget's byte scan must not drop this process's SQLite locks (the hand-edit campaign's
"disk I/O error": db.read_apart says how).

The order is the campaign's: a process holds WAL connections to a database, scans the database's
raw bytes (forget's scrub, a receipt), then another process (a CLI command) opens the same file,
writes and exits. Had the scan closed a descriptor of the file in this process, the other process's
close would find no other user, delete the WAL and its shared memory, and this process's next
connection would fail with "disk I/O error" and its open one write where nobody reads."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from mateclaw_mem import db
from mateclaw_mem.memory.forget import scan

WORDS = "the person takes tea without sugar"


def other_process_writes(path: Path) -> None:
    code = ("import sqlite3, sys\nc = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "c.execute(\"INSERT INTO t VALUES ('from the CLI')\")\nc.close()\n")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)


def _occurrences(path: Path) -> None:
    assert scan.occurrences(path, scan.patterns(WORDS)) == 1


def _walk(path: Path) -> None:
    found = scan.walk(path.parent, {"claim": scan.patterns(WORDS)})
    assert path.name in [h["file"] for h in found.hits["claim"]]  # (the WAL's copy of the page too)
    assert found.files == 3  # the database, its WAL and its shared memory were all read


@pytest.mark.parametrize("read", [_occurrences, _walk], ids=["occurrences", "receipt-walk"])
def test_a_byte_scan_keeps_this_process_locks_on_a_database_it_has_open(tmp_path: Path,
                                                                         read: Callable[[Path], None]) -> None:
    path = tmp_path / "log.db"
    held = db.connect(path)
    held.execute("CREATE TABLE t (text TEXT)")
    held.execute("INSERT INTO t VALUES (?)", (WORDS,))
    held.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the words in the database file itself
    held.execute("INSERT INTO t VALUES ('kept open')")  # this connection has the WAL open
    try:
        read(path)
        other_process_writes(path)
        # The other process's exit left the WAL to us: it saw this process as a user of the file.
        assert Path(f"{path}-wal").exists()
        with db.immediate(held, threading.Lock()):
            held.execute("INSERT INTO t VALUES ('after')")
        again = db.connect(path)  # as SharedConnection opens a second service's file
        try:
            rows = {r[0] for r in again.execute("SELECT text FROM t")}
        finally:
            again.close()
    finally:
        held.close()
    assert rows == {WORDS, "kept open", "from the CLI", "after"}


def test_a_file_that_cannot_be_read_apart_is_an_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="cannot be read"), db.read_apart(tmp_path / "missing.db") as fh:
        fh.read()
    assert scan.occurrences(tmp_path / "missing.db", scan.patterns(WORDS)) == 0


def test_only_databases_and_their_shared_memory_are_read_apart() -> None:
    assert db.locked_by_sqlite(Path("log.db"))
    assert db.locked_by_sqlite(Path("log.db-shm"))
    assert db.locked_by_sqlite(Path("index.db.damaged-20260101T010203-2"))
    assert not db.locked_by_sqlite(Path("log.db-wal"))  # SQLite locks the -shm for WAL, never the WAL
    assert not db.locked_by_sqlite(Path("MEMORY.md"))
    assert not db.locked_by_sqlite(Path("index.db.damaged-20260101T010203.json"))


def test_sqlite_raises_disk_io_error_when_the_locks_are_dropped(tmp_path: Path) -> None:
    # The failure the tests above guard against, shown with a plain read: if this ever stops
    # failing (an SQLite that keeps its locks some other way), read_apart is no longer needed.
    path = tmp_path / "log.db"
    held = db.connect(path)
    held.execute("CREATE TABLE t (text TEXT)")
    held.execute("INSERT INTO t VALUES ('kept open')")
    try:
        with open(path, "rb") as fh:
            fh.read()
        other_process_writes(path)
        assert not Path(f"{path}-wal").exists()
        with db.immediate(held, threading.Lock()):  # into the unlinked WAL: nobody else reads it
            held.execute("INSERT INTO t VALUES ('after')")
        again = db.connect(path)
        try:
            with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
                again.execute("SELECT count(*) FROM t").fetchone()
        finally:
            again.close()
    finally:
        held.close()
