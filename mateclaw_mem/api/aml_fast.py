"""The AML fast lane: `/v1/aml/add` and `/v1/aml/search` answered in plain ASGI, ahead of FastAPI.

A leaderboard client sends these two by the thousand, and through the whole app (FastAPI's own
middleware, ours, routing over every face's routes, dependencies, body parsing by `json.loads`,
then validation) an Add spent more CPU in the framework than storing and indexing its messages
(scripts/bench/aml_add.py). This lane does only what a well-formed, authorised request needs: one
pydantic `validate_json` of the body (the same request models as the routes), the same service
call in a thread pool, the same 200 body.

It answers only the happy path. Anything else - another method or path, a key the routes would
refuse, no Content-Length or more than the limit, a body in several chunks, a content type that is
not JSON, a body the models refuse - goes on to the app with the bytes already read replayed, so
every refusal (401/403, 413, 422, 400) is the routes' own, word for word. A failure inside the
service is answered by `errors.response_for`, the handlers' own mapping, and a body that does not
arrive within `server.body-read-timeout-seconds` by the same 408 as `ReadDeadline`'s.

`LaneApp` (the FastAPI app `create_app` returns) offers every request to the lane before FastAPI.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ValidationError
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mateclaw_mem.api.aml import AddRequest, SearchRequest, add_answer, add_answer_now, search_answer
from mateclaw_mem.api.auth import key_accepted
from mateclaw_mem.api.deferred import FAILED_REASON, INSTALLED, PENDING, DeferredRoutes
from mateclaw_mem.api.errors import error_response, response_for
from mateclaw_mem.api.guards import BodyTimeout
from mateclaw_mem.conversations.aml import AmlService

log = logging.getLogger(__name__)
# Adds up to this size may run on the event loop (~0.3 ms for a LoCoMo chunk); larger ones take
# longer to redact and tokenize and go to the pool like everything else.
INLINE_ADD_BYTES = 16 * 1024
_JSON_HEADERS = [(b"content-type", b"application/json")]
# What a daemon answers while it builds the rest of its services after listening: a search reads only
# the Add/Search parts, built before it listens; an Add may write memory files, whose listeners are not.
_BEFORE_THE_REST = frozenset({"/v1/aml/search", "/health"})


class AmlFastLane:
    def __init__(self, app: ASGIApp, aml: AmlService, api_key: str | None, limits: dict[str, int], *,
                 read_timeout: float, counts: Counter[str] | None = None) -> None:
        """`app`: where declined requests go. `limits`: the body limit of each path, as BodyLimit
        applies it (a larger body is declined); `counts` is told "answered" or "declined"."""
        self.app = app
        self.read_timeout = read_timeout
        self.counts = Counter[str]() if counts is None else counts
        # Its own pool rather than Starlette's (anyio's worker queue and capacity limiter): handing
        # an Add to one of these threads costs a fraction of that (the CPU an Add used, measured).
        # Blocking work all the same - a commit may wait for another process's write - so never
        # on the event loop. Four: SQLite serialises writers anyway; searches run side by side.
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="aml")
        self.aml = aml
        self.api_key = api_key
        # path -> (request model, answer, body limit, whether it may run on the loop when unhindered)
        self.routes: dict[str, tuple[type[BaseModel], Callable[[Any, AmlService], bytes], int, bool]] = {
            "/v1/aml/add": (AddRequest, add_answer, limits["/v1/aml/add"], True),
            "/v1/aml/search": (SearchRequest, search_answer, limits["/v1/aml/search"], False),
        }
        for model, *_ in self.routes.values():  # Wire defers its validators to the first use: not a request's
            model.model_rebuild(force=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        model, answer, limit, now = route
        headers = Headers(scope=scope)
        length = headers.get("content-length", "")
        kind = headers.get("content-type", "application/json").split(";", 1)[0].strip().lower()
        if (not key_accepted(headers, self.api_key) or not length.isdigit() or int(length) > limit
                or kind != "application/json"):
            self.counts["declined"] += 1
            await self.app(scope, receive, send)
            return
        try:
            async with asyncio.timeout(self.read_timeout or None):
                message = await receive()
        except TimeoutError:
            log.warning("request body for %s not complete after %g s; answered 408", scope["path"], self.read_timeout)
            exc = BodyTimeout(self.read_timeout)
            await error_response(408, exc.detail["reason"], exc.headers)(scope, receive, send)
            return
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
            # A small Add that finds nobody in its way is done right here (no thread hop); anything
            # that would wait, and every search, runs in the pool.
            payload = add_answer_now(body, self.aml) if now and int(length) <= INLINE_ADD_BYTES else None
            if payload is None:
                payload = await asyncio.get_running_loop().run_in_executor(self._pool, answer, body, self.aml)
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


class LaneApp(FastAPI):
    """FastAPI, with the AML fast lane in front of everything (set `lane` to use it), and `guard`
    (api/origin_guard.py, wrapping `routed`) in front of both: nothing reaches the lane unchecked."""

    lane: AmlFastLane | None = None
    guard: ASGIApp | None = None
    deferred: DeferredRoutes | None = None  # the routes the daemon builds once it listens (api/deferred.py)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_flight = 0  # the lane's requests between their arrival and their answer
        self._quiet = threading.Condition()  # notified when that falls to 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await (self.routed if self.guard is None else self.guard)(scope, receive, send)

    async def routed(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The lane for its two paths, the whole app for the rest. Until the daemon has built the
        rest of its services and routes (api/deferred.py), only AML searches and /health go on."""
        if (self.deferred is not None and self.deferred.state == PENDING and scope["type"] != "lifespan"
                and scope["path"] not in _BEFORE_THE_REST):
            await self.deferred.finished()
            if self.deferred.state != INSTALLED:  # the build failed: the daemon is stopping, its log says why
                await error_response(503, FAILED_REASON)(scope, receive, send)
                return
        if self.lane is not None and scope["type"] == "http" and scope["path"] in self.lane.routes:
            with self._quiet:
                self._in_flight += 1
            try:
                await self.lane(scope, receive, send)
            finally:
                with self._quiet:
                    self._in_flight -= 1
                    if not self._in_flight:
                        self._quiet.notify_all()
        else:
            await super().__call__(scope, receive, send)

    def wait_quiet(self, timeout: float) -> bool:
        """Block this thread (never the event loop's) until no lane request is in flight, or
        `timeout` seconds; whether it is quiet. The daemon's later work waits on it between steps."""
        with self._quiet:
            return self._quiet.wait_for(lambda: not self._in_flight, timeout)

    async def without_lane(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The whole app (where the lane sends what it declines)."""
        await super().__call__(scope, receive, send)
