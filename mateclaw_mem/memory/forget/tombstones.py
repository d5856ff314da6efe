"""`workspace/.mateclaw/forget.db`: tombstones (a claim's fingerprint, never its words) and the
history purges each forget has scheduled.

A log, not derived data: no rebuild touches it. Every row carries (agent, owner); every read names
both, so one owner's tombstones never block, or reveal anything to, another.

A tombstone is written before anything is cut (so extraction and dreaming already refuse the claim
while the cut runs) with `status` "pending", and says "done" only once every holder has answered
without an error: a forget that died midway stays pending and is run again from its fingerprint
(`ForgetService.resume_pending`), instead of looking finished. Rows from before the column existed
read "done" (they were written by a forget that ran in one piece or not at all).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mateclaw_mem.db import SharedConnection, owner_column
from mateclaw_mem.memory.forget.matching import Fingerprint

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tombstones (
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    sha TEXT NOT NULL,
    n INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    actor TEXT NOT NULL,
    batch TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'done',
    asked TEXT,
    started_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (agent, owner, sha)
);
CREATE TABLE IF NOT EXISTS purges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    sha TEXT NOT NULL,
    n INTEGER NOT NULL,
    batch TEXT NOT NULL,
    due_ms INTEGER NOT NULL,
    done_ms INTEGER,
    purged INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS purges_due ON purges (done_ms, due_ms);
"""


@dataclass(frozen=True)
class Purge:
    id: int
    agent: str
    owner: str | None
    print: Fingerprint
    batch: str
    due_ms: int


PENDING, DONE = "pending", "done"


@dataclass(frozen=True)
class Pending:
    agent: str
    owner: str | None  # whose files (the tombstone's owner)
    asked: str | None  # the owner the forget was asked for (the conversation log's)
    print: Fingerprint
    batch: str


class TombstoneDB(SharedConnection):
    def __init__(self, path: Path) -> None:
        super().__init__(path, _SCHEMA)
        with self._lock:
            columns = {r["name"] for r in self._conn.execute("PRAGMA table_info(tombstones)")}
        added = {"status": "TEXT NOT NULL DEFAULT 'done'", "asked": "TEXT", "started_ms": "INTEGER NOT NULL DEFAULT 0"}
        if missing := [c for c in added if c not in columns]:  # a forget.db from before them: its rows read "done"
            with self._write() as conn:
                for c in missing:
                    conn.execute(f"ALTER TABLE tombstones ADD COLUMN {c} {added[c]}")

    def add(self, agent: str, owner: str | None, fp: Fingerprint, *, at_ms: int, actor: str, batch: str,
            asked: str | None = None) -> bool:
        """Record a tombstone, pending until `finish`; False when this owner already had it (it is
        pending again: the claim is being cut again, under this batch)."""
        with self._write() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO tombstones (agent, owner, sha, n, created_ms, actor, batch, status, asked,"
                " started_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (agent, owner_column(owner), fp.sha, fp.n, at_ms, actor, batch, PENDING, asked, at_ms))
            if cur.rowcount > 0:
                return True
            conn.execute("UPDATE tombstones SET status = ?, batch = ?, asked = ?, started_ms = ?"
                         " WHERE agent = ? AND owner = ? AND sha = ?",
                         (PENDING, batch, asked, at_ms, agent, owner_column(owner), fp.sha))
            return False

    def finish(self, agent: str, owner: str | None, sha: str) -> None:
        """Every holder answered without an error: the forget is done."""
        with self._write() as conn:
            conn.execute("UPDATE tombstones SET status = ? WHERE agent = ? AND owner = ? AND sha = ?",
                         (DONE, agent, owner_column(owner), sha))

    def status(self, agent: str, owner: str | None, sha: str) -> str | None:
        with self._lock:
            row = self._conn.execute("SELECT status FROM tombstones WHERE agent = ? AND owner = ? AND sha = ?",
                                     (agent, owner_column(owner), sha)).fetchone()
        return row["status"] if row else None

    def pending(self, started_before_ms: int) -> list[Pending]:
        """Forgets that have not finished and started before then (died midway, or still running in
        another process), oldest first."""
        with self._lock:
            rows = self._conn.execute("SELECT * FROM tombstones WHERE status = ? AND started_ms < ?"
                                      " ORDER BY started_ms", (PENDING, started_before_ms)).fetchall()
        return [Pending(r["agent"], r["owner"] or None, r["asked"] or None, Fingerprint(r["sha"], r["n"]), r["batch"])
                for r in rows]

    def remove(self, agent: str, owner: str | None, sha: str) -> None:
        with self._write() as conn:
            conn.execute("DELETE FROM tombstones WHERE agent = ? AND owner = ? AND sha = ?",
                         (agent, owner_column(owner), sha))

    def prints(self, agent: str, owner: str | None) -> list[Fingerprint]:
        with self._lock:
            rows = self._conn.execute("SELECT sha, n FROM tombstones WHERE agent = ? AND owner = ?",
                                      (agent, owner_column(owner))).fetchall()
        return [Fingerprint(r["sha"], r["n"]) for r in rows]

    def count(self, agent: str, owner: str | None) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM tombstones WHERE agent = ? AND owner = ?",
                                          (agent, owner_column(owner))).fetchone()[0])

    def schedule(self, agent: str, owner: str | None, fp: Fingerprint, batch: str, due_ms: int) -> int:
        with self._write() as conn:
            cur = conn.execute("INSERT INTO purges (agent, owner, sha, n, batch, due_ms) VALUES (?, ?, ?, ?, ?, ?)",
                               (agent, owner_column(owner), fp.sha, fp.n, batch, due_ms))
            return int(cur.lastrowid or 0)

    def due(self, now_ms: int) -> list[Purge]:
        with self._lock:
            rows = self._conn.execute("SELECT * FROM purges WHERE done_ms IS NULL AND due_ms <= ? ORDER BY id",
                                      (now_ms,)).fetchall()
        return [Purge(r["id"], r["agent"], r["owner"] or None, Fingerprint(r["sha"], r["n"]), r["batch"],
                      r["due_ms"]) for r in rows]

    def done(self, purge_id: int, now_ms: int, purged: int) -> None:
        with self._write() as conn:
            conn.execute("UPDATE purges SET done_ms = ?, purged = ? WHERE id = ?", (now_ms, purged, purge_id))
