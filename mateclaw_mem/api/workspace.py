"""`/api/v1/agents/{agentId}/workspace/memory/...`: the seed's workspace memory tools over HTTP.

List, read, write, edit, `write_memory` merges, enable/disable, keyword search, history and undo. Parse, call
`services.tools` / `services.store` / `services.search`, render. Writes are machine writes
(`actor="api"`) unless the caller says a person typed the text (`by_person: true`, e.g. an editor
in a desktop UI) — then ceilings never cut it, exactly as for a hand edit.

Bodies and queries take the seed's argument names beside ours (`filename` or `path`, `oldText` or
`old`, ...: workspace/tool_args.py) and refuse any other name, query parameters included: a filter
the route did not know would otherwise be answered as if it had been applied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ConfigDict, Field, model_validator

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
from mateclaw_mem.index.tokenizer import MAX_QUERY_CHARS
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.wire import Wire
from mateclaw_mem.workspace import tools
from mateclaw_mem.workspace.tool_args import SPELLINGS, also, check_names, spelled

router = APIRouter(
    prefix="/api/v1/agents/{agentId}/workspace/memory",
    tags=["workspace"],
    dependencies=[Depends(require_api_key), Depends(known_agent), Depends(declared_query_only)],
)

AgentId = Path(alias="agentId", pattern=AGENT_PATTERN, description="agent name, e.g. default")
MD = r"\.md$"  # only Markdown files are memory files (the store's rule, documented for clients)
_FILE = "file path inside the agent, e.g. MEMORY.md"
FilePath = Query(None, min_length=1, max_length=255, pattern=MD, description=_FILE)
FileName = Query(None, min_length=1, max_length=255, pattern=MD, description=f"{_FILE} (the seed's name for `path`)")


class _Body(Wire):
    # Strict: 0 is not a bool and "5" is not a number - the wrong type is a 422, not a guess.
    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _known_names(cls, data: Any) -> Any:
        return check_names(cls, data, "this request")


def _path_field() -> Any:
    return Field(min_length=1, max_length=255, pattern=MD, validation_alias=spelled("path"),
                 description=_FILE + also("path"))


def _query_names(*names: str) -> Callable[[Request], None]:
    """A route's dependency: a query parameter the route does not take is a 422 naming what it takes."""
    def check(request: Request) -> None:
        for key in request.query_params:
            if key not in names:
                raise RequestValidationError([{
                    "loc": ("query", key), "type": "extra_forbidden",
                    "msg": f"unknown query parameter; this route takes {', '.join(names)}"}])
    return check


def _one(query: str, *given: str | None) -> str | None:
    """One value of an argument the query may spell two ways (`SPELLINGS[query]`), or None."""
    named = [(n, v) for n, v in zip(SPELLINGS[query], given, strict=True) if v is not None]
    if len(named) > 1:
        raise RequestValidationError([{"loc": ("query", named[1][0]), "type": "extra_forbidden",
                                       "msg": f"{named[0][0]!r} and {named[1][0]!r} are the same argument: give one"}])
    return named[0][1] if named else None


def _file(filename: str | None, path: str | None) -> str:
    found = _one("path", filename, path)
    if found is None:
        raise RequestValidationError([{"loc": ("query", "path"), "type": "missing",
                                       "msg": "Field required (the file as `path` or `filename`)"}])
    return found


_SAME = "the same as `{}` (kept for clients written before the seed's names)"


# camelCase where the seed spells a field that way (agentId, fileSize): its clients read those names.
class FileOut(Wire):
    filename: str = Field(description="path inside the agent, e.g. MEMORY.md or memory/2026-01-31.md")
    fileSize: int = Field(description="bytes on disk")
    enabled: bool = Field(description="in the always-on prompt")
    sort_order: int
    chars: int = Field(description="body characters (what a prompt would carry)")
    ceiling: int = Field(description="the file's character budget (0: none)")
    over_budget: bool
    frontmatter_error: str | None = None
    path: str = Field(description=_SAME.format("filename"))
    size: int = Field(description=_SAME.format("fileSize"))


class FileList(Wire):
    agentId: str
    count: int = Field(description="number of files listed")
    files: list[FileOut]
    agent: str = Field(description=_SAME.format("agentId"))


class FileContent(Wire):
    agentId: str
    filename: str
    content: str
    enabled: bool = Field(description="in the always-on prompt")
    sort_order: int
    fileSize: int
    sha: str = Field(description="content hash of this version (pass it back as expected_sha)")
    path: str = Field(description=_SAME.format("filename"))
    size: int = Field(description=_SAME.format("fileSize"))


class WriteOut(Wire):
    agentId: str
    filename: str
    sha: str
    previous_sha: str
    changed: bool
    archived: list[str] = Field(description="archive files that received text cut by a ceiling")
    version: int | None = Field(None, description="history version holding the previous content")
    path: str = Field(description=_SAME.format("filename"))


class EditOut(WriteOut):
    replacements: int = Field(description="occurrences replaced")


class WriteMemoryOut(WriteOut):
    strategy: str


class WriteIn(_Body):
    path: str = _path_field()
    content: str
    expected_sha: str | None = Field(None, description="refuse (409) unless the file still has this hash")
    owner: OwnerField = None
    by_person: bool = Field(False, description="a person typed this: never cut by ceilings")


class EditIn(_Body):
    path: str = _path_field()
    old: str = Field(min_length=1, validation_alias=spelled("old_text"), description="exact text to find"
                     + also("old_text"))
    new: str = Field(validation_alias=spelled("new_text"), description="replacement" + also("new_text"))
    replace_all: bool = Field(False, validation_alias=spelled("replace_all"),
                              description="replace every occurrence" + also("replace_all"))
    owner: OwnerField = None
    by_person: bool = False


class WriteMemoryIn(_Body):
    path: str = _path_field()
    strategy: Literal["append", "replace_section", "upsert_kv", "overwrite"] = Field(
        description="append: add at the end (of `section` if given); replace_section: replace the `## section`"
        " (or add it); upsert_kv: set `key: value` lines in place (in `section` if given); overwrite: replace"
        " the body (the frontmatter stays)"
    )
    content: str = Field(description="the text; for upsert_kv `key: value` lines, or the value when `key` is set")
    section: str | None = Field(None, min_length=1, description="`##` section title")
    key: str | None = Field(None, min_length=1, description="upsert_kv only: set this one key to `content`")
    owner: OwnerField = None
    by_person: bool = Field(False, description="a person typed this: never cut by ceilings")


class PathIn(_Body):
    path: str = _path_field()
    owner: OwnerField = None


class UndoIn(PathIn):
    version: RowId | None = Field(None, description="version from history (default: before the last change)")


class VersionOut(Wire):
    version: int
    at: str
    actor: str
    reason: str
    size: int
    sha: str
    replaced_by: str
    batch: str | None = None


class HistoryOut(Wire):
    path: str
    versions: list[VersionOut]


class SearchHit(Wire):
    file: str = Field(description="path inside the agent, or conversations/<id> for a message")
    line: int
    line_start: int
    line_end: int
    title: str
    snippet: str
    score: float
    kind: str
    agent: str
    owner: str | None = None
    conversation_id: str | None = None
    message_id: int | None = None


class SearchOut(Wire):
    query: str
    scope: str
    mode: str = Field(description="keyword, or hybrid when dense retrieval took part")
    warnings: list[str]
    hits: list[SearchHit]




def _actor(by_person: bool) -> str:
    return "person" if by_person else "api"


_PREFIX = "only paths starting with this, e.g. memory/"


@router.get("", response_model=FileList, summary="list memory files",
            dependencies=[Depends(_query_names("filenamePrefix", "prefix", "owner"))])
def list_files(
    agent: str = AgentId,
    filename_prefix: str | None = Query(None, alias="filenamePrefix", max_length=255,
                                        description=f"{_PREFIX} (the seed's name for `prefix`)"),
    prefix: str | None = Query(None, max_length=255, description=_PREFIX),
    owner: OwnerQuery = None,
    services: Services = Depends(get_services),
) -> dict[str, Any]:
    start = _one("prefix", filename_prefix, prefix) or ""
    return {**tools.listing(agent, services.tools.list(agent, prefix=start, owner=owner)), "agent": agent}


@router.get("/file", response_model=FileContent, summary="read a memory file",
            dependencies=[Depends(_query_names("filename", "path", "owner"))])
def read_file(
    agent: str = AgentId, filename: str | None = FileName, path: str | None = FilePath, owner: OwnerQuery = None,
    services: Services = Depends(get_services),
) -> dict[str, Any]:
    snap = services.tools.read(agent, _file(filename, path), owner=owner)
    return tools.file_read(agent, snap, services.tools.describe(agent, snap.rel, owner=owner))


@router.put("/file", response_model=WriteOut, summary="replace (or create) a memory file")
def write_file(body: WriteIn, agent: str = AgentId, services: Services = Depends(get_services)) -> dict[str, Any]:
    r = services.tools.write(agent, body.path, body.content, actor=_actor(body.by_person), owner=body.owner,
                             expected_sha=body.expected_sha)
    return tools.write_answer(agent, r)


@router.post("/file/edit", response_model=EditOut, summary="find and replace text in a memory file")
def edit_file(body: EditIn, agent: str = AgentId, services: Services = Depends(get_services)) -> dict[str, Any]:
    r = services.tools.edit(agent, body.path, body.old, body.new, actor=_actor(body.by_person), owner=body.owner,
                            replace_all=body.replace_all)
    return tools.write_answer(agent, r.write, replacements=r.replacements)


@router.post("/write-memory", response_model=WriteMemoryOut, summary="merge text into a memory file (write_memory)")
def write_memory(
    body: WriteMemoryIn, agent: str = AgentId, services: Services = Depends(get_services)
) -> dict[str, Any]:
    r = services.tools.write_memory(agent, body.path, body.content, strategy=body.strategy, section=body.section,
                                    key=body.key, actor=_actor(body.by_person), owner=body.owner)
    return tools.write_answer(agent, r, strategy=body.strategy)


@router.post("/file/enable", response_model=WriteOut, summary="include a file in the always-on prompt")
def enable_file(body: PathIn, agent: str = AgentId, services: Services = Depends(get_services)) -> dict[str, Any]:
    return tools.write_answer(agent, services.tools.set_enabled(agent, body.path, True, actor="api", owner=body.owner))


@router.post("/file/disable", response_model=WriteOut, summary="exclude a file from the always-on prompt")
def disable_file(body: PathIn, agent: str = AgentId, services: Services = Depends(get_services)) -> dict[str, Any]:
    return tools.write_answer(agent, services.tools.set_enabled(agent, body.path, False, actor="api", owner=body.owner))


@router.get("/history", response_model=HistoryOut, summary="kept versions of a file",
            dependencies=[Depends(_query_names("filename", "path", "owner"))])
def history(
    agent: str = AgentId, filename: str | None = FileName, path: str | None = FilePath, owner: OwnerQuery = None,
    services: Services = Depends(get_services),
) -> HistoryOut:
    path = _file(filename, path)
    versions = services.store.history(agent, path, owner=owner)
    return HistoryOut(
        path=path,
        versions=[
            VersionOut(version=v.version, at=v.at, actor=v.actor, reason=v.reason, size=v.size, sha=v.sha,
                       replaced_by=v.replaced_by, batch=v.batch)
            for v in versions
        ],
    )


@router.post("/undo", response_model=WriteOut, summary="restore a kept version (itself undoable)")
def undo(body: UndoIn, agent: str = AgentId, services: Services = Depends(get_services)) -> dict[str, Any]:
    return tools.write_answer(agent, services.store.undo(agent, body.path, owner=body.owner, version=body.version))


@router.get("/search", response_model=SearchOut, summary="keyword search over the agent's memory",
            dependencies=[Depends(_query_names("q", "limit", "scope", "owner"))])
def search(
    agent: str = AgentId,
    q: str = Query(min_length=1, max_length=MAX_QUERY_CHARS, description="keywords (Latin or CJK)"),
    limit: int = Query(10, ge=1, le=50),
    scope: Literal["all", "memory", "profile", "persona", "conversations", "files"] = Query(
        "all", description="all (default): every memory file and the conversation log; files: every memory file; "
        "memory, profile, persona, conversations: one kind (see docs/faces.md, Search)"
    ),
    owner: OwnerQuery = None,
    services: Services = Depends(get_services),
) -> dict[str, Any]:
    return services.search.search(q, agent=agent, owner=owner, scope=scope, limit=limit).to_dict()
