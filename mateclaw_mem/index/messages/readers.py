"""Connections of their own for the message index's searches on SQLite (issue 36: a first search in
milliseconds): a search no longer runs on the index's one connection under its lock, where it waited
for whatever write held it - a merge of one owner's postings (50-190 ms at 100k messages), an
indexing batch. In WAL mode a reader sees the last committed snapshot and never waits for the writer;
every snapshot is a complete index (a merge changes no answer, a rebuild swaps its tables in one
transaction), and a search's read transaction starts after `MessageIndex.catch_up` committed, so it
sees every acknowledged Add.

The connections are read-only (`query_only`): whatever a search writes (the dense side's vectors)
goes through the writer. Each has the conversation log attached read-only, as the writer does, for
the documents' text (docfields.TEXT). A few are kept between searches (most recently used first: one
warm page cache serves a quiet daemon); more open while more searches run at once.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from mateclaw_mem.db import connect


def log_uri(path: Path) -> str:
    """The URI that attaches the conversation log read-only: a write transaction on messages.db then
    takes no write lock on the log (an Add's append would wait for the index's writers)."""
    return f"file:{quote(str(path.resolve()))}?mode=ro"


class Readers:
    """Read-only connections to `path`, each with the log at `log_db()` attached as `log`."""

    KEEP = 4  # idle connections kept (each keeps its own page cache)

    def __init__(self, path: Path, log_db: Callable[[], Path]) -> None:
        """`log_db`: a callable giving the log's path now (`MessageStorage.follow` may change it)."""
        self.path = path
        self._log_db = log_db
        self._lock = threading.Lock()
        self._idle: list[tuple[sqlite3.Connection, Path]] = []
        self._closed = False

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """A connection for one search (not shared while held); in autocommit: the caller begins and
        ends its read transaction."""
        conn, attached = self._take()
        try:
            want = self._log_db()
            if attached != want:
                if attached is not None:
                    conn.execute("DETACH DATABASE log")
                conn.execute("ATTACH DATABASE ? AS log", (log_uri(want),))
                attached = want
            yield conn
        except BaseException:
            conn.close()  # (whatever state it was left in is not handed to the next search)
            raise
        self._give(conn, attached)

    def _take(self) -> tuple[sqlite3.Connection, Path | None]:
        with self._lock:
            if self._closed:
                raise sqlite3.ProgrammingError("the message index is closed")
            if self._idle:
                return self._idle.pop()
        conn = connect(self.path, uri=True)
        conn.execute("PRAGMA query_only = ON")
        return conn, None

    def _give(self, conn: sqlite3.Connection, attached: Path) -> None:
        if conn.in_transaction:  # (a caller that left its read transaction open: never kept so)
            conn.execute("ROLLBACK")
        with self._lock:
            if not self._closed and len(self._idle) < self.KEEP:
                self._idle.append((conn, attached))
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections; one in use closes when its search gives it back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()
