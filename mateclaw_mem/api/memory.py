"""`/api/v1/memory/{agentId}/...`: the memory lifecycle over HTTP.

Conversation turns (recorded, extraction triggered off the request thread), manual extraction,
dreaming ("emergence"), structured consolidation, the dreaming status and the assembled prompt
context. Parse, call the service, render.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, is_dataclass
from datetime import date
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse
from pydantic import ConfigDict, Field

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.deps import (
    AGENT_PATTERN,
    EndUserField,
    OwnerField,
    OwnerQuery,
    declared_query_only,
    get_services,
    known_agent,
)
from mateclaw_mem.api.errors import error_response
from mateclaw_mem.errors import InvalidInputError, NotFoundError
from mateclaw_mem.runtime.manual_runs import RUNNING, ManualRuns
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.wire import Wire

router = APIRouter(prefix="/api/v1/memory/{agentId}", tags=["memory"],
                   dependencies=[Depends(require_api_key), Depends(known_agent), Depends(declared_query_only)])

AgentId = Path(alias="agentId", pattern=AGENT_PATTERN, description="agent name, e.g. default")
ConversationId = Path(alias="conversationId", min_length=1, max_length=200)
RunId = Path(alias="runId", min_length=1, max_length=100)
# How long `summarize` holds the request before it answers 202 and lets the run go on.
SUMMARIZE_WAIT_SECONDS = 2.0
_manual_runs_lock = threading.Lock()
EndUserOwner = Annotated[OwnerField, Field(description="owner key; defaults to api:<endUserId>")]
EndUserId = Annotated[EndUserField, Field(alias="endUserId", description="the API end user: owner api:<endUserId>")]


class _Body(Wire):
    # Strict: 0 is not a bool and "5" is not a number - the wrong type is a 422, not a guess.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)


class TurnIn(_Body):
    user: str = Field(min_length=1, max_length=200_000, description="what the user said")
    assistant: str = Field("", max_length=200_000, description="what the assistant answered")
    owner: EndUserOwner = None
    end_user_id: EndUserId = None
    trigger_source: Literal["chat", "cron", "consolidation"] = "chat"
    finish_reason: str | None = Field(None, max_length=100)
    memoryless: bool = Field(False, description="log the turn but never extract memory from it")
    timestamp: int | str | None = Field(
        None, description="when the turn was said: unix milliseconds or ISO-8601 (a naive one is in the "
                          "daemon's time zone); default now. A history import files each turn under its own date")


class TriggerOut(Wire):
    scheduled: bool
    reason: str
    explicit: bool
    when: str


class TurnOut(Wire):
    recorded: bool
    agent: str
    conversation_id: str
    extraction: TriggerOut


class RunOut(Wire):
    """One extraction run as the service records it."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    outcome: str = Field(description="updated | no_change | skipped | error")
    reason: str
    files_changed: list[str]


class RunAcceptedOut(Wire):
    run_id: str
    status: Literal["running"] = "running"
    status_url: str = Field(description="GET it for the run's outcome")


class RunStatusOut(Wire):
    """A manual run: still running, or done with its record (outcome, reason, files_changed, ...)."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    status: Literal["running", "done"]
    outcome: str | None = Field(None, description="updated | no_change | skipped | error (when done)")


class DreamOut(Wire):
    """One dream as the service records it (also written to DREAMS.md)."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    status: str = Field(description="done | nothing_to_do | skipped | failed | rejected")
    reason: str
    mode: str
    promoted: list[str]


class EmergenceIn(_Body):
    topic: str | None = Field(None, max_length=500, description="focused dream on this topic; omit for a full one")
    owner: OwnerField = None
    as_of: str | None = Field(None, alias="asOf", pattern=r"^\d{4}-\d{2}-\d{2}$",
                              description="consolidate the night of this date (YYYY-MM-DD) instead of now")


class ConsolidationOut(Wire):
    """The seed's response shape, plus the run id, mode and what happened per bucket."""

    model_config = ConfigDict(extra="allow")

    owners_consolidated: int = Field(alias="ownersConsolidated")
    updated: int
    entries_before: int = Field(alias="entriesBefore")
    entries_after: int = Field(alias="entriesAfter")
    run_id: str = Field(alias="runId")
    mode: str


class ChatMessage(Wire):
    model_config = ConfigDict(extra="allow", strict=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str = Field(max_length=200_000)


class ContextIn(_Body):
    query: str = Field("", max_length=20_000, description="the user's new message the prompt is for")
    owner: EndUserOwner = None
    end_user_id: EndUserId = None
    conversation_id: str | None = Field(
        None, alias="conversationId", max_length=200, description="a memoryless conversation gets no memory"
    )
    system_prompt: str = Field("", alias="systemPrompt", max_length=100_000, description="your own system prompt")
    history: list[ChatMessage] = Field(default_factory=list, max_length=1000, description="earlier messages")
    budget: int | None = Field(None, ge=256, le=10_000_000, description="input token budget for the window")


class ContextOut(Wire):
    model_config = ConfigDict(extra="allow")

    agent: str
    owner: str | None
    memoryless: bool
    tokens: int
    messages: list[dict[str, Any]] = Field(description="what to send to the model, system message first")
    files: list[dict[str, Any]]


def _plain(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    return obj


def _run_response(outcome: Any) -> Any:
    """A run that failed is an error status carrying the run record, never a quiet 200: 502 when
    the configured model failed, 500 otherwise."""
    data = _plain(outcome)
    failed = data.get("outcome") == "error" or data.get("status") == "failed"
    if failed:
        status = 502 if data.get("error_kind") else 500
        return error_response(status, str(data.get("error") or data.get("reason") or "the run failed"), run=data)
    return data


@router.post(
    "/conversations/{conversationId}/turns",
    status_code=202,
    response_model=TurnOut,
    summary="record a chat turn; extraction runs in the background",
)
def record_turn(
    body: TurnIn,
    agent: str = AgentId,
    conversation_id: str = ConversationId,
    services: Services = Depends(get_services),
) -> TurnOut:
    result = services.extraction.record_turn(
        agent,
        conversation_id,
        body.user,
        body.assistant,
        owner=body.owner or body.end_user_id,
        trigger_source=body.trigger_source,
        finish_reason=body.finish_reason,
        memoryless=body.memoryless,
        timestamp=body.timestamp,
    )
    return TurnOut(
        recorded=True,
        agent=agent,
        conversation_id=conversation_id,
        extraction=TriggerOut(scheduled=result.scheduled, reason=result.reason, explicit=result.explicit,
                              when=result.when),
    )


def _manual_runs(request: Request, services: Services) -> ManualRuns:
    """One per app, made on the first manual run and shut down with the services."""
    with _manual_runs_lock:
        runs = getattr(request.app.state, "manual_runs", None)
        if runs is None:
            runs = ManualRuns(services.extraction, services.settings.log_db, services.clock)
            services.on_close(runs)
            request.app.state.manual_runs = runs
        return runs


@router.post(
    "/summarize/{conversationId}",
    response_model=RunOut,
    responses={
        200: {"description": "the run finished within the short wait: its record"},
        202: {"model": RunAcceptedOut, "description": "the run is still going: poll status_url for its outcome"},
        502: {"description": "the configured model failed; the run record is in detail.run"},
    },
    summary="extract memory from a conversation now (no gates, no cooldown)",
)
def summarize(
    request: Request,
    agent: str = AgentId,
    conversation_id: str = ConversationId,
    owner: OwnerQuery = None,
    services: Services = Depends(get_services),
) -> Any:
    run_id, outcome = _manual_runs(request, services).submit(agent, conversation_id, owner,
                                                             wait=SUMMARIZE_WAIT_SECONDS)
    if outcome is not None:
        return _run_response(outcome)
    url = f"/api/v1/memory/{agent}/summarize/runs/{run_id}"
    return JSONResponse(RunAcceptedOut(run_id=run_id, status_url=url).model_dump(), status_code=202,
                        headers={"Location": url})


@router.get(
    "/summarize/runs/{runId}",
    response_model=RunStatusOut,
    responses={
        404: {"description": "no run with this id for this agent"},
        500: {"description": "the run failed; its record is in detail.run"},
        502: {"description": "the configured model failed; the run record is in detail.run"},
    },
    summary="a manual extraction run: running, or its outcome",
)
def summarize_status(
    request: Request, agent: str = AgentId, run_id: str = RunId, services: Services = Depends(get_services)
) -> Any:
    found = _manual_runs(request, services).status(agent, run_id)
    if found is None:
        raise NotFoundError(f"no extraction run {run_id!r} for agent {agent!r}")
    if found == RUNNING:
        return {"run_id": run_id, "status": RUNNING}
    answer = _run_response(found)
    return answer if isinstance(answer, JSONResponse) else {**answer, "status": "done"}


@router.post(
    "/emergence",
    response_model=DreamOut,
    responses={502: {"description": "the configured model failed; the run record is in detail.run"}},
    summary="dream now: consolidate recent daily notes into MEMORY.md (focused when a topic is given)",
)
def emergence(
    body: EmergenceIn | None = None, agent: str = AgentId, services: Services = Depends(get_services)
) -> Any:
    body = body or EmergenceIn()
    dreaming = services.dreaming
    as_of = _day(body.as_of) if body.as_of else None
    return _run_response(dreaming.dream(agent, topic=body.topic, owner=body.owner, trigger="api", as_of=as_of))


def _day(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise InvalidInputError(f"asOf {value!r} is not a calendar date (YYYY-MM-DD)") from None


@router.post("/structured-consolidation", response_model=ConsolidationOut, response_model_by_alias=True,
             summary="merge near-duplicate structured entries now",
             responses={502: {"description": "the model failed for every bucket it was asked about (the body is "
                                             "the run's report)"}})
def structured_consolidation(agent: str = AgentId, services: Services = Depends(get_services)) -> Any:
    report = services.structured_consolidation.run(agent)
    data = report.as_dict()
    if report.model_failed and len(report.model_failed) == len([b for b in report.buckets if b.status != "skipped"]):
        return error_response(502, f"the model failed for every bucket ({report.model_failed[0].detail})", run=data)
    return data


@router.get("/dreaming/status", summary="last dreams, next scheduled run, pending candidates")
def dreaming_status(
    agent: str = AgentId, owner: OwnerQuery = None, services: Services = Depends(get_services)
) -> dict[str, Any]:
    return _plain(services.dreaming.status(agent, owner=owner))


@router.post("/context", response_model=ContextOut, summary="the assembled prompt for a query and owner")
def context(body: ContextIn, agent: str = AgentId, services: Services = Depends(get_services)) -> dict[str, Any]:
    built = services.context.build(
        agent,
        owner=body.owner or body.end_user_id,
        query=body.query,
        history=[m.model_dump() for m in body.history],
        system_prompt=body.system_prompt,
        conversation_id=body.conversation_id,
        budget=body.budget,
    )
    return built.as_dict()
