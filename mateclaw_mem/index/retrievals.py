"""Every search hit, recorded in `log.db` (`retrievals`): the evidence Dreaming scores on.

A log, not derived data - it cannot be rebuilt from the files, so it lives beside the
conversation log rather than in the rebuildable `index.db`.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path

from mateclaw_mem.db import connect, owner_column

_SCHEMA = """
CREATE TABLE IF NOT EXISTS retrievals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    rel TEXT NOT NULL,
    title TEXT NOT NULL,
    line_start INTEGER NOT NULL,
    line_end INTEGER NOT NULL,
    query TEXT NOT NULL,
    at TEXT NOT NULL,        -- ISO 8601 with offset, from the injected clock
    at_ms INTEGER NOT NULL   -- the same instant, for range queries
);
CREATE INDEX IF NOT EXISTS retrievals_by_agent ON retrievals (agent, owner, at_ms);
"""

MAX_QUERY_CHARS = 500


@dataclass(frozen=True)
class RetrievalHit:
    rel: str
    title: str
    line_start: int
    line_end: int
    count: int
    last_at: datetime


@dataclass(frozen=True)
class RetrievalRecord:
    agent: str
    owner: str | None  # None = the agent's shared files
    rel: str
    title: str
    line_start: int
    line_end: int


class RetrievalLog:
    def __init__(self, db_path: Path, tz: tzinfo) -> None:
        self.path = db_path
        self.tz = tz
        self._lock = threading.Lock()
        self._conn = connect(db_path)
        with self._lock:
            self._conn.executescript(_SCHEMA)

    def record(self, records: list[RetrievalRecord], query: str, at: datetime) -> None:
        if not records:
            return
        stamp, ms = at.isoformat(timespec="seconds"), int(at.timestamp() * 1000)
        rows = [(r.agent, owner_column(r.owner), r.rel, r.title, r.line_start, r.line_end, query[:MAX_QUERY_CHARS],
                 stamp, ms) for r in records]
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(
                    "INSERT INTO retrievals (agent, owner, rel, title, line_start, line_end, query, at, at_ms)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
            except sqlite3.Error:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def hits(self, agent: str, owner: str | None, since: datetime) -> list[RetrievalHit]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT rel, title, line_start, line_end, COUNT(*) AS n, MAX(at_ms) AS last_ms FROM retrievals"
                " WHERE agent = ? AND owner = ? AND at_ms >= ?"
                " GROUP BY rel, title, line_start, line_end ORDER BY n DESC, last_ms DESC",
                (agent, owner_column(owner), int(since.timestamp() * 1000)),
            ).fetchall()
        return [
            RetrievalHit(r["rel"], r["title"], r["line_start"], r["line_end"], r["n"],
                         datetime.fromtimestamp(r["last_ms"] / 1000, self.tz))
            for r in rows
        ]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
