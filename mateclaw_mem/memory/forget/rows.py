"""A claim cut out of the rows of SQLite tables that keep words as records: run logs, the retrieval
log, dream reports, the contradiction inbox, SOUL.md proposals.

A `TableRule` names one table, its key, the columns that hold words and how they give the claim up:

- "cut": the sentences holding it go (`Cut.cut`); a value left with nothing reads `[forgotten]`, so
  a log keeps its rows (counts, the evidence dreaming weighs) without the words;
- "json": the column is a JSON document (a dream report, a turn's record): a record about the claim
  inside a list (a promoted fact, a candidate, a contradiction) goes whole, so a morning card no
  longer lists a forgotten claim as promoted; every other string is cut as above.

Rows are scoped to the forget: `scope` "files" = the agent and the owner of the files (records
made from the files), "log" = the agent and the owner asked for (records of a conversation), "agent"
= the agent (tables without an owner), "all" = every row (error text of model calls, no agent).

Each file is opened on a connection of its own with `secure_delete` on, all its rules in one write
transaction: the old words are overwritten in the pages they leave, not just unlinked. Which rows
hold the claim is decided in Python (the matcher hashes token windows), so every row of the scope
is read: these tables are small logs. A table that does not exist in this workspace (a mode never
used) is skipped; a declared column that does not exist fails loudly (a rename must not turn a
forget into a silent no-op).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mateclaw_mem.db import connect, owner_column
from mateclaw_mem.errors import MateclawError
from mateclaw_mem.memory.forget.holder import Cut

HOW = ("cut", "json")
SCOPES = ("files", "log", "agent", "all")


@dataclass(frozen=True)
class TableRule:
    db: str  # file name under the state dir ("log.db")
    table: str
    key: str  # a unique column ("id", "run_id", "rowid")
    columns: tuple[str, ...]
    how: str = "cut"
    scope: str = "files"

    def __post_init__(self) -> None:
        if self.how not in HOW or self.scope not in SCOPES:
            raise ValueError(f"{self.name}: how {self.how!r} (one of {HOW}), scope {self.scope!r} (one of {SCOPES})")

    @property
    def name(self) -> str:
        return f"{self.db}:{self.table}"


def forget_rows(state_dir: Path, rules: Iterable[TableRule], cut: Cut) -> dict[str, int]:
    """Apply the rules; {"file.db:table": rows changed}."""
    out: dict[str, int] = {}
    by_db: dict[str, list[TableRule]] = {}
    for rule in rules:
        by_db.setdefault(rule.db, []).append(rule)
    for db, group in by_db.items():
        path = state_dir / db
        if not path.exists():
            out.update({r.name: 0 for r in group})
            continue
        conn = connect(path)
        try:
            conn.execute("PRAGMA secure_delete = ON")
            conn.execute("BEGIN IMMEDIATE")
            try:
                for rule in group:
                    out[rule.name] = _apply(conn, rule, cut)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()
    return out


def rows_left(state_dir: Path, rules: Iterable[TableRule], cut: Cut) -> dict[str, int]:
    """{"file.db:table": rows of the forget's scope that still hold the claim} - the row-level check
    beside the byte scan (derived tables are declared here too, and must come out 0)."""
    out: dict[str, int] = {}
    for rule in rules:
        path = state_dir / rule.db
        if not path.exists():
            continue
        conn = connect(path)
        try:
            if _exists(conn, rule):
                n = sum(1 for _, values in _rows(conn, rule, cut) if any(_holds(v, rule, cut) for v in values))
                if n:
                    out[rule.name] = n
        finally:
            conn.close()
    return out


def _exists(conn: Any, rule: TableRule) -> bool:
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (rule.table,)).fetchone() is None:
        return False
    have = {r["name"] for r in conn.execute(f'PRAGMA table_info("{rule.table}")')}
    missing = [c for c in (*rule.columns, *_scope_columns(rule)) if c not in have and c != "rowid"]
    if missing or (rule.key not in have and rule.key != "rowid"):
        raise MateclawError(f"forget: {rule.name} has no column {', '.join(missing) or rule.key}; "
                            "runtime/holders.py names it (a renamed column must be renamed there too)")
    return True


def _scope_columns(rule: TableRule) -> tuple[str, ...]:
    return {"files": ("agent", "owner"), "log": ("agent", "owner"), "agent": ("agent",), "all": ()}[rule.scope]


def _rows(conn: Any, rule: TableRule, cut: Cut) -> list[tuple[Any, list[Any]]]:
    where, args = "", []
    if rule.scope != "all":
        where, args = " WHERE agent = ?", [cut.agent]
    if rule.scope in ("files", "log"):
        owner = cut.files_owner if rule.scope == "files" else cut.owner
        where, args = where + " AND owner = ?", [*args, owner_column(owner)]
    cols = ", ".join(f'"{c}"' for c in rule.columns)
    sql = f'SELECT {rule.key} AS k, {cols} FROM "{rule.table}"{where}'
    return [(r["k"], [r[c] for c in rule.columns]) for r in conn.execute(sql, args)]


def _apply(conn: Any, rule: TableRule, cut: Cut) -> int:
    if not _exists(conn, rule):
        return 0
    changed = 0
    for key, values in _rows(conn, rule, cut):
        if not any(_holds(v, rule, cut) for v in values):
            continue
        changed += 1
        new = [_cut(v, rule, cut) for v in values]
        sets = ", ".join(f'"{c}" = ?' for c in rule.columns)
        conn.execute(f'UPDATE "{rule.table}" SET {sets} WHERE {rule.key} = ?', (*new, key))
    return changed


def _holds(value: Any, rule: TableRule, cut: Cut) -> bool:
    if not isinstance(value, str):
        return False
    if rule.how == "json":
        return _json_holds(_load(value), cut)
    return cut.holds(value)


def _cut(value: Any, rule: TableRule, cut: Cut) -> Any:
    if not isinstance(value, str):
        return value
    if rule.how == "json":
        doc = _load(value)
        return json.dumps(cut_json(doc, cut), ensure_ascii=False) if _json_holds(doc, cut) else value
    return cut.cut(value)


def _load(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value  # not JSON after all: a plain string, cut as one


def _json_holds(doc: Any, cut: Cut) -> bool:
    # Decoded strings, never the JSON text: "\nI take my tea" spells its first token "nI" there.
    if isinstance(doc, str):
        return cut.holds(doc)
    if isinstance(doc, list):
        return any(_json_holds(v, cut) for v in doc)
    if isinstance(doc, dict):
        return any(_json_holds(k, cut) or _json_holds(v, cut) for k, v in doc.items())
    return False


def cut_json(doc: Any, cut: Cut) -> Any:
    """The document without the claim: a record (an object) in a list that holds it goes whole;
    every other string is cut (`Cut.cut`)."""
    if isinstance(doc, str):
        return cut.cut(doc)
    if isinstance(doc, list):
        return [cut_json(v, cut) for v in doc if not (isinstance(v, dict) and _json_holds(v, cut))]
    if isinstance(doc, dict):
        return {cut.cut(k): cut_json(v, cut) for k, v in doc.items()}
    return doc
