"""`state.db` tables of SOUL.md evolution: memory writes counted per (agent, owner), and the
proposals with their diff and fate (pending → applied | rejected | superseded)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mateclaw_mem.db import SharedConnection, owner_column

_SCHEMA = """
CREATE TABLE IF NOT EXISTS soul_counters (
    agent TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    writes INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (agent, owner)
);
CREATE TABLE IF NOT EXISTS soul_proposals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    mode TEXT NOT NULL,
    base_sha TEXT NOT NULL,
    text TEXT NOT NULL,
    diff TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL DEFAULT 'pending',
    batch TEXT,
    decided_at TEXT,
    decided_by TEXT
);
CREATE INDEX IF NOT EXISTS soul_proposals_agent ON soul_proposals (agent, owner, status);
"""


@dataclass(frozen=True)
class Proposal:
    id: int
    agent: str
    owner: str | None
    created_at: str
    mode: str
    base_sha: str
    text: str  # the whole proposed SOUL.md, frontmatter included
    diff: str
    reason: str
    status: str
    batch: str | None
    decided_at: str | None
    decided_by: str | None

    def to_dict(self, *, with_text: bool = False) -> dict[str, Any]:
        out = asdict(self)
        if not with_text:
            out.pop("text")
        return out


def _proposal(r: Any) -> Proposal:
    return Proposal(r["id"], r["agent"], r["owner"] or None, r["created_at"], r["mode"], r["base_sha"], r["text"],
                    r["diff"], r["reason"], r["status"], r["batch"], r["decided_at"], r["decided_by"])


class SoulDB(SharedConnection):
    def __init__(self, path: Path) -> None:
        super().__init__(path, _SCHEMA)

    def count_write(self, agent: str, owner: str | None) -> int:
        """One more memory write for (agent, owner); returns the new total."""
        with self._write() as conn:
            conn.execute("INSERT INTO soul_counters(agent, owner, writes) VALUES (?,?,1) ON CONFLICT(agent, owner)"
                         " DO UPDATE SET writes = writes + 1", (agent, owner_column(owner)))
            row = conn.execute("SELECT writes FROM soul_counters WHERE agent=? AND owner=?",
                               (agent, owner_column(owner))).fetchone()
        return int(row["writes"])

    def writes(self, agent: str, owner: str | None) -> int:
        with self._lock:
            row = self._conn.execute("SELECT writes FROM soul_counters WHERE agent=? AND owner=?",
                                     (agent, owner_column(owner))).fetchone()
        return int(row["writes"]) if row else 0

    def add(self, agent: str, owner: str | None, at: str, mode: str, base_sha: str, text: str, diff: str,
            reason: str) -> Proposal:
        """A new pending proposal; an older pending one of the same (agent, owner) is superseded."""
        with self._write() as conn:
            conn.execute("UPDATE soul_proposals SET status='superseded', decided_at=? WHERE agent=? AND owner=?"
                         " AND status='pending'", (at, agent, owner_column(owner)))
            cur = conn.execute(
                "INSERT INTO soul_proposals(agent, owner, created_at, mode, base_sha, text, diff, reason)"
                " VALUES (?,?,?,?,?,?,?,?)", (agent, owner_column(owner), at, mode, base_sha, text, diff, reason))
            row = conn.execute("SELECT * FROM soul_proposals WHERE id=?", (cur.lastrowid,)).fetchone()
        return _proposal(row)

    def get(self, agent: str, owner: str | None, pid: int) -> Proposal | None:
        with self._lock:
            row = self._conn.execute("SELECT * FROM soul_proposals WHERE id=? AND agent=? AND owner=?",
                                     (pid, agent, owner_column(owner))).fetchone()
        return _proposal(row) if row else None

    def latest(self, agent: str, owner: str | None, *, status: str | None = None) -> Proposal | None:
        sql = "SELECT * FROM soul_proposals WHERE agent=? AND owner=?"
        args: list[Any] = [agent, owner_column(owner)]
        if status:
            sql += " AND status=?"
            args.append(status)
        with self._lock:
            row = self._conn.execute(sql + " ORDER BY id DESC LIMIT 1", args).fetchone()
        return _proposal(row) if row else None

    def decide(self, pid: int, status: str, at: str, by: str, batch: str | None = None) -> None:
        with self._write() as conn:
            conn.execute("UPDATE soul_proposals SET status=?, decided_at=?, decided_by=?, batch=? WHERE id=?",
                         (status, at, by, batch, pid))
