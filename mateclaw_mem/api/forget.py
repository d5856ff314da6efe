"""`POST /api/v1/memory/{agentId}/forget`: forget a claim everywhere, with the report of every place.

Body `{"text": "...", "now"?: false, "receipt"?: false}` or `{"fact_id": "...", ...}`; the owner is
the `owner` query parameter, as on the facts routes. The answer always lists every store
(`stores`, `status`, `errors`, `shared_kept`, `scrubbed`); with `"receipt": true` also the byte scan
of the workspace (`scan`, with its positive control). With `mate.memory.fact.forget-enabled` off:
409 naming the key. Parse, call the service, render.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path
from pydantic import ConfigDict, Field, model_validator

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.deps import AGENT_PATTERN, OwnerQuery, declared_query_only, get_services, known_agent
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.wire import Wire

router = APIRouter(prefix="/api/v1/memory/{agentId}", tags=["forget"],
                   dependencies=[Depends(require_api_key), Depends(known_agent), Depends(declared_query_only)])

AgentId = Path(alias="agentId", pattern=AGENT_PATTERN, description="agent name, e.g. default")
ACTOR = "person"  # the Memory Browser's Forget button, a person's script


class ForgetIn(Wire):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: str | None = Field(None, min_length=1, max_length=2000, description="the claim to forget")
    fact_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,64}$", description="or a fact id (its text)")
    now: bool = Field(False, description="purge history copies at once (the run can then not be undone)")
    receipt: bool = Field(False, description="scan every byte of the workspace for the claim afterwards")

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
    status: str = Field(description='"done" once every store answered without an error, else "pending"')
    stores: list[dict[str, Any]] = Field(description="one entry per store that can hold words: what it removed")
    errors: list[dict[str, Any]]
    shared_kept: list[dict[str, Any]] = Field(description="files this owner's forget may not cut, with why")
    scrubbed: list[dict[str, Any]]
    scan: dict[str, Any] | None = Field(None, description="the byte scan (`receipt`): occurrences and the control")


@router.post("/forget", response_model=ForgetOut, summary="Forget a claim in every file, index and the log",
             responses={409: {"description": "forget is off (`mate.memory.fact.forget-enabled`)"}})
def forget(body: ForgetIn, agent: str = AgentId, owner: OwnerQuery = None,
           services: Services = Depends(get_services)) -> ForgetOut:
    svc = services.forget
    if body.fact_id is not None:
        report = svc.forget_fact(agent, owner, body.fact_id, actor=ACTOR, now=body.now, receipt=body.receipt)
    else:
        report = svc.forget(agent, owner, body.text or "", actor=ACTOR, now=body.now, receipt=body.receipt)
    return ForgetOut(**report.to_dict())
