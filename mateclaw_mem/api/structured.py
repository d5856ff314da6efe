"""`/api/v1/agents/{agentId}/structured`: remember / recall / forget structured entries over HTTP.

The same operations as the CLI and the MCP tools; keys match whole (`lang` never finds `language`).
Writes are machine writes (`actor="api"`) unless `by_person` says a person typed them, which also
protects the entry from being merged away by nightly consolidation.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Path, Query
from pydantic import ConfigDict, Field

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.deps import AGENT_PATTERN, OwnerQuery, declared_query_only, get_services, known_agent
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.wire import Wire

router = APIRouter(prefix="/api/v1/agents/{agentId}/structured", tags=["structured"],
                   dependencies=[Depends(require_api_key), Depends(known_agent), Depends(declared_query_only)])

AgentId = Path(alias="agentId", pattern=AGENT_PATTERN, description="agent name, e.g. default")
EntryType = Literal["user", "feedback", "project", "reference"]


class RememberIn(Wire):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: EntryType
    key: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1, max_length=20_000)
    source: str = Field("", max_length=500)
    by_person: bool = Field(False, description="a person typed this: consolidation never drops it")


class EntryOut(Wire):
    type: str
    key: str
    text: str
    source: str
    updated: str
    pinned: bool


class RememberOut(Wire):
    entry: EntryOut
    created: bool
    changed: bool


class EntryList(Wire):
    entries: list[EntryOut]


@router.post("", response_model=RememberOut, summary="Add an entry, or replace the one with the same key")
def remember(body: RememberIn, agent: str = AgentId, owner: OwnerQuery = None,
             services: Services = Depends(get_services)) -> RememberOut:
    result = services.structured.remember(
        agent, body.type, body.key, body.text, actor="person" if body.by_person else "api", source=body.source,
        owner=owner)
    e = result.entry
    entry = EntryOut(type=result.type, key=e.key, text=e.text, source=e.source, updated=e.updated, pinned=e.pinned)
    return RememberOut(entry=entry, created=result.created, changed=result.changed)


@router.get("", response_model=EntryList, summary="Recall entries (all, one type, or one exact key)")
def recall(agent: str = AgentId, type: EntryType | None = Query(None),
           key: str | None = Query(None, min_length=1, max_length=200), owner: OwnerQuery = None,
           services: Services = Depends(get_services)) -> EntryList:
    found = services.structured.recall(agent, type, key, owner=owner)
    return EntryList(entries=[EntryOut(**t.as_dict()) for t in found])


@router.delete("/{type}/{key}", response_model=EntryOut, summary="Forget one entry (undoable)")
def forget(type: EntryType, key: str = Path(min_length=1, max_length=200),
           agent: str = AgentId, owner: OwnerQuery = None,
           services: Services = Depends(get_services)) -> EntryOut:
    removed = services.structured.forget(agent, type, key, actor="api", owner=owner)
    return EntryOut(**removed.as_dict())
