"""The AML fast lane: `/v1/aml/add` and `/v1/aml/search` answered in plain ASGI, ahead of FastAPI.

A leaderboard client sends these two by the thousand, and through the whole app (middleware,
routing over every face's routes, dependencies, body parsing by `json.loads`, then validation) an
Add spent more time in the framework than storing and indexing its messages
(scripts/bench/aml_add.py). This lane does only what a well-formed, authorised request needs: one
pydantic `validate_json` of the body (the same request models as the routes), the same service
call in the same thread pool, the same 200 body.

It answers only the happy path. Anything else - another method or path, a key the routes would
refuse, no Content-Length or more than the limit, a body in several chunks, a content type that is
not JSON, a body the models refuse - goes on to the app with the bytes already read replayed, so
every refusal (401/403, 413, 422, 400, 408) is the routes' own, word for word. A failure inside the
service is answered by `errors.response_for`, the handlers' own mapping.

It sits inside `ReadDeadline` (a body that never comes is still a 408) and outside `BodyLimit`
(whose limits it applies by declining).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mateclaw_mem.api.aml import AddRequest, SearchRequest, add_answer, search_answer
from mateclaw_mem.api.auth import key_accepted
from mateclaw_mem.api.errors import response_for
from mateclaw_mem.conversations.aml import AmlService

_JSON_HEADERS = [(b"content-type", b"application/json")]


class AmlFastLane:
    def __init__(self, app: ASGIApp, aml: AmlService, api_key: str | None, limits: dict[str, int],
                 counts: Counter[str] | None = None) -> None:
        """`limits`: the body limit of each path, as BodyLimit applies it (a larger body is declined);
        `counts` is told "answered" or "declined" for each AML request."""
        self.app = app
        self.counts = Counter[str]() if counts is None else counts
        self.aml = aml
        self.api_key = api_key
        self.routes: dict[str, tuple[type[BaseModel], Callable[[Any, AmlService], bytes], int]] = {
            "/v1/aml/add": (AddRequest, add_answer, limits["/v1/aml/add"]),
            "/v1/aml/search": (SearchRequest, search_answer, limits["/v1/aml/search"]),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        model, answer, limit = route
        headers = Headers(scope=scope)
        length = headers.get("content-length", "")
        kind = headers.get("content-type", "application/json").split(";", 1)[0].strip().lower()
        if (not key_accepted(headers, self.api_key) or not length.isdigit() or int(length) > limit
                or kind != "application/json"):
            self.counts["declined"] += 1
            await self.app(scope, receive, send)
            return
        message = await receive()
        if message["type"] != "http.request" or message.get("more_body", False):
            self.counts["declined"] += 1
            await self.app(scope, _replay(message, receive), send)
            return
        try:
            body = model.model_validate_json(message.get("body", b""))
        except ValidationError:  # the route says what is wrong, in its words
            self.counts["declined"] += 1
            await self.app(scope, _replay(message, receive), send)
            return
        self.counts["answered"] += 1
        try:
            payload = await run_in_threadpool(answer, body, self.aml)
        except Exception as exc:  # the handlers' answer; a 500 is logged by response_for
            await response_for(exc)(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [*_JSON_HEADERS, (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})


def _replay(first: Message, receive: Receive) -> Receive:
    """`receive` with `first` (already read) given back once, first."""
    pending: list[Message] = [first]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed
