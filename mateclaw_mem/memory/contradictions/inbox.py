"""The contradiction inbox: a table in facts.db (beside the projection, its own connection).

One row per disagreeing pair an owner sees, keyed by the pair's fingerprint (the two normalised
texts), so a rebuild finds the same row again: an IGNOREd or resolved pair stays what the person
made it and never comes back as new. Open pairs the files no longer hold are dropped on the next
detection; the texts and sources are kept as they were when detected, for the side-by-side view.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mateclaw_mem.db import SharedConnection, owner_column

STATUSES = ("open", "resolved", "ignored", "dismissed")  # dismissed: the judge found no contradiction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS contradictions (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    kind TEXT NOT NULL,
    reason TEXT NOT NULL,
    fact_a TEXT NOT NULL, text_a TEXT NOT NULL, file_a TEXT NOT NULL, section_a TEXT NOT NULL,
    line_a INTEGER NOT NULL, scope_a TEXT NOT NULL,
    fact_b TEXT NOT NULL, text_b TEXT NOT NULL, file_b TEXT NOT NULL, section_b TEXT NOT NULL,
    line_b INTEGER NOT NULL, scope_b TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'open',
    verdict TEXT NOT NULL DEFAULT '',
    verdict_reason TEXT NOT NULL DEFAULT '',
    detected_ms INTEGER NOT NULL,
    resolved_ms INTEGER,
    action TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS contradictions_owner ON contradictions (agent, owner, status);
"""


@dataclass(frozen=True)
class Side:
    fact: str
    text: str
    file: str
    section: str
    line: int
    scope: str  # "personal" | "team"


@dataclass(frozen=True)
class PairRow:
    id: str
    agent: str
    owner: str | None
    kind: str
    reason: str
    a: Side
    b: Side
    status: str
    verdict: str
    verdict_reason: str
    detected_ms: int
    resolved_ms: int | None
    action: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pair(r: Any) -> PairRow:
    def side(s: str) -> Side:
        return Side(r[f"fact_{s}"], r[f"text_{s}"], r[f"file_{s}"], r[f"section_{s}"], r[f"line_{s}"], r[f"scope_{s}"])

    return PairRow(r["id"], r["agent"], r["owner"] or None, r["kind"], r["reason"], side("a"), side("b"), r["status"],
                   r["verdict"], r["verdict_reason"], r["detected_ms"], r["resolved_ms"], r["action"])


class InboxDB(SharedConnection):
    def __init__(self, path: Path) -> None:
        super().__init__(path, _SCHEMA)

    def sync(self, agent: str, owner: str | None, found: list[tuple[str, str, str, Side, Side]],
             now_ms: int, *, busy: frozenset[str] = frozenset()) -> int:
        """The pairs detected now for (agent, owner): (id, kind, reason, a, b). New ones open; open
        ones are refreshed (or dropped when no longer found); ignored / dismissed ones stay as they are.
        `busy`: pairs being resolved right now, left alone. Returns how many are new."""
        o = owner_column(owner)
        new = 0
        with self._write() as conn:
            known = {r["id"]: r["status"] for r in conn.execute(
                "SELECT id, status FROM contradictions WHERE agent=? AND owner=?", (agent, o)) if r["id"] not in busy}
            found = [f for f in found if f[0] not in busy]  # being resolved: its writes re-project midway
            ids = {f[0] for f in found}
            for pid, status in known.items():
                if status == "open" and pid not in ids:
                    conn.execute("DELETE FROM contradictions WHERE id=? AND agent=? AND owner=?", (pid, agent, o))
            for pid, kind, reason, a, b in found:
                if pid in known and known[pid] in ("ignored", "dismissed"):
                    continue  # what the person (or the judge) said about this pair stands
                sides = (a.fact, a.text, a.file, a.section, a.line, a.scope,
                         b.fact, b.text, b.file, b.section, b.line, b.scope)
                if pid in known:
                    # A resolved pair whose two claims are back in the files is open again.
                    conn.execute("UPDATE contradictions SET kind=?, reason=?, fact_a=?, text_a=?, file_a=?,"
                                 " section_a=?, line_a=?, scope_a=?, fact_b=?, text_b=?, file_b=?, section_b=?,"
                                 " line_b=?, scope_b=?, status='open' WHERE id=?", (kind, reason, *sides, pid))
                    continue
                conn.execute("INSERT INTO contradictions(id, agent, owner, kind, reason, fact_a, text_a, file_a,"
                             " section_a, line_a, scope_a, fact_b, text_b, file_b, section_b, line_b, scope_b,"
                             " detected_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                             (pid, agent, o, kind, reason, *sides, now_ms))
                new += 1
        return new

    def get(self, agent: str, owner: str | None, pid: str) -> PairRow | None:
        with self._lock:
            r = self._conn.execute("SELECT * FROM contradictions WHERE id=? AND agent=? AND owner=?",
                                   (pid, agent, owner_column(owner))).fetchone()
        return _pair(r) if r else None

    def list(self, agent: str, owner: str | None, status: str | None = "open") -> list[PairRow]:
        sql, args = "SELECT * FROM contradictions WHERE agent=? AND owner=?", [agent, owner_column(owner)]
        if status is not None:
            sql, args = sql + " AND status=?", [*args, status]
        with self._lock:
            return [_pair(r) for r in self._conn.execute(sql + " ORDER BY detected_ms, id", args)]

    def unjudged(self, agent: str, owner: str | None) -> list[PairRow]:
        return [p for p in self.list(agent, owner) if not p.verdict]

    def set_verdict(self, pid: str, verdict: str, reason: str, status: str) -> None:
        with self._write() as conn:
            conn.execute("UPDATE contradictions SET verdict=?, verdict_reason=?, status=? WHERE id=? AND status='open'",
                         (verdict, reason, status, pid))

    def close_pair(self, pid: str, status: str, action: str, now_ms: int) -> None:
        with self._write() as conn:
            conn.execute("UPDATE contradictions SET status=?, action=?, resolved_ms=? WHERE id=?",
                         (status, action, now_ms, pid))
