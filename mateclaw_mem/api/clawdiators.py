"""The Clawdiators seed's learning-memory paths and JSON shapes, as thin routes over `services.learning`.

    GET   /agents/me                                  profile + global memory (redacted during a memoryless run)
    PATCH /agents/me/memory                           strategies, category_notes, stats_summary, reflections
    GET   /agents/me/memory/challenges                one summary per task
    GET   /agents/me/memory/challenges/{slug}         one task's memory (an empty record if none yet)
    PATCH /agents/me/memory/challenges/{slug}         its notes and strategies
    GET   /agents/me/harness-lineage                  {versions, currentHash}
    PATCH /agents/me/harness-lineage/{hash}/label     label a version
    POST  /matches/enter                              {challenge_slug, memoryless} -> match_id + challenge_md
    GET   /matches/{match_id}                         the run
    POST  /matches/{match_id}/submit                  {score, score_breakdown} (the caller scores; we don't judge)
    POST  /matches/{match_id}/reflect                 {lesson} -> {reflections_count}

Served at the root and, for clients that put the seed's `/api/v1` base in front, under `/api/v1` too
(hidden from the schema: the same operations). "me" is the default agent, or the agent an `X-Agent-Id`
header names. Answers use the seed's envelope: `{"ok": true, "data": …}`; errors
`{"ok": false, "data": null, "error": reason, "status": N, "detail": {"reason": …}}`. A match is a task
run of the run log; a challenge is a task slug. Where our memory holds less than the seed's objects
(a strategy's `confidence`, a reflection's `result`), those fields are null.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Request, Response
from fastapi.routing import APIRoute

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.clawdiators_models import (
    ChallengeMemory,
    ChallengePatch,
    ChallengeSummary,
    EnterIn,
    EnterOut,
    Envelope,
    LabelIn,
    LabelOut,
    LineageOut,
    MatchOut,
    MemoryOut,
    MemoryPatch,
    MeOut,
    ReflectIn,
    ReflectOut,
    SeedError,
    StrategyItem,
    SubmitIn,
    SubmitOut,
    Updated,
)
from mateclaw_mem.api.deps import AGENT_PATTERN, get_services
from mateclaw_mem.errors import NotFoundError
from mateclaw_mem.runtime.services import Services

Slug = Path(min_length=1, max_length=64, description="challenge (task) slug: lowercase letters, digits, . _ -")
MatchId = Path(alias="match_id", min_length=1, max_length=64, description="the match_id `enter` returned")


class _SeedRoute(APIRoute):
    """Wraps a success as `{"ok": true, "data": …}` and any error in the seed's error envelope,
    keeping our `detail` inside it (the app's own handlers render the reason)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                for kind in type(exc).__mro__:
                    render = request.app.exception_handlers.get(kind)
                    if render is not None:
                        plain = await render(request, exc)
                        break
                else:
                    raise
                detail = json.loads(bytes(plain.body)).get("detail", {})
                body = {"ok": False, "data": None, "error": detail.get("reason", "error"),
                        "status": plain.status_code, "detail": detail}
                headers = {k: v for k, v in plain.headers.items()
                           if k.lower() not in ("content-length", "content-type")}
                return Response(json.dumps(body), status_code=plain.status_code, headers=headers,
                                media_type="application/json")

        return run


def _ok(data: Any) -> dict[str, Any]:
    return {"ok": True, "data": data}


async def _agent(
    services: Services = Depends(get_services),
    x_agent_id: Annotated[str | None, Header(alias="X-Agent-Id", pattern=AGENT_PATTERN,
                                             description="the agent 'me' is (default: the default agent)")] = None,
) -> str:
    return x_agent_id or services.settings.default_agent


def _learning(services: Services = Depends(get_services)) -> Any:
    return services.learning


def _base(request: Request, tail: str) -> str:
    """`/api/v1` when the client came that way, "" at the root: the URLs we hand back follow it."""
    path = request.url.path
    return path[: len(path) - len(tail)] if tail and path.endswith(tail) else ""


# -- conversions --------------------------------------------------------------------------------------


def _memory(mem: Any) -> dict[str, Any]:
    return {
        "reflections": [{"matchId": None, "boutName": r.task, "result": None, "score": None, "lesson": r.text,
                         "ts": r.at or None} for r in mem.reflections],
        "strategies": [{"insight": s, "confidence": None, "ts": mem.updated} for s in mem.strategies],
        "category_notes": {k: {"note": v, "confidence": None, "ts": mem.updated} for k, v in mem.categories.items()},
        "stats_summary": mem.stats or None,
    }


_EMPTY_MEMORY = {"reflections": [], "strategies": [], "category_notes": {}, "stats_summary": None}


def _insights(items: list[StrategyItem | str]) -> list[str]:
    return [i if isinstance(i, str) else i.insight for i in items]


def _stats(value: dict[str, Any] | str | None) -> str:
    if isinstance(value, dict):
        return "\n".join(f"{k}: {v}" for k, v in value.items() if v is not None)
    return value or ""


def _breakdown(parts: dict[str, Any] | None) -> dict[str, float] | None:
    if parts is None:
        return None
    return {k: (v.get("score") if isinstance(v, dict) else v) for k, v in parts.items()}


def _match(run: Any) -> dict[str, Any]:
    status = "active" if run.recorded_at is None else ("completed" if run.completed else "failed")
    return {"match_id": run.run_id, "challenge_slug": run.task, "status": status, "memoryless": run.memoryless,
            "score": run.score, "score_breakdown": run.breakdown, "entered_at": run.entered_at,
            "submitted_at": run.recorded_at}


# -- routes ---------------------------------------------------------------------------------------------

_SEED_ROUTER = {"route_class": _SeedRoute, "tags": ["clawdiators"], "dependencies": [Depends(require_api_key)],
                "responses": {s: {"model": SeedError} for s in (400, 401, 403, 404, 409, 422)}}
routes = APIRouter(**_SEED_ROUTER)


@routes.get("/agents/me", response_model=Envelope[MeOut], summary="the agent 'me' is: profile and memory")
def get_me(agent: str = Depends(_agent), services: Services = Depends(get_services)) -> dict[str, Any]:
    learning = services.learning
    mem = learning.memory(agent)
    open_runs = learning.open_runs(agent)
    redacted = any(r.memoryless for r in open_runs)  # as the seed: no memory leaks into a memoryless match
    return _ok({"id": agent, "name": agent, "match_count": sum(n for n, _ in learning.runs.counts(agent).values()),
                "memory": _EMPTY_MEMORY if redacted else _memory(mem), "memory_redacted": redacted,
                "open_matches": [r.run_id for r in open_runs], "harness_hash": services.lineage.current_hash(agent)})


@routes.patch("/agents/me/memory", response_model=Envelope[MemoryOut], summary="change the global memory")
def patch_memory(body: MemoryPatch, agent: str = Depends(_agent), learning: Any = Depends(_learning)) -> dict[str, Any]:
    fields = body.model_fields_set
    categories: dict[str, str | None] | None = None
    if body.category_notes is not None:
        new = {k: (v if isinstance(v, str) or v is None else v.note) for k, v in body.category_notes.items()}
        categories = {k: None for k in learning.memory(agent).categories if k not in new} | new
    mem = learning.update_memory(
        agent, strategies=None if body.strategies is None else _insights(body.strategies), categories=categories,
        stats=_stats(body.stats_summary) if "stats_summary" in fields else None, actor="api")
    known = {r.text for r in mem.reflections}
    for item in reversed(body.reflections or []):  # oldest first, so the list ends newest first
        if item.lesson.strip() in known:
            continue
        run = learning.runs.find(item.matchId) if item.matchId else None
        ours = run is not None and run.agent == agent
        learning.reflect(agent, run.task if ours else None, item.lesson, run_id=item.matchId if ours else None,
                         actor="api")
        known.add(item.lesson.strip())
    return _ok({"memory": _memory(learning.memory(agent))})


@routes.get("/agents/me/memory/challenges", response_model=Envelope[list[ChallengeSummary]],
            summary="one summary per challenge (task)")
def list_challenges(agent: str = Depends(_agent), learning: Any = Depends(_learning)) -> dict[str, Any]:
    return _ok([{"challenge_slug": t.task, "attempt_count": t.attempt_count, "best_score": t.best_score,
                 "avg_score": t.avg_score, "last_attempted_at": t.updated,
                 "score_trend": t.score_trend if t.has_memory else None, "runs": t.runs,
                 "memoryless_runs": t.memoryless_runs} for t in learning.list_tasks(agent)])


@routes.get("/agents/me/memory/challenges/{slug}", response_model=Envelope[ChallengeMemory],
            summary="one challenge's memory (an empty record before the first attempt)")
def get_challenge(slug: str = Slug, agent: str = Depends(_agent), learning: Any = Depends(_learning)) -> dict[str, Any]:
    try:
        tm = learning.task_memory(agent, slug)
    except NotFoundError:
        learning.open_runs(agent, slug)  # the agent and the slug are still checked (404 / 400)
        return _ok({"challenge_slug": slug, "attempt_count": 0, "best_score": None, "avg_score": None,
                    "last_attempted_at": None, "score_trend": None, "best_score_breakdown": None,
                    "best_match_id": None, "recent_scores": [], "notes": None, "strategies": []})
    best = [r for r in learning.run_list(agent, slug, limit=1000)
            if not r.memoryless and r.score is not None and r.score == tm.best_score]
    return _ok({"challenge_slug": slug, "attempt_count": tm.attempt_count, "best_score": tm.best_score,
                "avg_score": tm.avg_score, "last_attempted_at": tm.updated, "score_trend": tm.score_trend,
                "best_score_breakdown": tm.best_score_breakdown or None,
                "best_match_id": best[-1].run_id if best else None, "recent_scores": tm.recent_scores,
                "notes": tm.notes or None,
                "strategies": [{"insight": s, "confidence": None, "ts": tm.updated} for s in tm.strategies]})


@routes.patch("/agents/me/memory/challenges/{slug}", response_model=Envelope[Updated],
              summary="change a challenge's notes or strategies")
def patch_challenge(
    body: ChallengePatch, slug: str = Slug, agent: str = Depends(_agent), learning: Any = Depends(_learning)
) -> dict[str, Any]:
    notes = (body.notes or "") if "notes" in body.model_fields_set else None
    learning.update_task(agent, slug, notes=notes,
                         strategies=None if body.strategies is None else _insights(body.strategies), actor="api")
    return _ok({"challenge_slug": slug, "updated": True})


@routes.get("/agents/me/harness-lineage", response_model=Envelope[LineageOut],
            summary="every version of the system prompt")
def get_lineage(agent: str = Depends(_agent), services: Services = Depends(get_services)) -> dict[str, Any]:
    return _ok(services.lineage.versions(agent))


@routes.patch("/agents/me/harness-lineage/{hash}/label", response_model=Envelope[LabelOut],
              summary="label a harness version")
def label_version(
    body: LabelIn, hash: str = Path(min_length=8, max_length=64), agent: str = Depends(_agent),
    services: Services = Depends(get_services),
) -> dict[str, Any]:
    version = services.lineage.label(agent, hash, body.label)
    return _ok({"hash": version["hash"], "label": version["label"]})


@routes.post("/matches/enter", response_model=Envelope[EnterOut], status_code=201,
             summary="start a run of a challenge: its CHALLENGE.md with the memory context")
def enter(
    request: Request, body: EnterIn | None = None, agent: str = Depends(_agent), learning: Any = Depends(_learning),
) -> dict[str, Any]:
    body = body or EnterIn()
    ctx = learning.enter(agent, body.challenge_slug, memoryless=body.memoryless)
    base = _base(request, "/matches/enter")
    done = learning.runs.counts(agent).get(ctx.task, (0, 0))[0]
    return _ok({"match_id": ctx.run_id, "challenge": {"slug": ctx.task, "name": ctx.task},
                "challenge_md": ctx.text, "attempt_number": done + 1, "memoryless": ctx.memoryless,
                "submit_url": f"{base}/matches/{ctx.run_id}/submit",
                "reflect_url": f"{base}/matches/{ctx.run_id}/reflect",
                "harness_hash": ctx.harness_hash, "analytics": ctx.analytics.to_dict() if ctx.analytics else None})


@routes.get("/matches/{match_id}", response_model=Envelope[MatchOut], summary="one match (run)")
def get_match(
    match_id: str = MatchId, agent: str = Depends(_agent), learning: Any = Depends(_learning)
) -> dict[str, Any]:
    return _ok(_match(learning.run(agent, match_id)))


@routes.post("/matches/{match_id}/submit", response_model=Envelope[SubmitOut],
             summary="record the match's score (the caller scores it; this daemon does not judge answers)")
def submit(
    request: Request, body: SubmitIn, match_id: str = MatchId, agent: str = Depends(_agent),
    learning: Any = Depends(_learning),
) -> dict[str, Any]:
    run = learning.run(agent, match_id)
    out = learning.record_result(agent, run.task, body.score, _breakdown(body.score_breakdown),
                                 completed=body.completed, run_id=match_id, actor="api")
    t = out.task
    return _ok({**_match(out.run), "attempt_count": t.attempt_count if t else None,
                "best_score": t.best_score if t else None, "score_trend": t.score_trend if t else None,
                "reflect_url": f"{_base(request, f'/matches/{match_id}/submit')}/matches/{match_id}/reflect"})


@routes.post("/matches/{match_id}/reflect", response_model=Envelope[ReflectOut],
             summary="store a post-match lesson (refused for a memoryless match)")
def reflect(body: ReflectIn, match_id: str = MatchId, agent: str = Depends(_agent),
            learning: Any = Depends(_learning)) -> dict[str, Any]:
    run = learning.run(agent, match_id)
    out = learning.reflect(agent, run.task, body.lesson, run_id=match_id, actor="api")
    return _ok({"reflections_count": out.reflections_kept})


# The seed's paths at the root (in the schema) and under its `/api/v1` base (same operations, hidden):
# two routers of plain routes, not one router included twice (api/mounting.py says why).
# The error models only document the operations (FastAPI builds a serializer per status per route for
# them, ~0.5 ms a route); these are left out of the document.
hidden = APIRouter(prefix="/api/v1", include_in_schema=False, **{**_SEED_ROUTER, "responses": {}})
for _route in routes.routes:
    assert isinstance(_route, APIRoute)
    hidden.add_api_route(_route.path, _route.endpoint, methods=sorted(_route.methods), name=_route.name,
                         response_model=_route.response_model, status_code=_route.status_code,
                         summary=_route.summary)
routers = (routes, hidden)
