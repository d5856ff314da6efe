"""`/api/v1/memory/{agentId}/facts/contradictions`: the contradiction inbox over HTTP.

GET lists the open pairs side by side with their sources (judged by the model first when
`fact.contradiction-check-enabled` and a model are configured); POST `…/{id}/resolve` changes the
files: KEEP_A / KEEP_B forget the other claim, MERGE writes the merged text in place of both (as the
person's words), IGNORE is remembered so the pair never comes back. The answer carries the diff.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Path, Query
from pydantic import ConfigDict, Field, model_validator

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.deps import AGENT_PATTERN, OwnerQuery, declared_query_only, get_services, known_agent
from mateclaw_mem.memory.contradictions.inbox import PairRow
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.wire import Wire

router = APIRouter(prefix="/api/v1/memory/{agentId}/facts/contradictions", tags=["facts"],
                   dependencies=[Depends(require_api_key), Depends(known_agent), Depends(declared_query_only)])

AgentId = Path(alias="agentId", pattern=AGENT_PATTERN, description="agent name, e.g. default")
PairId = Path(alias="id", pattern=r"^[0-9a-f]{20}$", description="the pair's id (its fingerprint)")


class SideOut(Wire):
    fact: str
    text: str
    file: str
    section: str
    line: int
    scope: Literal["personal", "team"]


class PairOut(Wire):
    id: str
    kind: str = Field(description="same_key | same_subject | correction")
    reason: str
    a: SideOut = Field(description="the earlier (or corrected) claim, as detected")
    b: SideOut = Field(description="the later (or correcting) claim, as detected")
    status: Literal["open", "resolved", "ignored", "dismissed"]
    verdict: str = Field(description="the model's: contradiction | compatible; empty when not judged")
    verdict_reason: str
    action: str


class PairList(Wire):
    contradictions: list[PairOut]


class ResolveIn(Wire):
    model_config = ConfigDict(extra="forbid", strict=True)

    action: Literal["KEEP_A", "KEEP_B", "MERGE", "IGNORE"]
    text: str | None = Field(None, min_length=1, max_length=2000, description="the merged claim (MERGE only)")

    @model_validator(mode="after")
    def _merge_has_text(self) -> ResolveIn:
        if self.action == "MERGE" and not (self.text or "").strip():
            raise ValueError("MERGE needs the merged claim in \"text\"")
        return self


class FileDiff(Wire):
    file: str
    scope: Literal["personal", "team"]
    diff: str


class ResolveOut(Wire):
    contradiction: PairOut
    action: str
    files: list[FileDiff]
    forgot_with: str = Field(description="forget (the forget service) | edit (the line removed) | empty")


def _out(p: PairRow) -> PairOut:
    d = p.to_dict()
    return PairOut(**{k: d[k] for k in PairOut.model_fields})


@router.get("", response_model=PairList, summary="Open contradictions, side by side with their sources")
def list_contradictions(agent: str = AgentId, owner: OwnerQuery = None,
                        status: Literal["open", "resolved", "ignored", "dismissed", "all"] = Query("open"),
                        services: Services = Depends(get_services)) -> PairList:
    services.facts.require_enabled()
    found = services.contradictions.list(agent, owner, status=None if status == "all" else status)
    return PairList(contradictions=[_out(p) for p in found])


@router.post("/{id}/resolve", response_model=ResolveOut,
             summary="Resolve a contradiction: KEEP_A | KEEP_B | MERGE | IGNORE (changes the files)")
def resolve(body: ResolveIn, pid: str = PairId, agent: str = AgentId, owner: OwnerQuery = None,
            services: Services = Depends(get_services)) -> ResolveOut:
    services.facts.require_enabled()
    r = services.contradictions.resolve(agent, owner, pid, body.action, text=body.text, actor="person")
    return ResolveOut(contradiction=_out(r.pair), action=r.action, files=[FileDiff(**f) for f in r.files],
                      forgot_with=r.forgot_with)
