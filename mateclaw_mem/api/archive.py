"""`/api/v1/memory/{agentId}/archive`: the compressed month archives, month by month (the browser's
timeline), and restoring one month. Parse, call the workspace's archive, render."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path
from pydantic import Field

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.deps import AGENT_PATTERN, OwnerQuery, declared_query_only, get_services, known_agent
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.wire import Wire
from mateclaw_mem.workspace import month_archive

router = APIRouter(prefix="/api/v1/memory/{agentId}/archive", tags=["archive"],
                   dependencies=[Depends(require_api_key), Depends(known_agent), Depends(declared_query_only)])

AgentId = Path(alias="agentId", pattern=AGENT_PATTERN, description="agent name, e.g. default")
Month = Path(pattern=r"^\d{4}-(0[1-9]|1[0-2])$", description="the month, YYYY-MM")


class ArchivedFile(Wire):
    file: str
    bytes: int
    entries: int = Field(description="`##` entries in it")


class MonthOut(Wire):
    month: str
    file: str = Field(description="the archive, memory/archive/YYYY-MM.md.gz")
    size: int = Field(description="compressed bytes on disk")
    bytes: int = Field(description="bytes of the files it holds")
    notes: list[str] = Field(description="dates of the daily notes it holds")
    noteEntries: int = Field(description="`##` entries of those notes")
    diaryEntries: int = Field(description="dreaming-diary entries it holds")
    files: list[ArchivedFile]
    error: str | None = Field(description="why a damaged archive could not be read (nothing else is then set)")


class ArchiveOut(Wire):
    agent: str
    owner: str | None
    months: list[MonthOut]


class RestoreOut(Wire):
    month: str
    archive: str
    restored: list[str] = Field(description="files written back, byte for byte")
    alreadyThere: list[str] = Field(description="files already on disk with the same bytes")
    run: str = Field(description="batch id: `mateclaw-mem undo AGENT --run ID` rolls the restore back")


@router.get("", response_model=ArchiveOut, summary="archived months with their notes, entry counts and sizes")
def list_months(agent: str = AgentId, owner: OwnerQuery = None,
                services: Services = Depends(get_services)) -> dict[str, Any]:
    return {"agent": agent, "owner": owner, "months": month_archive.months(services.store, agent, owner=owner)}


@router.post("/{month}/restore", response_model=RestoreOut,
             summary="put a month's files back byte for byte and remove its archive (409 if a file differs)")
def restore(month: str = Month, agent: str = AgentId, owner: OwnerQuery = None,
            services: Services = Depends(get_services)) -> dict[str, Any]:
    return month_archive.restore_month(services.store, agent, month, owner=owner).as_dict()
