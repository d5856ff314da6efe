"""`POST /api/v1/memory/{agentId}/import-chats`: chat history into the log over HTTP, as the CLI's
`import-chats` does (conversations/imports/, docs/importing-chats.md).

The export is the body: `multipart/form-data` with the file in a `file` part, or the file's bytes as
the body itself (any other content type). The options are query parameters. The body is counted
while it streams in and refused with 413 past the import limit (records.MAX_IMPORT_BYTES), never
buffered whole in memory: the app's general body limit does not apply here (api/app.py streams this
path, as it does the snapshot uploads). The daemon's extraction workers run the extraction the
import queues; a dream per imported day is `POST …/emergence {"asOf": day}`, oldest first.
"""

from __future__ import annotations

import tempfile
from typing import IO, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.body_limit import MULTIPART_OVERHEAD, counted_body
from mateclaw_mem.api.deps import AGENT_PATTERN, OwnerQuery, declared_query_only, get_services, known_agent
from mateclaw_mem.conversations.imports.records import MAX_IMPORT_BYTES
from mateclaw_mem.errors import InvalidInputError, TooLargeError
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.wire import Wire

router = APIRouter(prefix="/api/v1/memory/{agentId}", tags=["memory"],
                   dependencies=[Depends(require_api_key), Depends(known_agent), Depends(declared_query_only)])

AgentId = Path(alias="agentId", pattern=AGENT_PATTERN, description="agent name, e.g. default")
SPOOL_BYTES = 8 * 1024 * 1024  # a body up to this stays in memory; a larger one goes to a temp file

_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {"schema": {
                "type": "object", "required": ["file"],
                "properties": {"file": {"type": "string", "format": "binary",
                                        "description": "conversations.json (ChatGPT, Claude), an export zip, Open "
                                                       "WebUI's chat export, or JSON lines"}},
            }},
            "application/json": {"schema": {"type": "array", "items": {"type": "object"}},
                                 "description": "the export itself as the body"},
            "application/x-ndjson": {"schema": {"type": "string"}, "description": "JSON lines as the body"},
        },
    }
}


class ExtractionOut(Wire):
    how: Literal["queued", "now"] = Field(description="queued: the daemon's workers run it, through the gates")
    conversations: int = Field(description="conversations handed to extraction (those of an earlier import are not)")
    scheduled: int
    gated_out: int
    reasons: dict[str, int] = Field(description="why the gates turned conversations away, with counts")
    runs: int
    files_changed: list[str]
    errors: list[dict[str, Any]]


class ChatImportOut(Wire):
    file: str
    format: str = Field(description="chatgpt | claude | openwebui | jsonl (| empty)")
    agent: str
    owner: str | None
    dry_run: bool
    mode: str = Field(description="model | rules")
    conversations: int
    messages: int = Field(description="user and assistant messages in the file")
    new_conversations: int
    new_messages: int = Field(description="appended (a dry run: would be)")
    present_messages: int = Field(description="already in the log (a second import adds nothing)")
    first: str | None = Field(description="the oldest message's time")
    last: str | None
    days: list[str] = Field(description="the days of the conversations handed to extraction, oldest first")
    skipped: dict[str, int] = Field(description="messages left out, by reason (system, tool, hidden, other branches)")
    skipped_conversations: dict[str, int]
    cut: int = Field(description="messages cut at 200,000 characters")
    estimate: dict[str, int] | None = Field(description="model mode: the extraction's calls and tokens, at most")
    max_tokens: int | None
    over_budget: bool
    extraction: ExtractionOut | None = Field(None, description="none for a dry run")
    next: str = Field(description="how to consolidate the imported days")


async def _export(request: Request) -> tuple[IO[bytes], str]:
    """The export's bytes (spooled) and the name errors will call it."""
    too_big = f"upload larger than {MAX_IMPORT_BYTES} bytes (the chat import limit); split the export"
    multipart = request.headers.get("content-type", "").lower().startswith("multipart/form-data")
    ceiling = MAX_IMPORT_BYTES + (MULTIPART_OVERHEAD if multipart else 0)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > ceiling:
        raise TooLargeError(too_big)
    if multipart:
        try:
            form = await MultiPartParser(request.headers, counted_body(request, ceiling, too_big), max_files=1,
                                         max_fields=4).parse()
        except MultiPartException as exc:
            raise InvalidInputError(f"the multipart body cannot be read: {exc.message}") from None
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidInputError("the multipart body has no `file` part holding the export")
        return upload.file, upload.filename or "upload"
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115  # closed by the caller
    async for chunk in counted_body(request, ceiling, too_big):
        spool.write(chunk)  # into the page cache: microseconds, as Starlette's own multipart spooling
    if spool.tell() == 0:
        spool.close()
        raise InvalidInputError("the request has no body: send the export as the body or as a multipart `file`")
    spool.seek(0)
    return spool, "upload"


@router.post("/import-chats", response_model=ChatImportOut, openapi_extra=_BODY,
             summary="import chat history (ChatGPT, Claude, Open WebUI exports, JSONL) with its dates; "
                     "extraction is queued through the gates")
async def import_chats(
    request: Request,
    agent: str = AgentId,
    fmt: Literal["chatgpt", "claude", "openwebui", "jsonl"] | None = Query(
        None, alias="format", description="the export's format (default: told from the file)"),
    dry_run: bool = Query(False, alias="dryRun", description="check it and say what it would import; write nothing"),
    max_tokens: int | None = Query(None, alias="maxTokens", ge=0,
                                   description="model mode: refuse an import whose extraction is estimated above"),
    owner: OwnerQuery = None,
    services: Services = Depends(get_services),
) -> ChatImportOut:
    body, name = await _export(request)
    importer = services.chat_import

    def work() -> dict[str, Any]:
        parsed = importer.read(body, name=name, fmt=fmt)
        if dry_run:
            return importer.preview(parsed, agent, owner, max_tokens=max_tokens).to_dict()
        return importer.run(parsed, agent, owner, max_tokens=max_tokens).to_dict()

    try:
        summary = await run_in_threadpool(work)
    finally:
        body.close()
    days = summary["days"]
    summary["extraction"] = summary["extraction"] or None
    summary["next"] = (f"POST /api/v1/memory/{agent}/emergence with {{\"asOf\": DAY}} for each of the {len(days)} "
                       "imported days, oldest first, consolidates them into MEMORY.md" if days else "nothing to do")
    return ChatImportOut(**summary)

