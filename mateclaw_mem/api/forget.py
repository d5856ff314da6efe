"""`POST /api/v1/memory/{agentId}/forget`: forget a claim everywhere, with the report of every place.

Body `{"text": "...", "now"?: false}` or `{"fact_id": "...", "now"?: false}`; the owner is the
`owner` query parameter, as on the facts routes. With `mate.memory.fact.forget-enabled` off: 409
naming the key. Parse, call the service, render.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path
from pydantic import ConfigDict, Field, model_validator

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.deps import AGENT_PATTERN, OwnerQuery, get_services, known_agent
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.wire import Wire

router = APIRouter(prefix="/api/v1/memory/{agentId}", tags=["forget"],
                   dependencies=[Depends(require_api_key), Depends(known_agent)])

AgentId = Path(alias="agentId", pattern=AGENT_PATTERN, description="agent name, e.g. default")
ACTOR = "person"  # the Memory Browser's Forget button, a person's script


class ForgetIn(Wire):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: str | None = Field(None, min_length=1, max_length=2000, description="the claim to forget")
    fact_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,64}$", description="or a fact id (its text)")
    now: bool = Field(False, description="purge history copies at once (the run can then not be undone)")

    @model_validator(mode="after")
    def _one(self) -> ForgetIn:
        if (self.text is None) == (self.fact_id is None):
            raise ValueError("give the claim as `text` or a `fact_id` (one of them)")
        return self


class ForgetOut(Wire):
    agent: str
    owner: str | None
    fingerprint: str
    batch: str
    tombstone_new: bool
    files: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    log_messages: int
    aml_facts: int
    message_index_docs: int
    search_index_rows: int
    facts_forgotten: list[str]
    history_purged: int
    history_purge_due: str | None


@router.post("/forget", response_model=ForgetOut, summary="Forget a claim in every file, index and the log",
             responses={409: {"description": "forget is off (`mate.memory.fact.forget-enabled`)"}})
def forget(body: ForgetIn, agent: str = AgentId, owner: OwnerQuery = None,
           services: Services = Depends(get_services)) -> ForgetOut:
    svc = services.forget
    if body.fact_id is not None:
        report = svc.forget_fact(agent, owner, body.fact_id, actor=ACTOR, now=body.now)
    else:
        report = svc.forget(agent, owner, body.text or "", actor=ACTOR, now=body.now)
    return ForgetOut(**report.to_dict())
