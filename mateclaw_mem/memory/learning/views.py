"""What the learning memory hands back to the faces to render: frozen views with `to_dict`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mateclaw_mem.markdown import learning as md
from mateclaw_mem.memory.learning.checks import LIMITS
from mateclaw_mem.memory.learning.task_runs import TaskRun


@dataclass(frozen=True)
class ReflectionView:
    at: str
    task: str | None
    text: str

    @classmethod
    def of(cls, r: md.Reflection) -> ReflectionView:
        return cls(r.at, r.task, r.text)


@dataclass(frozen=True)
class LearningMemory:
    agent: str
    stats: str
    strategies: list[str]
    categories: dict[str, str]
    reflections: list[ReflectionView]  # newest first
    updated: str | None
    sha: str  # of LEARNING.md ("" before the first write)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["limits"] = {k: LIMITS[k] for k in ("reflections", "strategies")}
        return data


@dataclass(frozen=True)
class TaskMemory:
    agent: str
    task: str
    attempt_count: int
    best_score: float | int | None
    avg_score: float | int | None
    score_trend: str
    best_score_breakdown: dict[str, float | int]
    recent_scores: list[float | int]
    notes: str
    strategies: list[str]
    updated: str | None
    sha: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TaskSummary:
    task: str
    attempt_count: int
    best_score: float | int | None
    avg_score: float | int | None
    score_trend: str
    updated: str | None
    runs: int  # results in the run log, memoryless included
    memoryless_runs: int
    has_memory: bool  # False: only memoryless runs so far, no tasks/<slug>.md

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ResultOutcome:
    run: TaskRun
    task: TaskMemory | None  # None for a memoryless run: the task memory is untouched

    @property
    def memoryless(self) -> bool:
        return self.run.memoryless

    def to_dict(self) -> dict[str, Any]:
        return {"memoryless": self.memoryless, "run": self.run.to_dict(),
                "task": self.task.to_dict() if self.task else None}


@dataclass(frozen=True)
class ReflectOutcome:
    reflection: ReflectionView
    archived: list[str]  # archive files that received older reflections
    reflections_kept: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
