"""`create_app(services)`: the HTTP face, composed. Add a router with one `mount(app, router)` line."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mateclaw_mem import __version__
from mateclaw_mem.api import agents, aml, clawdiators, health, memory, workspace
from mateclaw_mem.api import archive as archive_api
from mateclaw_mem.api import contradictions as contradictions_api
from mateclaw_mem.api import facts as facts_api
from mateclaw_mem.api import forget as forget_api
from mateclaw_mem.api import learning as learning_api
from mateclaw_mem.api import morning_card as morning_card_api
from mateclaw_mem.api import snapshots as snapshots_api
from mateclaw_mem.api import structured as structured_api
from mateclaw_mem.api.aml_fast import AmlFastLane, LaneApp
from mateclaw_mem.api.docs import install_docs
from mateclaw_mem.api.errors import ERROR_RESPONSES, error_response, install_error_handlers
from mateclaw_mem.api.guards import AnswerErrors, ReadDeadline
from mateclaw_mem.api.mcp_http import McpHttp
from mateclaw_mem.api.mounting import document_errors, mount
from mateclaw_mem.api.ui_mount import LazyUi
from mateclaw_mem.index.tokenizer import MAX_QUERY_CHARS
from mateclaw_mem.runtime.services import Services


class BodyLimit:
    """Refuse request bodies over `max_bytes` with 413 before anything parses them.

    A declared Content-Length is checked up front; a body without one (chunked) is read here,
    counted, and replayed to the app only if it stays within the limit.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, per_path: dict[str, tuple[int, str]] | None = None,
                 streamed: re.Pattern[str] | None = None) -> None:
        self.app = app
        self.streamed = streamed  # paths whose route counts its own body as it streams (snapshot uploads)
        self.max_bytes = max_bytes
        self.per_path = per_path or {}  # path -> (smaller limit, why)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.streamed and self.streamed.fullmatch(scope["path"])):
            await self.app(scope, receive, send)
            return
        max_bytes, why = self.per_path.get(scope["path"], (self.max_bytes, ""))
        too_big = error_response(413, f"request body larger than {max_bytes} bytes{why}")
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None:
            if length.isdigit() and int(length) > max_bytes:
                await too_big(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # client went away
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > max_bytes:
                await too_big(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


# Room for a query and options at the cap even if every character is sent as a \uXXXX escape.
SEARCH_BODY_BYTES = 64 * 1024


def create_app(services: Services, *, mcp: bool = True, host: str | None = None,
               aml_fast_lane: bool = True) -> LaneApp:
    """The HTTP face. `mcp` mounts MCP (streamable HTTP) at `/agents/<agent>/mcp` and `/mcp` (the
    default agent); `host` is the bind address, which decides whether MCP's DNS-rebinding protection
    (loopback only) applies. `aml_fast_lane` False sends AML Add/Search through the routes (tests
    compare the two)."""
    mcp_app = McpHttp(services, host or services.settings.server.host) if mcp else None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if mcp_app is None:
            yield
            return
        async with mcp_app.run():  # the MCP servers' task group lives here
            yield

    # /docs and /redoc are ours (install_docs): FastAPI's own pages load their assets from CDNs.
    app = LaneApp(title="mateclaw-mem", version=__version__, lifespan=lifespan, responses=ERROR_RESPONSES,
                  docs_url=None, redoc_url=None)
    app.state.services = services
    app.state.api_key = services.api_key
    _ = services.aml  # built now: the index catches up with the log before the first request
    install_error_handlers(app)
    document_errors(app)
    install_docs(app)

    mount(app, health.router)
    mount(app, agents.router)
    mount(app, aml.router)
    mount(app, contradictions_api.router)  # before any /facts/{id} route: "contradictions" is no fact id
    mount(app, memory.router)
    mount(app, snapshots_api.router)  # before workspace.router: its paths are literal words
    mount(app, workspace.router)
    mount(app, *clawdiators.routers)  # before learning_api: /api/v1/agents/me is not an agent 'me'
    mount(app, learning_api.router)
    mount(app, structured_api.router)
    mount(app, morning_card_api.router)
    mount(app, archive_api.router)
    mount(app, forget_api.router)
    mount(app, facts_api.router)  # after any literal /facts/<word> route: /facts/{factId} matches all
    _ = services.lineage  # built now: it records harness versions from the first write on
    LazyUi.install(app)  # the Memory Browser at /ui/ (and / redirects there), loaded on first use
    # Other faces' routers go here, one line each.

    if mcp_app is not None:
        for route in mcp_app.routes:
            app.router.routes.append(route)
    # A search carries a query, not a document: its body is refused before it is read or parsed
    # (parsing 1.9 MB of JSON on the event loop held /health for 100+ ms).
    search_limit = (SEARCH_BODY_BYTES, f" (a search query is at most {MAX_QUERY_CHARS} characters)")
    # The browser's snapshot upload is bounded by the snapshot import limit, not the general one.
    upload_limit = (services.transfer.limits.max_total_bytes + snapshots_api.MULTIPART_OVERHEAD,
                    " (the snapshot import limit)")
    app.add_middleware(BodyLimit, max_bytes=services.settings.server.max_body_bytes,
                       per_path={"/v1/aml/search": search_limit, "/ui/snapshot/preview": upload_limit},
                       streamed=snapshots_api.UPLOAD_PATHS)
    app.state.aml_fast_lane = Counter[str]()  # answered / declined, for tests and benchmarks
    if aml_fast_lane:  # in front of all of it (api/aml_fast.py); what it declines goes through all of it
        app.lane = AmlFastLane(app.without_lane, services.aml, services.api_key, counts=app.state.aml_fast_lane,
                               limits={"/v1/aml/add": services.settings.server.max_body_bytes,
                                       "/v1/aml/search": SEARCH_BODY_BYTES},
                               read_timeout=services.settings.server.body_read_timeout_seconds)
    # Added last = outermost: the deadline also covers BodyLimit's read of a chunked body.
    app.add_middleware(ReadDeadline, seconds=services.settings.server.body_read_timeout_seconds)
    app.add_middleware(AnswerErrors)
    return app
