"""Extraction bookkeeping in `state.db`: what survives a restart.

- buckets, one per (agent, owner): when the cooldown ends, when the next run is due, and whether an
  explicit "remember" is waiting (it skips the cooldown);
- pending conversations per bucket, each with a sequence number, so a run can tell the triggers it
  saw from those that arrived while it ran;
- watermarks: the last message id examined per conversation, so a run sends only what is new.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mateclaw_mem.db import SharedConnection, owner_column

Bucket = tuple[str, str | None]  # (agent, owner); None = no owner ("" only in the SQL columns)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS extraction_buckets (
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    cooldown_until_ms INTEGER NOT NULL DEFAULT 0,
    due_ms INTEGER,
    explicit INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (agent, owner)
);
CREATE TABLE IF NOT EXISTS extraction_pending (
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    requested_ms INTEGER NOT NULL,
    PRIMARY KEY (agent, owner, conversation_id)
);
CREATE TABLE IF NOT EXISTS extraction_watermarks (
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    last_id INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (agent, owner, conversation_id)
);
"""


class ExtractionState(SharedConnection):
    """One connection shared by the service's threads (db.SharedConnection)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, _SCHEMA)

    def _q(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            return self._conn.execute(sql, args).fetchall()

    def _q1(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        with self._lock:
            return self._conn.execute(sql, args).fetchone()

    def _x(self, sql: str, args: tuple[Any, ...] = ()) -> None:
        with self._write() as conn:
            conn.execute(sql, args)

    # -- buckets ---------------------------------------------------------------------------------

    def bucket(self, bucket: Bucket) -> dict[str, Any]:
        row = self._q1("SELECT * FROM extraction_buckets WHERE agent=? AND owner=?", _key(bucket))
        if row is None:
            return {"cooldown_until_ms": 0, "due_ms": None, "explicit": 0}
        return dict(row)

    def set_bucket(self, bucket: Bucket, **values: Any) -> None:
        with self._lock:  # read and write as one step for this process's threads
            cur = self.bucket(bucket)
            cur.update(values)
            self._x(
                "INSERT INTO extraction_buckets(agent, owner, cooldown_until_ms, due_ms, explicit) VALUES (?,?,?,?,?)"
                " ON CONFLICT(agent, owner) DO UPDATE SET cooldown_until_ms=excluded.cooldown_until_ms,"
                " due_ms=excluded.due_ms, explicit=excluded.explicit",
                (*_key(bucket), cur["cooldown_until_ms"], cur["due_ms"], cur["explicit"]),
            )

    def buckets(self) -> list[tuple[Bucket, Any]]:
        """Every bucket with its row, for `status`."""
        return [(_bucket(row), row) for row in self._q("SELECT * FROM extraction_buckets ORDER BY agent, owner")]

    def due_buckets(self) -> list[tuple[Bucket, int]]:
        """Buckets with a run scheduled, and when."""
        rows = self._q("SELECT agent, owner, due_ms FROM extraction_buckets WHERE due_ms IS NOT NULL")
        return [(_bucket(row), row["due_ms"]) for row in rows]

    def next_due_after(self, now_ms: int) -> int | None:
        row = self._q1("SELECT MIN(due_ms) AS d FROM extraction_buckets WHERE due_ms IS NOT NULL AND due_ms > ?",
                       (now_ms,))
        return row["d"] if row else None

    # -- pending conversations -------------------------------------------------------------------

    def max_seq(self) -> int:
        row = self._q1("SELECT COALESCE(MAX(seq), 0) AS s FROM extraction_pending")
        return int(row["s"]) if row else 0

    def add_pending(self, bucket: Bucket, conv: str, seq: int, now_ms: int) -> None:
        """A conversation wants a run; a second trigger only bumps its sequence number."""
        self._x(
            "INSERT INTO extraction_pending(agent, owner, conversation_id, seq, requested_ms) VALUES (?,?,?,?,?)"
            " ON CONFLICT(agent, owner, conversation_id) DO UPDATE SET seq=excluded.seq",
            (*_key(bucket), conv, seq, now_ms),
        )

    def pending_for_run(self, bucket: Bucket) -> list[str]:
        """Pending conversations, oldest request first (the order a run works them off)."""
        return [
            r["conversation_id"]
            for r in self._q(
                "SELECT conversation_id FROM extraction_pending WHERE agent=? AND owner=? ORDER BY requested_ms, seq",
                _key(bucket),
            )
        ]

    def pending(self, bucket: Bucket) -> list[str]:
        """Pending conversations by latest trigger (for `status`)."""
        return [
            r["conversation_id"]
            for r in self._q(
                "SELECT conversation_id FROM extraction_pending WHERE agent=? AND owner=? ORDER BY seq", _key(bucket)
            )
        ]

    def pending_seqs(self, bucket: Bucket) -> list[tuple[str, int]]:
        rows = self._q("SELECT conversation_id, seq FROM extraction_pending WHERE agent=? AND owner=?", _key(bucket))
        return [(row["conversation_id"], row["seq"]) for row in rows]

    def drop_pending(self, bucket: Bucket, conv: str) -> None:
        self._x("DELETE FROM extraction_pending WHERE agent=? AND owner=? AND conversation_id=?", (*_key(bucket), conv))

    def count_pending(self, bucket: Bucket, *, after_seq: int | None = None) -> int:
        if after_seq is None:
            return self._q1("SELECT COUNT(*) AS n FROM extraction_pending WHERE agent=? AND owner=?", _key(bucket))["n"]
        return self._q1(
            "SELECT COUNT(*) AS n FROM extraction_pending WHERE agent=? AND owner=? AND seq > ?",
            (*_key(bucket), after_seq),
        )["n"]

    # -- watermarks ------------------------------------------------------------------------------

    def watermark(self, bucket: Bucket, conv: str) -> int:
        row = self._q1(
            "SELECT last_id FROM extraction_watermarks WHERE agent=? AND owner=? AND conversation_id=?",
            (*_key(bucket), conv),
        )
        return int(row["last_id"]) if row else 0

    def advance(self, bucket: Bucket, watermarks: dict[str, int], now_ms: int) -> None:
        """Move watermarks forward (never back: a slower run cannot un-see messages)."""
        with self._write() as conn:
            for conv, last_id in watermarks.items():
                conn.execute(
                    "INSERT INTO extraction_watermarks(agent, owner, conversation_id, last_id, updated_ms)"
                    " VALUES (?,?,?,?,?) ON CONFLICT(agent, owner, conversation_id) DO UPDATE SET"
                    " last_id=MAX(last_id, excluded.last_id), updated_ms=excluded.updated_ms",
                    (*_key(bucket), conv, last_id, now_ms),
                )


def _key(bucket: Bucket) -> tuple[str, str]:
    """The SQL form of a bucket: the owner column holds "" for no owner."""
    return bucket[0], owner_column(bucket[1])


def _bucket(row: Any) -> Bucket:
    return row["agent"], row["owner"] or None
