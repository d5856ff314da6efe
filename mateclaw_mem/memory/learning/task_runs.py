"""The run log of task attempts, in `log.db` (a log: appended and completed, never derived).

One row per run: opened by `enter` (or by a result recorded without one), completed by its result.
It feeds the analytics a task context shows — median score and completion rate over the runs of
*every* agent of the workspace on that task (the seed's "how other agents have performed"), with the
asking agent's own share beside it — and says which runs were memoryless. The task memory files hold
the curated numbers a person reads and edits.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mateclaw_mem.db import SharedConnection
from mateclaw_mem.errors import ConflictError, InvalidInputError, NotFoundError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS task_runs (
    run_id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    task TEXT NOT NULL,
    memoryless INTEGER NOT NULL DEFAULT 0,
    entered_at TEXT,
    recorded_at TEXT,
    score REAL,
    breakdown TEXT,
    completed INTEGER,
    harness_hash TEXT,
    seq INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS task_runs_by_task ON task_runs (agent, task, seq);
CREATE INDEX IF NOT EXISTS task_runs_by_slug ON task_runs (task);
"""


@dataclass(frozen=True)
class TaskRun:
    run_id: str
    agent: str
    task: str
    memoryless: bool
    entered_at: str | None
    recorded_at: str | None  # None while the run has no result
    score: float | int | None
    breakdown: dict[str, float | int]
    completed: bool | None
    harness_hash: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ModeStats:
    runs: int = 0
    completed: int = 0
    completion_rate: float | None = None
    median_score: float | int | None = None


@dataclass(frozen=True)
class Analytics:
    """Over the runs of one task, by every agent of the workspace, that have a result.
    Entered-but-unfinished runs are `open_runs`; `own` is the asking agent's share."""

    runs: int
    completed: int
    completion_rate: float | None
    median_score: float | int | None
    memoryless_runs: int
    open_runs: int
    with_memory: ModeStats = field(default_factory=ModeStats)
    memoryless: ModeStats = field(default_factory=ModeStats)
    agents: int = 0  # agents with at least one result on the task
    own: ModeStats = field(default_factory=ModeStats)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _row(row: sqlite3.Row) -> TaskRun:
    return TaskRun(
        run_id=row["run_id"],
        agent=row["agent"],
        task=row["task"],
        memoryless=bool(row["memoryless"]),
        entered_at=row["entered_at"],
        recorded_at=row["recorded_at"],
        score=_clean(row["score"]),
        breakdown={k: _clean(v) for k, v in json.loads(row["breakdown"]).items()} if row["breakdown"] else {},
        completed=None if row["completed"] is None else bool(row["completed"]),
        harness_hash=row["harness_hash"],
    )


def _clean(value: float | None) -> float | int | None:
    # SQLite REAL gives 870.0 back; the caller sent 870.
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**53 else value


def _mode_stats(rows: list[TaskRun]) -> ModeStats:
    if not rows:
        return ModeStats()
    done = sum(1 for r in rows if r.completed)
    scores = [r.score for r in rows if r.score is not None]
    return ModeStats(
        runs=len(rows),
        completed=done,
        completion_rate=round(done / len(rows), 4),
        median_score=_clean(float(statistics.median(scores))) if scores else None,
    )


class TaskRunLog(SharedConnection):
    """Thread-safe: one connection behind a lock (the ConversationLog pattern)."""

    def __init__(self, db_path: Path) -> None:
        super().__init__(db_path, _SCHEMA)

    @staticmethod
    def _next_seq(conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM task_runs").fetchone()[0])

    def open(
        self, run_id: str, agent: str, task: str, *, memoryless: bool, at: str, harness_hash: str | None
    ) -> TaskRun:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO task_runs (run_id, agent, task, memoryless, entered_at, harness_hash, seq)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id, agent, task, int(memoryless), at, harness_hash, self._next_seq(conn)),
            )
        return self.get(run_id)

    def get(self, run_id: str) -> TaskRun:
        with self._lock:
            row = self._conn.execute("SELECT * FROM task_runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no task run {run_id!r} (runs start with `enter`)")
        return _row(row)

    def find(self, run_id: str) -> TaskRun | None:
        try:
            return self.get(run_id)
        except NotFoundError:
            return None

    def record(
        self,
        run_id: str,
        agent: str,
        task: str,
        *,
        memoryless: bool | None,
        score: float,
        breakdown: dict[str, float],
        completed: bool,
        at: str,
        harness_hash: str | None,
    ) -> TaskRun:
        """Complete run `run_id` (opened by `enter`) or log a new one. A run has one result.

        `memoryless` None means "as the run was entered" (False for a new run)."""
        with self._write() as conn:
            row = conn.execute("SELECT * FROM task_runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO task_runs (run_id, agent, task, memoryless, recorded_at, score, breakdown,"
                    " completed, harness_hash, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (run_id, agent, task, int(bool(memoryless)), at, score, json.dumps(breakdown),
                     int(completed), harness_hash, self._next_seq(conn)),
                )
            else:
                run = _row(row)
                if (run.agent, run.task) != (agent, task):
                    raise InvalidInputError(
                        f"run {run_id} belongs to agent {run.agent!r}, task {run.task!r}, not {agent!r}/{task!r}"
                    )
                if run.recorded_at is not None:
                    raise ConflictError(f"run {run_id} already has a result (score {run.score:g})")
                if memoryless is not None and memoryless != run.memoryless:
                    kind = "memoryless" if run.memoryless else "with memory"
                    raise InvalidInputError(f"run {run_id} was entered {kind}; the result cannot say otherwise")
                conn.execute(
                    "UPDATE task_runs SET recorded_at = ?, score = ?, breakdown = ?, completed = ?,"
                    " harness_hash = COALESCE(harness_hash, ?) WHERE run_id = ?",
                    (at, score, json.dumps(breakdown), int(completed), harness_hash, run_id),
                )
        return self.get(run_id)

    def runs(self, agent: str, task: str | None = None, *, limit: int = 100) -> list[TaskRun]:
        """Newest first."""
        sql = "SELECT * FROM task_runs WHERE agent = ?"
        params: list[Any] = [agent]
        if task is not None:
            sql += " AND task = ?"
            params.append(task)
        sql += " ORDER BY seq DESC LIMIT ?"
        params.append(max(1, limit))
        with self._lock:
            return [_row(r) for r in self._conn.execute(sql, params).fetchall()]

    def analytics(self, agent: str, task: str) -> Analytics:
        """Across all agents of the workspace on `task`; `own` is `agent`'s part of it."""
        with self._lock:
            rows = [_row(r) for r in self._conn.execute(
                "SELECT * FROM task_runs WHERE task = ?", (task,)).fetchall()]
        finished = [r for r in rows if r.recorded_at is not None]
        overall = _mode_stats(finished)
        return Analytics(
            runs=overall.runs,
            completed=overall.completed,
            completion_rate=overall.completion_rate,
            median_score=overall.median_score,
            memoryless_runs=sum(1 for r in finished if r.memoryless),
            open_runs=len(rows) - len(finished),
            with_memory=_mode_stats([r for r in finished if not r.memoryless]),
            memoryless=_mode_stats([r for r in finished if r.memoryless]),
            agents=len({r.agent for r in finished}),
            own=_mode_stats([r for r in finished if r.agent == agent]),
        )

    def open_runs(self, agent: str, task: str | None = None) -> list[TaskRun]:
        """Runs `enter` opened that have no result yet, newest first."""
        sql = "SELECT * FROM task_runs WHERE agent = ? AND recorded_at IS NULL"
        params: list[Any] = [agent]
        if task is not None:
            sql += " AND task = ?"
            params.append(task)
        with self._lock:
            return [_row(r) for r in self._conn.execute(sql + " ORDER BY seq DESC", params).fetchall()]

    def counts(self, agent: str) -> dict[str, tuple[int, int]]:
        """task -> (runs with a result, of which memoryless)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT task, COUNT(*) AS n, SUM(memoryless) AS m FROM task_runs"
                " WHERE agent = ? AND recorded_at IS NOT NULL GROUP BY task", (agent,)).fetchall()
        return {r["task"]: (int(r["n"]), int(r["m"] or 0)) for r in rows}
