"""`/api/v1/memory/{agentId}/facts…` and `…/turns/{turnId}/memory`: facts with trust, feedback,
confirmations, edits, a rebuild, and what a turn's context carried.

The owner is the `owner` query parameter on every route (as `summarize` and the structured routes
take it): a fact or turn of another owner is a 404, exactly like one that does not exist. With
`mate.memory.fact.projection-enabled` off the facts routes answer 409 naming the key; the turn
record does not depend on it. Parse, call the service, render.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Path, Query
from pydantic import ConfigDict, Field

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.deps import AGENT_PATTERN, OwnerQuery, declared_query_only, get_services, known_agent
from mateclaw_mem.errors import NotFoundError
from mateclaw_mem.memory.facts.service import FactService
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.wire import Wire

router = APIRouter(prefix="/api/v1/memory/{agentId}", tags=["facts"],
                   dependencies=[Depends(require_api_key), Depends(known_agent), Depends(declared_query_only)])

AgentId = Path(alias="agentId", pattern=AGENT_PATTERN, description="agent name, e.g. default")
FactId = Path(alias="factId", pattern=r"^[A-Za-z0-9_-]{1,64}$", description="a fact id from the facts list")
TurnId = Path(alias="turnId", pattern=r"^[A-Za-z0-9_-]{1,64}$", description="the `turn` a context build returned")
ACTOR = "person"  # feedback, confirmations and edits over this API are a person's (the Memory Browser's)

UNKNOWN_FACT = {"description": "no such fact for this agent and owner"}
PROJECTION_OFF = {"description": "fact projection is off (`mate.memory.fact.projection-enabled`)"}


class _Body(Wire):
    model_config = ConfigDict(extra="forbid", strict=True)


class FactOut(Wire):
    id: str
    agent: str
    owner: str | None
    scope: Literal["personal", "team"]
    file: str = Field(description="the file the claim is in, e.g. MEMORY.md or structured/user.md")
    section: str = Field(description="its `##` section")
    line: int
    key: str = Field(description="the key of a `key: value` claim or a structured entry, else ''")
    value: str
    text: str
    trust: float = Field(description="0.5 at first; feedback and confirmations move it; decays when unused")
    uses: int = Field(description="times it was injected into a prompt for a query it matched")
    helpful: int
    unhelpful: int
    created: str
    updated: str
    last_confirmed: str | None
    last_used: str | None


class FactList(Wire):
    agent: str
    owner: str | None
    count: int
    facts: list[FactOut]


class FactEvent(Wire):
    kind: str = Field(description="helpful | unhelpful | confirm | edit | use | forget")
    at: str | None
    actor: str
    note: str = Field(description="a feedback note; for a use, the turn id")


class FactDetail(FactOut):
    history: list[FactEvent] = Field(description="what people and use did to it, newest first")


class FeedbackIn(_Body):
    feedback: Literal["HELPFUL", "UNHELPFUL"]
    note: str = Field("", max_length=300, description="why (kept with the event)")


class EditIn(_Body):
    text: str = Field(min_length=1, max_length=2000, description="the fact's new wording, as the person writes it")


class RebuildOut(Wire):
    files: int
    facts: int
    files_dropped: int


class TurnFile(Wire):
    file: str
    sha: str
    personal: bool


class TurnEntry(Wire):
    type: str
    key: str
    sha: str
    block: Literal["always_on", "relevant"]


class TurnFact(Wire):
    id: str
    sha: str
    file: str


class TurnRecalled(Wire):
    provider: str
    source: str
    sha: str


class TurnMemoryOut(Wire):
    """What one context build injected: ids and hashes, never the text."""

    turn_id: str
    agent: str
    owner: str | None
    at: str
    conversation_id: str | None
    memoryless: bool
    files: list[TurnFile]
    entries: list[TurnEntry]
    facts: list[TurnFact]
    recalled: list[TurnRecalled]


def _facts(services: Services) -> FactService:
    facts = services.facts
    facts.require_enabled()
    return facts


def _out(view: Any) -> FactOut:
    return FactOut(**view.to_dict())


@router.get("/facts", response_model=FactList, responses={409: PROJECTION_OFF},
            summary="facts with their trust: all, of one file, or relevant to a query")
def list_facts(
    agent: str = AgentId,
    q: str | None = Query(None, min_length=1, max_length=2000, description="relevant to these words"),
    file: str | None = Query(None, min_length=1, max_length=300, description="only facts from this file"),
    limit: int = Query(100, ge=1, le=500),
    owner: OwnerQuery = None,
    services: Services = Depends(get_services),
) -> FactList:
    found = _facts(services).list(agent, owner, query=q, file=file, limit=limit)
    return FactList(agent=agent, owner=owner, count=len(found), facts=[_out(f) for f in found])


@router.post("/facts/rebuild", response_model=RebuildOut, responses={409: PROJECTION_OFF},
             summary="reproject every fact from the files now (feedback and uses are kept)")
def rebuild(agent: str = AgentId, services: Services = Depends(get_services)) -> RebuildOut:
    return RebuildOut(**_facts(services).rebuild(agent))


@router.get("/facts/{factId}", response_model=FactDetail, responses={404: UNKNOWN_FACT, 409: PROJECTION_OFF},
            summary="one fact with its event history")
def get_fact(agent: str = AgentId, fact_id: str = FactId, owner: OwnerQuery = None,
             services: Services = Depends(get_services)) -> FactDetail:
    facts = _facts(services)
    view = facts.get(agent, owner, fact_id)
    history = [FactEvent(**h) for h in facts.history(agent, owner, fact_id)]
    return FactDetail(**view.to_dict(), history=history)


@router.post("/facts/{factId}/feedback", response_model=FactOut,
             responses={404: UNKNOWN_FACT, 409: PROJECTION_OFF},
             summary="HELPFUL (+0.1 trust) or UNHELPFUL (-0.2)")
def feedback(body: FeedbackIn, agent: str = AgentId, fact_id: str = FactId, owner: OwnerQuery = None,
             services: Services = Depends(get_services)) -> FactOut:
    return _out(_facts(services).feedback(agent, owner, fact_id, body.feedback, actor=ACTOR, note=body.note))


@router.post("/facts/{factId}/confirm", response_model=FactOut, responses={404: UNKNOWN_FACT, 409: PROJECTION_OFF},
             summary="confirm a fact: trust up, its decay clock reset")
def confirm(agent: str = AgentId, fact_id: str = FactId, owner: OwnerQuery = None,
            services: Services = Depends(get_services)) -> FactOut:
    return _out(_facts(services).confirm(agent, owner, fact_id, actor=ACTOR))


@router.post("/facts/{factId}/edit", response_model=FactOut,
             responses={400: {"description": "the fact's text is no longer in its file as it was"},
                        404: UNKNOWN_FACT, 409: PROJECTION_OFF},
             summary="reword a fact: its line in the file is replaced (a person's edit, undoable)")
def edit(body: EditIn, agent: str = AgentId, fact_id: str = FactId, owner: OwnerQuery = None,
         services: Services = Depends(get_services)) -> FactOut:
    return _out(_facts(services).edit(agent, owner, fact_id, body.text, actor=ACTOR))


@router.get("/turns/{turnId}/memory", response_model=TurnMemoryOut,
            responses={404: {"description": "no such turn for this agent and owner"}},
            summary="what a context build injected: files (sha), structured entries, facts, recalled items")
def turn_memory(agent: str = AgentId, turn_id: str = TurnId, owner: OwnerQuery = None,
                services: Services = Depends(get_services)) -> TurnMemoryOut:
    turns = services.context.turns
    found = turns.get(agent, owner, turn_id) if turns is not None else None
    if found is None:
        raise NotFoundError(f"no turn {turn_id!r} for agent {agent!r}" + (f" (owner {owner})" if owner else ""))
    return TurnMemoryOut(**found.as_dict())
