"""`facts.db`: the projection (derived, replaced file by file) and the event log (kept forever).

- `facts`: one row per claim now in a file, with when it was first seen and when its text last
  changed (carried across reprojections by fact id, so a rebuild keeps both);
- `facts_fts`: the claims' tokens (the search index's tokenizer, CJK included) for recall by relevance;
- `fact_events`: feedback, confirmations, edits, uses and forgets, by fact id, with owner -- a
  rebuild never touches it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mateclaw_mem.db import SharedConnection, owner_column
from mateclaw_mem.index.tokenizer import tokenize
from mateclaw_mem.memory.facts.trust import Event

_SCHEMA = """
CREATE TABLE IF NOT EXISTS facts (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    file TEXT NOT NULL,
    section TEXT NOT NULL,
    line INTEGER NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    text TEXT NOT NULL,
    first_seen_ms INTEGER NOT NULL,
    changed_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS facts_file ON facts (agent, owner, file);
CREATE VIRTUAL TABLE IF NOT EXISTS facts_fts USING fts5(id UNINDEXED, tokens);
CREATE TABLE IF NOT EXISTS fact_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    fact_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    kind TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    actor TEXT NOT NULL DEFAULT '',
    note TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS fact_events_fact ON fact_events (fact_id, at_ms);
"""


WRITE_BATCH = 500  # facts written per transaction by `replace_file`
_LAYOUT = 1  # PRAGMA user_version: facts_fts rows keyed by their fact's rowid


@dataclass(frozen=True)
class Row:
    id: str
    agent: str
    owner: str | None
    file: str
    section: str
    line: int
    key: str
    value: str
    text: str
    first_seen_ms: int
    changed_ms: int


def _row(r: Any) -> Row:
    return Row(r["id"], r["agent"], r["owner"] or None, r["file"], r["section"], r["line"], r["key"], r["value"],
               r["text"], r["first_seen_ms"], r["changed_ms"])


def fts_tokens(text: str) -> str:
    return " ".join(dict.fromkeys(t for t in tokenize(text) if t.strip()))


class FactDB(SharedConnection):
    def __init__(self, path: Path) -> None:
        super().__init__(path, _SCHEMA)
        self._key_tokens_by_rowid()

    def _key_tokens_by_rowid(self) -> None:
        """A facts.db written before `facts_fts` rows took their fact's rowid: those rows are made
        again from `facts` once (user_version 1 marks the layout)."""
        with self._lock:
            if self._conn.execute("PRAGMA user_version").fetchone()[0] >= _LAYOUT:
                return
        with self._write() as conn:
            conn.execute("DELETE FROM facts_fts")
            for r in conn.execute("SELECT rowid, id, section, text FROM facts").fetchall():
                conn.execute("INSERT INTO facts_fts(rowid, id, tokens) VALUES (?, ?, ?)",
                             (r["rowid"], r["id"], fts_tokens(f"{r['section']} {r['text']}")))
            conn.execute(f"PRAGMA user_version = {_LAYOUT}")

    # -- projection ------------------------------------------------------------------------------

    def replace_file(self, agent: str, owner: str | None, rel: str, rows: list[Row], now_ms: int) -> None:
        """The facts of one file are now `rows` (first_seen/changed carried over by id). Callers
        serialise the refreshes of one file (FactService.refresh).

        Bounded lock holds: tokenizing is done before any write, only new or changed claims are
        written, and in transactions of WRITE_BATCH rows, so readers and other writers get the lock
        between them (a 100,000-heading MEMORY.md held it for minutes: each FTS delete scanned the
        table's unindexed `id`, and a set was rebuilt per row)."""
        o = owner_column(owner)
        new_ids = {r.id for r in rows}
        select = ("SELECT rowid, id, section, line, key, value, text, first_seen_ms, changed_ms FROM facts"
                  " WHERE agent=? AND owner=? AND file=?")
        with self._lock:
            old = {r["id"]: r for r in self._conn.execute(select, (agent, o, rel)).fetchall()}
        gone = [prev["rowid"] for fid, prev in old.items() if fid not in new_ids]
        todo = [r for r in rows if (prev := old.get(r.id)) is None or (
            prev["section"], prev["line"], prev["key"], prev["value"], prev["text"]) != (
            r.section, r.line, r.key, r.value, r.text)]  # as it was: a rebuild of an unchanged file writes nothing
        tokens = {r.id: fts_tokens(f"{r.section} {r.text}") for r in todo
                  if (prev := old.get(r.id)) is None or prev["text"] != r.text}
        for i in range(0, len(gone), WRITE_BATCH):
            with self._write() as conn:
                conn.executemany("DELETE FROM facts WHERE rowid=?", [(rid,) for rid in gone[i:i + WRITE_BATCH]])
                conn.executemany("DELETE FROM facts_fts WHERE rowid=?", [(rid,) for rid in gone[i:i + WRITE_BATCH]])
        for i in range(0, len(todo), WRITE_BATCH):
            with self._write() as conn:
                for r in todo[i:i + WRITE_BATCH]:
                    prev = old.get(r.id)
                    first = prev["first_seen_ms"] if prev else now_ms
                    changed = (prev["changed_ms"] if prev["text"] == r.text else now_ms) if prev else now_ms
                    rowid = conn.execute(
                        "INSERT INTO facts(id, agent, owner, file, section, line, key, value, text, first_seen_ms,"
                        " changed_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET"
                        " section=excluded.section, line=excluded.line, key=excluded.key, value=excluded.value,"
                        " text=excluded.text, changed_ms=excluded.changed_ms RETURNING rowid",
                        (r.id, agent, o, rel, r.section, r.line, r.key, r.value, r.text, first, changed)).fetchone()[0]
                    if r.id in tokens:
                        conn.execute("DELETE FROM facts_fts WHERE rowid=?", (rowid,))
                        conn.execute("INSERT INTO facts_fts(rowid, id, tokens) VALUES (?, ?, ?)",
                                     (rowid, r.id, tokens[r.id]))

    def file_count(self, agent: str, owner: str | None, rel: str) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM facts WHERE agent=? AND owner=? AND file=?",
                                          (agent, owner_column(owner), rel)).fetchone()[0])

    def files(self, agent: str | None = None) -> list[tuple[str, str | None, str]]:
        sql, args = "SELECT DISTINCT agent, owner, file FROM facts", ()
        if agent is not None:
            sql, args = sql + " WHERE agent=?", (agent,)
        with self._lock:
            return [(r["agent"], r["owner"] or None, r["file"]) for r in self._conn.execute(sql, args)]

    # -- reading ---------------------------------------------------------------------------------

    def get(self, fact_id: str) -> Row | None:
        with self._lock:
            r = self._conn.execute("SELECT * FROM facts WHERE id=?", (fact_id,)).fetchone()
        return _row(r) if r else None

    def list(self, agent: str, owner: str | None, *, file: str | None = None) -> list[Row]:
        sql = "SELECT * FROM facts WHERE agent=? AND owner=?"
        args: tuple[Any, ...] = (agent, owner_column(owner))
        if file is not None:
            sql, args = sql + " AND file=?", (*args, file)
        with self._lock:
            return [_row(r) for r in self._conn.execute(sql + " ORDER BY file, line", args)]

    def match(self, agent: str, owner: str | None, query: str, limit: int) -> list[tuple[Row, float]]:
        """Facts relevant to `query` (bm25 over the tokens), best first."""
        terms = [t for t in dict.fromkeys(tokenize(query)) if t.strip()]
        if not terms:
            return []
        expr = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms[:64])
        with self._lock:
            rows = self._conn.execute(
                "SELECT f.*, bm25(facts_fts) AS score FROM facts_fts JOIN facts f ON f.id = facts_fts.id"
                " WHERE facts_fts MATCH ? AND f.agent=? AND f.owner=? ORDER BY score LIMIT ?",
                (expr, agent, owner_column(owner), limit)).fetchall()
        return [(_row(r), -float(r["score"])) for r in rows]

    # -- events ----------------------------------------------------------------------------------

    def add_event(self, fact_id: str, agent: str, owner: str | None, kind: str, at_ms: int, *, actor: str = "",
                  note: str = "") -> None:
        with self._write() as conn:
            conn.execute("INSERT INTO fact_events(fact_id, agent, owner, kind, at_ms, actor, note)"
                         " VALUES (?,?,?,?,?,?,?)", (fact_id, agent, owner_column(owner), kind, at_ms, actor, note))

    def add_events(self, rows: Iterable[tuple[str, str, str | None, str, int, str, str]]) -> None:
        with self._write() as conn:
            conn.executemany("INSERT INTO fact_events(fact_id, agent, owner, kind, at_ms, actor, note)"
                             " VALUES (?,?,?,?,?,?,?)",
                             [(f, a, owner_column(o), k, t, ac, n) for f, a, o, k, t, ac, n in rows])

    def events(self, fact_ids: list[str]) -> dict[str, list[Event]]:
        out: dict[str, list[Event]] = {fid: [] for fid in fact_ids}
        if not fact_ids:
            return out
        with self._lock:
            for i in range(0, len(fact_ids), 500):
                chunk = fact_ids[i:i + 500]
                marks = ",".join("?" * len(chunk))
                for r in self._conn.execute(
                        f"SELECT fact_id, kind, at_ms FROM fact_events WHERE fact_id IN ({marks}) ORDER BY at_ms",
                        chunk):
                    out[r["fact_id"]].append(Event(r["kind"], r["at_ms"]))
        return out

    def agent_events(self, agent: str) -> list[dict[str, Any]]:
        """Every event of the agent's facts that are in its files now, with what identifies each fact
        (owner, file, section, key, text): a snapshot carries them to another agent."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT f.owner, f.file, f.section, f.key, f.text, e.kind, e.at_ms, e.actor, e.note"
                " FROM fact_events e JOIN facts f ON f.id = e.fact_id WHERE e.agent=? ORDER BY e.seq",
                (agent,)).fetchall()
        return [dict(r) for r in rows]

    def history(self, fact_id: str, limit: int = 50) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute("SELECT kind, at_ms, actor, note FROM fact_events WHERE fact_id=?"
                                      " ORDER BY seq DESC LIMIT ?", (fact_id, limit)).fetchall()
        return [dict(r) for r in rows]
