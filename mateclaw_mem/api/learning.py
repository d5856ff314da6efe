"""Learning memory over HTTP: `/api/v1/agents/{agentId}/memory`, `…/tasks/{slug}/…`, harness lineage.

Parse, call `services.learning` / `services.lineage`, render. Writes are machine writes
(`actor="api"`) unless the caller says a person typed the text (`by_person: true`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from pydantic import ConfigDict, Field

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.deps import get_services
from mateclaw_mem.memory.learning.checks import MAX_SCORE, MIN_SCORE
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.wire import Wire

router = APIRouter(prefix="/api/v1/agents/{agentId}", tags=["learning"], dependencies=[Depends(require_api_key)])

AgentId = Path(alias="agentId", min_length=1, max_length=64, description="agent name, e.g. default")
Number = int | float  # 870 stays 870 in JSON, 712.5 stays 712.5
Slug = Path(min_length=1, max_length=64, description="task slug: lowercase letters, digits, '.', '_', '-'")


def _learning(services: Services = Depends(get_services)) -> Any:
    return services.learning


def _lineage(services: Services = Depends(get_services)) -> Any:
    return services.lineage


def _actor(by_person: bool) -> str:
    return "person" if by_person else "api"


class _Body(Wire):
    # Our own API: a typo'd key ("note" for "notes") is a 422, not a silent no-op.
    model_config = ConfigDict(extra="forbid", strict=True)


# -- responses -------------------------------------------------------------------------------------


class ReflectionOut(Wire):
    at: str
    task: str | None
    text: str


class MemoryOut(Wire):
    agent: str
    stats: str
    strategies: list[str]
    categories: dict[str, str]
    reflections: list[ReflectionOut] = Field(description="newest first; at most 20 (older ones are archived)")
    updated: str | None
    sha: str
    limits: dict[str, int]


class TaskOut(Wire):
    agent: str
    task: str
    attempt_count: int
    best_score: Number | None
    avg_score: Number | None
    score_trend: str = Field(description="improving, declining, stable or volatile (last 3 scores)")
    best_score_breakdown: dict[str, Number]
    recent_scores: list[Number]
    notes: str
    strategies: list[str]
    updated: str | None
    sha: str


class TaskSummaryOut(Wire):
    task: str
    attempt_count: int
    best_score: Number | None
    avg_score: Number | None
    score_trend: str
    updated: str | None
    runs: int = Field(description="results in the run log, memoryless ones included")
    memoryless_runs: int
    has_memory: bool = Field(description="false when the task was only ever run memoryless")


class TaskListOut(Wire):
    agent: str
    tasks: list[TaskSummaryOut]


class RunOut(Wire):
    run_id: str
    agent: str
    task: str
    memoryless: bool
    entered_at: str | None
    recorded_at: str | None
    score: Number | None
    breakdown: dict[str, Number]
    completed: bool | None
    harness_hash: str | None


class RunListOut(Wire):
    agent: str
    task: str
    runs: list[RunOut]


class ResultOut(Wire):
    memoryless: bool
    run: RunOut
    task: TaskOut | None = Field(description="the updated task memory; null for a memoryless run (untouched)")


class ReflectOut(Wire):
    reflection: ReflectionOut
    archived: list[str] = Field(description="archive files that received reflections pushed past the newest 20")
    reflections_kept: int


class ModeStatsOut(Wire):
    runs: int
    completed: int
    completion_rate: Number | None
    median_score: Number | None


class AnalyticsOut(Wire):
    """Over every agent of the workspace that ran the task; `own` is the asking agent's share."""

    runs: int
    completed: int
    completion_rate: Number | None
    median_score: Number | None
    memoryless_runs: int
    open_runs: int
    with_memory: ModeStatsOut
    memoryless: ModeStatsOut
    agents: int = Field(description="agents with at least one result on the task")
    own: ModeStatsOut = Field(description="the asking agent's own runs")


class EnterOut(Wire):
    run_id: str
    agent: str
    task: str
    memoryless: bool
    context: str = Field(description="TASK.md-style context to put in front of the agent")
    memory: MemoryOut | None
    task_memory: TaskOut | None
    analytics: AnalyticsOut | None
    harness_hash: str | None


class VersionOut(Wire):
    hash: str
    label: str | None
    registered_at: str
    source: str


class LineageOut(Wire):
    versions: list[VersionOut]
    currentHash: str | None  # camelCase: the contract's name


# -- requests --------------------------------------------------------------------------------------


class MemoryPatch(_Body):
    stats: str | None = Field(None, description="the stats summary (free text)")
    strategies: list[str] | None = Field(None, description="replace the whole list (at most 10)")
    add_strategy: str | None = None
    remove_strategy: int | str | None = Field(None, description="1-based number or exact text")
    categories: dict[str, str | None] | None = Field(None, description="category -> notes; null or '' removes it")
    by_person: bool = False


class TaskPatch(_Body):
    notes: str | None = Field(None, description="at most 2,000 characters")
    strategies: list[str] | None = Field(None, description="replace the whole list (at most 10)")
    add_strategy: str | None = None
    remove_strategy: int | str | None = Field(None, description="1-based number or exact text")
    by_person: bool = False


class ResultIn(_Body):
    score: float = Field(ge=MIN_SCORE, le=MAX_SCORE, description="0-1000, the seed's scale")
    breakdown: dict[str, Annotated[float, Field(ge=MIN_SCORE, le=MAX_SCORE)]] | None = None
    completed: bool = True
    memoryless: bool | None = Field(None, description="default: as the run was entered (false without run_id)")
    run_id: str | None = Field(None, min_length=1, max_length=64,
                               description="from enter; default: the task's one open run, else a new run")


class ReflectIn(_Body):
    lesson: str = Field(min_length=1)
    run_id: str | None = Field(None, min_length=1, max_length=64)
    memoryless: bool = False


class EnterIn(_Body):
    memoryless: bool = False


class LabelIn(_Body):
    label: str = Field(max_length=200, description="empty clears the label")
    hash: str | None = Field(None, description="full hash or a unique prefix (8+); default: the current version")


class LabelPatch(_Body):
    label: str = Field(max_length=200)


# -- routes ----------------------------------------------------------------------------------------


@router.get("/memory", response_model=MemoryOut, summary="the agent's global learning memory")
def get_memory(agent: str = AgentId, learning: Any = Depends(_learning)) -> dict[str, Any]:
    return learning.memory(agent).to_dict()


@router.patch("/memory", response_model=MemoryOut, summary="change stats, strategies or category notes")
def patch_memory(body: MemoryPatch, agent: str = AgentId, learning: Any = Depends(_learning)) -> dict[str, Any]:
    return learning.update_memory(
        agent, stats=body.stats, strategies=body.strategies, add_strategy=body.add_strategy,
        remove_strategy=body.remove_strategy, categories=body.categories, actor=_actor(body.by_person),
    ).to_dict()


@router.get("/memory/tasks", response_model=TaskListOut, summary="every task memory, with run counts")
def list_tasks(agent: str = AgentId, learning: Any = Depends(_learning)) -> TaskListOut:
    return TaskListOut(agent=agent, tasks=[TaskSummaryOut(**t.to_dict()) for t in learning.list_tasks(agent)])


@router.get("/memory/tasks/{slug}", response_model=TaskOut, summary="one task's memory")
def get_task(agent: str = AgentId, slug: str = Slug, learning: Any = Depends(_learning)) -> dict[str, Any]:
    return learning.task_memory(agent, slug).to_dict()


@router.patch("/memory/tasks/{slug}", response_model=TaskOut, summary="change a task's notes or strategies")
def patch_task(
    body: TaskPatch, agent: str = AgentId, slug: str = Slug, learning: Any = Depends(_learning)
) -> dict[str, Any]:
    return learning.update_task(
        agent, slug, notes=body.notes, strategies=body.strategies, add_strategy=body.add_strategy,
        remove_strategy=body.remove_strategy, actor=_actor(body.by_person),
    ).to_dict()


@router.post("/tasks/{slug}/results", response_model=ResultOut, summary="record a run's score")
def post_result(
    body: ResultIn, agent: str = AgentId, slug: str = Slug, learning: Any = Depends(_learning)
) -> dict[str, Any]:
    return learning.record_result(
        agent, slug, body.score, body.breakdown, completed=body.completed, memoryless=body.memoryless,
        run_id=body.run_id, actor="api",
    ).to_dict()


@router.get("/tasks/{slug}/results", response_model=RunListOut, summary="runs of a task, newest first")
def get_results(
    agent: str = AgentId,
    slug: str = Slug,
    limit: int = Query(100, ge=1, le=1000),
    learning: Any = Depends(_learning),
) -> RunListOut:
    runs = learning.run_list(agent, slug, limit=limit)
    return RunListOut(agent=agent, task=slug, runs=[RunOut(**r.to_dict()) for r in runs])


@router.post("/tasks/{slug}/reflect", response_model=ReflectOut, summary="store a lesson (refused if memoryless)")
def post_reflect(
    body: ReflectIn, agent: str = AgentId, slug: str = Slug, learning: Any = Depends(_learning)
) -> dict[str, Any]:
    return learning.reflect(agent, slug, body.lesson, run_id=body.run_id, memoryless=body.memoryless,
                            actor="api").to_dict()


@router.post("/tasks/{slug}/enter", response_model=EnterOut, summary="start a run: its TASK.md context")
def post_enter(
    body: EnterIn | None = None, agent: str = AgentId, slug: str = Slug, learning: Any = Depends(_learning)
) -> dict[str, Any]:
    return learning.enter(agent, slug, memoryless=body.memoryless if body else False).to_dict()


@router.get("/harness-lineage", response_model=LineageOut, summary="every version of the system prompt")
def get_lineage(agent: str = AgentId, lineage: Any = Depends(_lineage)) -> dict[str, Any]:
    return lineage.versions(agent)


@router.post("/harness-lineage", response_model=VersionOut, summary="label a version (default: the current one)")
def post_lineage_label(body: LabelIn, agent: str = AgentId, lineage: Any = Depends(_lineage)) -> dict[str, Any]:
    return lineage.label(agent, body.hash, body.label)


@router.patch("/harness-lineage/{hash}", response_model=VersionOut, summary="label a version")
def patch_lineage_label(
    body: LabelPatch,
    agent: str = AgentId,
    hash: str = Path(min_length=8, max_length=64),
    lineage: Any = Depends(_lineage),
) -> dict[str, Any]:
    return lineage.label(agent, hash, body.label)
