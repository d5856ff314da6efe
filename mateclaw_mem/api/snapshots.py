"""`/api/v1/agents/{agentId}/workspace/memory/export|import`: the seed's memory snapshots over HTTP.

Export streams a zip (manifest first). Preview and import take the zip as `multipart/form-data`
(`file`, optional `strategy`): the body is counted while it streams in and refused with 413 past
the limit — never buffered — and Starlette spools the part to disk. Both go to
`services.transfer` (workspace/transfer.py), whose rules are the CLI's, so a hostile archive gets
the same reason here as there.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import StreamingResponse
from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.body_limit import MULTIPART_OVERHEAD, counted_body
from mateclaw_mem.api.deps import AGENT_PATTERN, OwnerQuery, declared_query_only, get_services, known_agent
from mateclaw_mem.errors import InvalidInputError, TooLargeError
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.wire import Wire
from mateclaw_mem.workspace.snapshot_records import STRATEGIES, ImportItem, ImportReport

router = APIRouter(
    prefix="/api/v1/agents/{agentId}/workspace/memory",
    tags=["snapshots"],
    dependencies=[Depends(require_api_key), Depends(known_agent), Depends(declared_query_only)],
)

AgentId = Path(alias="agentId", pattern=AGENT_PATTERN, description="agent name, e.g. default")
_SEED_ACTION = {"create": "create", "overwrite": "update", "merge": "update"}

_UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"multipart/form-data": {"schema": {
            "type": "object",
            "required": ["file"],
            "properties": {
                "file": {"type": "string", "format": "binary", "description": "a snapshot zip (an export)"},
                "strategy": {"type": "string", "enum": list(STRATEGIES), "default": "skip",
                             "description": "a file that exists and differs: keep it (skip), replace it "
                                            "(overwrite) or append what it lacks (merge)"},
            },
        }}},
    }
}


class PlanItem(Wire):
    path: str = Field(description="entry in the archive")
    file: str = Field(description="the agent's file it goes to ('' when skipped before mapping)")
    owner: str | None = None
    action: Literal["create", "update", "skip"]
    detail: str = Field(description="create | overwrite | merge | unchanged | conflict | skip")
    reason: str = ""
    oldSize: int | None = Field(None, description="bytes on disk now (None: no file)")
    newSize: int | None = Field(None, description="bytes it would have")
    oldSha256: str | None = None
    newSha256: str | None = None
    archived: list[str] = Field(default_factory=list, description="archives that received text cut by a ceiling")


class ImportOut(Wire):
    agentId: str = Field(description="the agent in the URL: a manifest's agent never picks the target")
    dryRun: bool
    strategy: str
    run: str | None = Field(None, description="the undoable run (batch) of the import; None if nothing changed")
    counts: dict[str, int]
    notes: list[str]
    files: list[PlanItem]


def _item(i: ImportItem) -> PlanItem:
    planned = bool(i.rel) and i.action not in ("skip", "failed")
    reason = i.reason or ("identical to the file there" if i.action == "unchanged" else "")
    return PlanItem(path=i.source, file=i.rel, owner=i.owner, action=_SEED_ACTION.get(i.action, "skip"),  # type: ignore[arg-type]
                    detail=i.action, reason=reason,
                    oldSize=i.old_size if planned and i.old_sha else None, newSize=i.new_size if planned else None,
                    oldSha256=i.old_sha or None if planned else None, newSha256=i.new_sha or None if planned else None,
                    archived=list(i.archived))


def import_out(report: ImportReport) -> ImportOut:
    counts: dict[str, int] = {}
    files = [_item(i) for i in report.items]
    for f in files:
        counts[f.action] = counts.get(f.action, 0) + 1
    return ImportOut(agentId=report.agent, dryRun=report.dry_run, strategy=report.strategy, run=report.batch,
                     counts=counts, notes=report.notes, files=files)


async def _upload(request: Request, limit: int) -> tuple[UploadFile, str]:
    ceiling = limit + MULTIPART_OVERHEAD
    too_big = f"upload larger than {limit} bytes (the snapshot import limit); refusing it unread"
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > ceiling:
        raise TooLargeError(too_big)
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise InvalidInputError("send the snapshot as multipart/form-data with the zip in a `file` field")

    try:
        form = await MultiPartParser(request.headers, counted_body(request, ceiling, too_big), max_files=1,
                                     max_fields=4).parse()
    except MultiPartException as exc:
        raise InvalidInputError(f"the multipart body cannot be read: {exc.message}") from None
    upload, strategy = form.get("file"), form.get("strategy", "skip")
    if not isinstance(upload, UploadFile):
        raise InvalidInputError("the multipart body has no `file` part holding the snapshot zip")
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise InvalidInputError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    return upload, strategy


async def _import(request: Request, services: Services, agent: str, dry_run: bool, owner: str | None) -> ImportOut:
    transfer = services.transfer
    upload, strategy = await _upload(request, transfer.limits.max_total_bytes)
    try:
        report = await run_in_threadpool(transfer.import_upload, upload.file, agent=agent, strategy=strategy,
                                         dry_run=dry_run, owner=owner)
    finally:
        await upload.close()
    return import_out(report)


@router.get("/export", response_class=StreamingResponse, summary="the agent's memory as a snapshot zip",
            responses={200: {"content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}},
                             "description": "manifest.json first, then the snapshot's files"}})
async def export(agent: str = AgentId, owner: OwnerQuery = None,
                 services: Services = Depends(get_services)) -> StreamingResponse:
    # With an owner: that owner's personal files only (no TEAM files, no sidecars); without: the whole agent.
    result, chunks = await run_in_threadpool(lambda: services.transfer.export_stream(agent, owner=owner))
    return StreamingResponse(chunks, media_type="application/zip",
                             headers={"Content-Disposition": f'attachment; filename="{result.out.name}"'})


@router.post("/import/preview", response_model=ImportOut, openapi_extra=_UPLOAD_BODY,
             summary="what an import of this snapshot would do (create / update / skip); writes nothing")
async def preview(request: Request, agent: str = AgentId, owner: OwnerQuery = None,
                  services: Services = Depends(get_services)) -> ImportOut:
    # With an owner: into that owner's personal files (their export goes back where it came from).
    return await _import(request, services, agent, True, owner)


@router.post("/import", response_model=ImportOut, openapi_extra=_UPLOAD_BODY,
             summary="import a snapshot as one undoable run: all of it or (a file failed) none of it")
async def import_(request: Request, agent: str = AgentId, owner: OwnerQuery = None,
                  services: Services = Depends(get_services)) -> ImportOut:
    return await _import(request, services, agent, False, owner)
