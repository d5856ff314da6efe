"""`/api/v1/memory/{agentId}/dream/...`: the morning card and the SOUL.md proposal.

`GET …/dream/morning-card` answers 200 with the latest report the owner has not seen (and the
pending SOUL.md proposal), or **204 No Content** when nothing waits: an empty morning is normal, not
an error; an agent that does not exist is the router's 404. `POST …/seen` marks it seen. Each
fact on it can be confirmed, edited (the person's text, through the writer) or forgotten (409 while
`fact.forget-enabled` is off). Parse, call the service, render.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path, Response
from pydantic import ConfigDict, Field

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.deps import (
    AGENT_PATTERN,
    OwnerField,
    OwnerQuery,
    RowId,
    declared_query_only,
    get_services,
    known_agent,
)
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.wire import Wire

router = APIRouter(prefix="/api/v1/memory/{agentId}/dream", tags=["morning card"],
                   dependencies=[Depends(require_api_key), Depends(known_agent), Depends(declared_query_only)])

AgentId = Path(alias="agentId", pattern=AGENT_PATTERN, description="agent name, e.g. default")
FactId = Path(alias="factId", min_length=1, max_length=64, description="a fact id from the card")


class _Body(Wire):
    model_config = ConfigDict(extra="forbid", strict=True)

    owner: OwnerField = None


class EditIn(_Body):
    text: str = Field(min_length=1, max_length=2000, description="the fact as the person wants it written")


class ProposalIn(_Body):
    id: RowId | None = Field(None, description="proposal id; omit for the pending one")


@router.get("/morning-card", summary="last night's report for the owner, if unseen (204 when nothing waits)",
            responses={204: {"description": "no unseen report and no SOUL.md proposal"}})
def morning_card(agent: str = AgentId, owner: OwnerQuery = None, services: Services = Depends(get_services)) -> Any:
    card = services.morning_card.card(agent, owner)
    return Response(status_code=204) if card is None else card


@router.post("/morning-card/seen", summary="mark the card (and older unseen reports) seen")
def seen(body: _Body | None = None, agent: str = AgentId,
         services: Services = Depends(get_services)) -> dict[str, Any]:
    return services.morning_card.seen(agent, (body or _Body()).owner)


@router.post("/morning-card/facts/{factId}/confirm", summary="confirm a fact: trust up, decay clock reset")
def confirm(body: _Body | None = None, agent: str = AgentId, fid: str = FactId,
            services: Services = Depends(get_services)) -> dict[str, Any]:
    return services.morning_card.confirm(agent, (body or _Body()).owner, fid)


@router.post("/morning-card/facts/{factId}/edit", summary="replace a fact with the person's text")
def edit(body: EditIn, agent: str = AgentId, fid: str = FactId,
         services: Services = Depends(get_services)) -> dict[str, Any]:
    return services.morning_card.edit(agent, body.owner, fid, body.text)


@router.post("/morning-card/facts/{factId}/forget", summary="forget a fact everywhere (409 when forget is off)")
def forget(body: _Body | None = None, agent: str = AgentId, fid: str = FactId,
           services: Services = Depends(get_services)) -> dict[str, Any]:
    return services.morning_card.forget(agent, (body or _Body()).owner, fid)


@router.get("/soul-proposal", summary="the pending SOUL.md proposal with its diff (204 when none)",
            responses={204: {"description": "no proposal waiting"}})
def soul_proposal(agent: str = AgentId, owner: OwnerQuery = None, services: Services = Depends(get_services)) -> Any:
    proposal = services.soul.pending(agent, owner)
    return Response(status_code=204) if proposal is None else proposal.to_dict()


@router.post("/soul-proposal/apply", summary="write the proposal (pinned and person sections kept; undoable)")
def soul_apply(body: ProposalIn | None = None, agent: str = AgentId,
               services: Services = Depends(get_services)) -> dict[str, Any]:
    body = body or ProposalIn()
    return services.soul.apply(agent, body.owner, body.id, actor="person")


@router.post("/soul-proposal/reject", summary="drop the proposal; SOUL.md stays as it is")
def soul_reject(body: ProposalIn | None = None, agent: str = AgentId,
                services: Services = Depends(get_services)) -> dict[str, Any]:
    body = body or ProposalIn()
    return services.soul.reject(agent, body.owner, body.id, actor="person")
