"""The log of dream runs, in `log.db` (`dream_runs`): one row per run that was not a preview, for
`status`, `report` and unique run ids. DREAMS.md (memory/dreaming/diary.py) is the readable side of it.

`dream_reports` holds each run's structured report (memory/dreaming/report.py) as JSON, with its
owner and when that owner saw it on the morning card (`seen_at`, NULL = unseen)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mateclaw_mem.db import SharedConnection, owner_column

if TYPE_CHECKING:
    from mateclaw_mem.memory.dreaming.outcome import DreamOutcome

_SCHEMA = """
CREATE TABLE IF NOT EXISTS dream_runs (
    run_id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    topic TEXT,
    trigger TEXT NOT NULL,
    mode TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    promoted INTEGER NOT NULL DEFAULT 0,
    lines_added INTEGER NOT NULL DEFAULT 0,
    lines_removed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS dream_runs_agent ON dream_runs(agent, owner, started_at);
CREATE TABLE IF NOT EXISTS dream_reports (
    run_id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    started_at TEXT NOT NULL,
    report TEXT NOT NULL,
    seen_at TEXT
);
CREATE INDEX IF NOT EXISTS dream_reports_agent ON dream_reports(agent, owner, started_at);
"""


class DreamRunLog(SharedConnection):
    def __init__(self, path: Path) -> None:
        super().__init__(path, _SCHEMA)

    def record(self, out: DreamOutcome) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO dream_runs(run_id, agent, owner, topic, trigger, mode, started_at, finished_at,"
                " status, reason, promoted, lines_added, lines_removed) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (out.run_id, out.agent, owner_column(out.owner), out.topic, out.trigger, out.mode, out.started_at,
                 out.finished_at, out.status, out.reason, len(out.promoted), out.lines_added, out.lines_removed),
            )
            if out.report:
                conn.execute(
                    "INSERT OR REPLACE INTO dream_reports(run_id, agent, owner, started_at, report) VALUES (?,?,?,?,?)",
                    (out.run_id, out.agent, owner_column(out.owner), out.started_at,
                     json.dumps(out.report, ensure_ascii=False)),
                )

    def has(self, run_id: str) -> bool:
        with self._lock:
            return self._conn.execute("SELECT 1 FROM dream_runs WHERE run_id=?", (run_id,)).fetchone() is not None

    def run_id(self, agent: str, owner: str | None, now: datetime, *, unique: bool = True) -> str:
        """`dream-<agent>[-<owner>]-<YYYYmmddTHHMMSS>`, with `-2`, `-3`... when that second is taken.
        It is also the batch id of the run's writes (`undo --run`)."""
        base = f"dream-{agent}-{now:%Y%m%dT%H%M%S}"
        if owner:
            base = f"dream-{agent}-{re.sub(r'[^A-Za-z0-9_.-]', '_', owner)[:32]}-{now:%Y%m%dT%H%M%S}"
        if not unique:
            return base  # a preview writes nothing, not even to the run log
        with self._lock:
            taken = {r[0] for r in self._conn.execute(
                "SELECT run_id FROM dream_runs WHERE run_id = ? OR run_id LIKE ?", (base, base + "-%"))}
        if base not in taken:
            return base
        n = 2
        while f"{base}-{n}" in taken:
            n += 1
        return f"{base}-{n}"

    def last_run(self, agent: str, *, owner: str | None = None) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT * FROM dream_runs WHERE agent=? AND owner=? ORDER BY started_at DESC, rowid DESC LIMIT 1",
                (agent, owner_column(owner)),
            ).fetchone()
        return dict(row) if row else None

    # -- reports (the morning card) ----------------------------------------------------------------

    def report(self, agent: str, owner: str | None, run_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute("SELECT * FROM dream_reports WHERE run_id=? AND agent=? AND owner=?",
                                     (run_id, agent, owner_column(owner))).fetchone()
        return _report(row)

    def latest_report(self, agent: str, owner: str | None, *, unseen: bool = False) -> dict[str, Any] | None:
        where = " AND seen_at IS NULL" if unseen else ""
        with self._lock:
            row = self._conn.execute(
                f"SELECT * FROM dream_reports WHERE agent=? AND owner=?{where} ORDER BY started_at DESC, rowid DESC"
                " LIMIT 1", (agent, owner_column(owner))).fetchone()
        return _report(row)

    def mark_seen(self, agent: str, owner: str | None, at: str, *, upto: str | None = None) -> int:
        """Mark this owner's unseen reports (those started at or before `upto`, default all) seen."""
        sql = "UPDATE dream_reports SET seen_at=? WHERE agent=? AND owner=? AND seen_at IS NULL"
        args: list[Any] = [at, agent, owner_column(owner)]
        if upto is not None:
            sql += " AND started_at <= ?"
            args.append(upto)
        with self._write() as conn:
            return conn.execute(sql, args).rowcount


def _report(row: Any) -> dict[str, Any] | None:
    if row is None:
        return None
    return {**json.loads(row["report"]), "seen_at": row["seen_at"]}


def log_line(out: DreamOutcome, ms: float, files: list[str]) -> str:
    """The daemon log's line for a run: `dream default: done MEMORY.md, DREAMS.md in 120 ms (rules)`."""
    who = out.agent + (f" (owner {out.owner})" if out.owner else "")
    what = ", ".join(files) + ("" if out.status == "done" else f" ({short_reason(out.reason)})")
    return f"dream {who}: {out.status} {what.strip()} in {ms:.0f} ms ({out.mode})"


def short_reason(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_summary(last: dict[str, Any]) -> dict[str, Any]:
    """A recorded run as `status` shows it."""
    return {
        "run_id": last["run_id"], "at": last["started_at"], "finished_at": last["finished_at"],
        "outcome": last["status"], "reason": last["reason"], "trigger": last["trigger"],
        "topic": last["topic"], "promoted": last["promoted"],
        "lines_added": last["lines_added"], "lines_removed": last["lines_removed"],
    }
