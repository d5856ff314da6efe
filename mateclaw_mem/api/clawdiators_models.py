"""The Clawdiators seed's JSON shapes (requests and `data` of answers); routes in api/clawdiators.py."""

from __future__ import annotations

from typing import Annotated, Any, Generic, TypeVar

from pydantic import ConfigDict, Field, StrictFloat, StrictInt

from mateclaw_mem.api.learning import AnalyticsOut, VersionOut
from mateclaw_mem.memory.learning.checks import MAX_SCORE, MIN_SCORE
from mateclaw_mem.wire import Wire

T = TypeVar("T")
# Strict: a JSON `false` is not a score or a confidence (lax mode would read it as 0).
Number = StrictInt | StrictFloat


class Envelope(Wire, Generic[T]):
    ok: bool = True
    data: T


class SeedError(Wire):
    ok: bool = False
    data: None = None
    error: str
    status: int
    detail: dict[str, Any]


# -- shapes -----------------------------------------------------------------------------------------


class _In(Wire):
    # The seed's clients send fields we have no use for; what we do read must have its JSON type
    # (`"memoryless": 0` is refused, not read as false).
    model_config = ConfigDict(extra="ignore", strict=True)


class StrategyItem(Wire):
    insight: str
    confidence: Number | None = None
    ts: str | None = None


class CategoryNote(Wire):
    note: str
    confidence: Number | None = None
    ts: str | None = None


class ReflectionItem(Wire):
    matchId: str | None = None
    boutName: str | None = Field(None, description="the challenge slug the lesson is about")
    result: str | None = None
    score: Number | None = None
    lesson: str
    ts: str | None = None


class SeedMemory(Wire):
    reflections: list[ReflectionItem] = Field(description="newest first; at most 20 (older ones are archived)")
    strategies: list[StrategyItem]
    category_notes: dict[str, CategoryNote]
    stats_summary: str | None


class MeOut(Wire):
    id: str
    name: str
    match_count: int = Field(description="runs with a result, every task")
    memory: SeedMemory
    memory_redacted: bool = Field(description="true while the agent has a memoryless match open")
    open_matches: list[str]
    harness_hash: str | None


class MemoryOut(Wire):
    memory: SeedMemory


class _ChallengeFigures(Wire):
    challenge_slug: str
    attempt_count: int
    best_score: Number | None
    avg_score: Number | None
    last_attempted_at: str | None
    score_trend: str | None


class ChallengeSummary(_ChallengeFigures):
    runs: int
    memoryless_runs: int


class ChallengeMemory(_ChallengeFigures):
    best_score_breakdown: dict[str, Number] | None
    best_match_id: str | None
    recent_scores: list[Number]
    notes: str | None
    strategies: list[StrategyItem]


class Updated(Wire):
    challenge_slug: str
    updated: bool


class LineageOut(Wire):
    versions: list[VersionOut]
    currentHash: str | None


class LabelOut(Wire):
    hash: str
    label: str | None


class ChallengeRef(Wire):
    slug: str
    name: str


class EnterOut(Wire):
    match_id: str
    challenge: ChallengeRef
    challenge_md: str = Field(description="CHALLENGE.md: the memory context (nothing learned if memoryless)")
    attempt_number: int
    memoryless: bool
    submit_url: str
    reflect_url: str
    harness_hash: str | None
    analytics: AnalyticsOut | None = Field(description="every agent's runs of this challenge; null if memoryless")


class MatchOut(Wire):
    match_id: str
    challenge_slug: str
    status: str = Field(description="active (no result yet), completed or failed")
    memoryless: bool
    score: Number | None
    score_breakdown: dict[str, Number]
    entered_at: str | None
    submitted_at: str | None


class SubmitOut(MatchOut):
    attempt_count: int | None = Field(description="the challenge memory's attempts; null if memoryless")
    best_score: Number | None
    score_trend: str | None
    reflect_url: str


class ReflectOut(Wire):
    reflections_count: int


class MemoryPatch(_In):
    reflections: list[ReflectionItem] | None = Field(
        None, description="lessons not yet in memory are added (newest first); none is ever removed here")
    strategies: list[StrategyItem | str] | None = Field(None, description="replaces the list (at most 10)")
    category_notes: dict[str, CategoryNote | str | None] | None = Field(
        None, description="replaces the map: a category left out is removed")
    stats_summary: dict[str, Any] | str | None = Field(None, description="an object is kept as `key: value` lines")


class ChallengePatch(_In):
    notes: str | None = Field(None, description="at most 2,000 characters; null clears")
    strategies: list[StrategyItem | str] | None = None


class LabelIn(_In):
    label: str = Field(max_length=200)


class EnterIn(_In):
    challenge_slug: str = Field("cipher-forge", description="the task to run (the seed's default if left out)")
    memoryless: bool = False


class SubmitIn(_In):
    score: float = Field(ge=MIN_SCORE, le=MAX_SCORE, description="0-1000: the caller scores the run")
    score_breakdown: dict[str, Annotated[float, Field(ge=MIN_SCORE, le=MAX_SCORE)] | dict[str, Any]] | None = Field(
        None, description="name -> number, or the seed's {score, weight, weighted} per dimension")
    completed: bool = True


class ReflectIn(_In):
    lesson: str = Field(min_length=1)
