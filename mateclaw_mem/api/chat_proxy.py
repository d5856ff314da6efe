"""The OpenAI-compatible face: `POST /v1/chat/completions` and `GET /v1/models`, in front of the
user's own model (`proxy.upstream`), per agent under `/agents/<agent>/v1/…` (the plain paths serve
the default agent). Memory goes into each request and each answered turn is learned from
(`memory/proxy/service.py`); the upstream's answer comes back unchanged, streamed or not
(`llm/upstream.py`). Errors are in OpenAI's shape, so every OpenAI SDK reports them as its own.

Headers: `X-Mateclaw-Owner` (or the body's `user`, mapped like `endUserId`) names the owner,
`X-Mateclaw-Conversation` the conversation, `X-Mateclaw-Memoryless: true` keeps the turn out of
memory; the answer carries `X-Mateclaw-Turn`, the record of what memory it was given
(`GET /api/v1/memory/{agent}/turns/{turn}/memory`).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.deps import end_user_owner, get_services
from mateclaw_mem.errors import MateclawError
from mateclaw_mem.llm.upstream import UpstreamError, error_body
from mateclaw_mem.memory.proxy.service import OWNER_HEADER
from mateclaw_mem.memory.proxy.tools import as_stream
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.workspace.owners import wire_owner

# Not in our OpenAPI document: these paths speak OpenAI's API (its bodies, its error shape), which
# its own reference documents; docs/clients.md says how each client points at them.
router = APIRouter(tags=["chat proxy (OpenAI-compatible)"], dependencies=[Depends(require_api_key)],
                   include_in_schema=False)

TURN_HEADER = "X-Mateclaw-Turn"


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, kind, code), status_code=status)


def _off() -> JSONResponse:
    return _error(404, "the chat proxy is off: set proxy.upstream.base-url (and model) to the OpenAI-compatible "
                  "server of your model, e.g. http://localhost:11434/v1 for Ollama", "not_found_error", "proxy_off")


@router.get("/v1/models", summary="the upstream's models (chat proxy)")
@router.get("/agents/{agent}/v1/models", summary="the upstream's models, for one agent (chat proxy)")
async def models(agent: str | None = None, services: Services = Depends(get_services)) -> Response:
    proxy = services.chat_proxy
    if proxy is None or proxy.upstream is None:
        return _off()
    return JSONResponse(await proxy.upstream.models())


@router.post("/v1/chat/completions", summary="chat through the user's model, with memory (OpenAI-compatible)")
@router.post("/agents/{agent}/v1/chat/completions", summary="chat with one agent's memory (OpenAI-compatible)")
async def chat_completions(request: Request, agent: str | None = None,
                           services: Services = Depends(get_services)) -> Response:
    proxy = services.chat_proxy
    if proxy is None or proxy.upstream is None:
        return _off()
    agent = agent or services.settings.default_agent
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError):
        return _error(400, "the request body is not JSON")
    if not isinstance(body, dict):
        return _error(400, "the request body must be a JSON object")
    try:
        services.store.require_agent(agent)
        header_owner = request.headers.get(OWNER_HEADER)
        owner = wire_owner(header_owner) if header_owner else end_user_owner(body.get("user") or None)
        prepared = await run_in_threadpool(proxy.prepare, agent, body, request.headers, owner=owner)
    except MateclawError as exc:
        status = 404 if exc.code == "not_found" else 400
        return _error(status, exc.message, "invalid_request_error" if status == 400 else "not_found_error", exc.code)
    except ValueError as exc:  # an owner the wire refuses
        return _error(400, str(exc))
    headers = {TURN_HEADER: prepared.turn} if prepared.turn else {}
    try:
        if body.get("stream") and prepared.tools:  # answered whole (tool rounds), streamed back as chunks
            answer = await proxy.complete(prepared)
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(iter(as_stream(answer, include_usage)), media_type="text/event-stream",
                                     headers=headers, background=BackgroundTask(_learn, proxy, prepared, answer))
        if body.get("stream"):
            streamed = await proxy.upstream.open_stream(prepared.body)
            learn = BackgroundTask(_learn_stream, proxy, prepared, streamed)
            return StreamingResponse(streamed, media_type=streamed.headers.get("content-type", "text/event-stream"),
                                     headers=headers, background=learn)
        answer = await proxy.complete(prepared)
    except UpstreamError as exc:
        if not exc.stopping:
            proxy.upstream_failed(f"{exc.status}: {exc}")
        return JSONResponse(exc.body, status_code=exc.status)
    return JSONResponse(answer, headers=headers, background=BackgroundTask(_learn, proxy, prepared, answer))


async def _learn(proxy: Any, prepared: Any, answer: dict[str, Any]) -> None:
    await run_in_threadpool(proxy.record_answer, prepared, answer)


async def _learn_stream(proxy: Any, prepared: Any, streamed: Any) -> None:
    await run_in_threadpool(proxy.record_stream, prepared, streamed)
