"""The outcome of each extraction run (`RunOutcome`) and its log in `log.db` (`extraction_runs`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mateclaw_mem.db import SharedConnection, owner_column

_SCHEMA = """
CREATE TABLE IF NOT EXISTS extraction_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    trigger TEXT NOT NULL,
    mode TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    finished_ms INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    conversations TEXT NOT NULL DEFAULT '',
    new_messages INTEGER NOT NULL DEFAULT 0,
    files_changed TEXT NOT NULL DEFAULT '',
    attempts INTEGER NOT NULL DEFAULT 1,
    redactions INTEGER NOT NULL DEFAULT 0,
    error_kind TEXT,
    error TEXT
);
CREATE INDEX IF NOT EXISTS extraction_runs_bucket ON extraction_runs (agent, owner, id);
"""


@dataclass
class RunOutcome:
    """One run. outcome: updated | no_change | skipped | error."""

    run_id: str
    agent: str
    owner: str | None
    trigger: str
    mode: str
    outcome: str
    reason: str = ""
    conversations: list[str] = field(default_factory=list)
    new_messages: int = 0
    files_changed: list[str] = field(default_factory=list)
    attempts: int = 1
    redactions: int = 0
    error_kind: str | None = None
    error: str | None = None
    started_ms: int = 0
    finished_ms: int = 0
    backlog: list[str] = field(default_factory=list)  # conversations left with unexamined messages
    retry_in_ms: int | None = None  # a failed run that must be retried without a new trigger
    said_ms: int = 0  # when the newest message it read was said: its cooldown runs from there (queue.py)
    later_days: bool = False  # it stopped at a day's end: messages of a later day wait for the next run

    @property
    def ok(self) -> bool:
        return self.outcome != "error"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def log_line(self, ms: float) -> str:
        """The daemon log's line for this run: `extraction default/c1: updated PROFILE.md in 84 ms (rules)`."""
        who = f"{self.agent}/{','.join(self.conversations) or '-'}" + (f" (owner {self.owner})" if self.owner else "")
        what = ", ".join(self.files_changed) or f"({self.reason or 'no files changed'})"
        return f"extraction {who}: {self.outcome} {what} in {ms:.0f} ms ({self.mode})"


# A run id chosen before the run starts, so an HTTP caller can be told where to look while it runs.
_reserved: ContextVar[str | None] = ContextVar("reserved_run_id", default=None)


def new_run_id() -> str:
    return _reserved.get() or "ext-" + uuid.uuid4().hex[:12]


@contextmanager
def reserved_run_id(run_id: str) -> Iterator[str]:
    """The run started in this block on this thread (`extract_now` runs on its caller's thread) is
    recorded under `run_id`; follow-up runs on the queue's workers get their own ids."""
    token = _reserved.set(run_id)
    try:
        yield run_id
    finally:
        _reserved.reset(token)


class ExtractionRunLog(SharedConnection):
    def __init__(self, path: Path) -> None:
        super().__init__(path, _SCHEMA)

    def record(self, out: RunOutcome, now_ms: int) -> None:
        """Keep one run; `now_ms` stands in for a start or finish time the run never set."""
        with self._write() as conn:
            conn.execute(
                "INSERT INTO extraction_runs(run_id, agent, owner, trigger, mode, started_ms, finished_ms, outcome,"
                " reason, conversations, new_messages, files_changed, attempts, redactions, error_kind, error)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    out.run_id, out.agent, owner_column(out.owner), out.trigger, out.mode, out.started_ms or now_ms,
                    out.finished_ms or now_ms, out.outcome, out.reason[:500], ",".join(out.conversations),
                    out.new_messages, ",".join(out.files_changed), out.attempts, out.redactions, out.error_kind,
                    (out.error or "")[:1000] or None,
                ),
            )

    def get(self, run_id: str, fmt: Callable[[int | None], str | None]) -> dict[str, Any] | None:
        """One run by its id, rendered as `recent` renders it; None when no run has that id."""
        with self._lock:
            row = self._conn.execute("SELECT * FROM extraction_runs WHERE run_id = ? ORDER BY id DESC LIMIT 1",
                                     (run_id,)).fetchone()
        return None if row is None else _render(dict(row), fmt)

    def recent(
        self, fmt: Callable[[int | None], str | None], *, agent: str | None = None, owner: str | None = None,
        limit: int = 20,
    ) -> list[dict[str, Any]]:
        """Recent runs, newest first; `fmt` renders the stored millisecond times."""
        where, args = [], []
        if agent is not None:
            where.append("agent = ?")
            args.append(agent)
        if owner is not None:  # "" too: the runs without an owner
            where.append("owner = ?")
            args.append(owner)
        sql = "SELECT * FROM extraction_runs" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY id DESC LIMIT ?"
        with self._lock:
            rows = self._conn.execute(sql, (*args, limit)).fetchall()
        return [_render(dict(r), fmt) for r in rows]


def _render(d: dict[str, Any], fmt: Callable[[int | None], str | None]) -> dict[str, Any]:
    d["started"] = fmt(d.pop("started_ms"))
    d["finished"] = fmt(d.pop("finished_ms"))
    d["conversations"] = [c for c in d["conversations"].split(",") if c]
    d["files_changed"] = [c for c in d["files_changed"].split(",") if c]
    return d
