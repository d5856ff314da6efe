"""`create_app(services)`: the HTTP face, composed. Add a router with one `mount(app, router)` line."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI
from starlette.routing import BaseRoute

from mateclaw_mem import __version__
from mateclaw_mem.api import agents, aml, health
from mateclaw_mem.api.aml_fast import LaneApp
from mateclaw_mem.api.body_limit import MULTIPART_OVERHEAD, UPLOAD_PATHS
from mateclaw_mem.api.deferred import DeferredRoutes
from mateclaw_mem.api.docs import install_docs
from mateclaw_mem.api.errors import ERROR_RESPONSES, install_error_handlers
from mateclaw_mem.api.mcp_http import McpHttp
from mateclaw_mem.api.mounting import document_errors, mount, routes_of
from mateclaw_mem.api.ui_mount import LazyUi
from mateclaw_mem.api.wall import build_wall
from mateclaw_mem.runtime.services import Services

# The chat import counts its own upload as it streams (api/chat_import.py), as the snapshot uploads do.
CHAT_IMPORT_PATH = r"/api/v1/memory/[^/]+/import-chats"


def _later_routers() -> Iterator[list[APIRouter]]:
    """The routers after the AML contract's, in routing order (a path goes to the first route that
    matches it), a module or two at a time: importing a router module builds its routes, and the
    daemon lets the AML requests in flight run between two steps (api/deferred.py)."""
    from mateclaw_mem.api import contradictions, memory

    # contradictions before any /facts/{id} route: "contradictions" is no fact id
    yield [contradictions.router, memory.router]
    from mateclaw_mem.api import chat_import, snapshots

    # /api/v1/memory/{agentId}/import-chats: a literal word, beside memory's routes; snapshots before
    # workspace.router: its paths are literal words
    yield [chat_import.router, snapshots.router]
    from mateclaw_mem.api import workspace

    yield [workspace.router]
    from mateclaw_mem.api import clawdiators

    yield list(clawdiators.routers)  # before learning: /api/v1/agents/me is not an agent 'me'
    from mateclaw_mem.api import learning

    yield [learning.router]
    from mateclaw_mem.api import morning_card, structured

    yield [structured.router, morning_card.router]
    from mateclaw_mem.api import archive, forget

    yield [archive.router, forget.router]
    from mateclaw_mem.api import facts

    yield [facts.router]  # after any literal /facts/<word> route: /facts/{factId} matches all
    from mateclaw_mem.api import chat_proxy

    yield [chat_proxy.router]  # /v1/chat/completions, /v1/models, /agents/<agent>/v1/…
    # Other faces' routers go here, one step each.


def create_app(services: Services, *, mcp: bool = True, host: str | None = None,
               aml_fast_lane: bool = True, defer_routes: bool = False) -> LaneApp:
    """The HTTP face. `mcp` mounts MCP (streamable HTTP) at `/agents/<agent>/mcp` and `/mcp` (the
    default agent); `host` is the bind address (default `server.host`), one of the names the
    OriginGuard accepts in `Host`. `aml_fast_lane` False sends AML Add/Search through the routes (tests
    compare the two). `defer_routes` leaves every route after the AML contract's to
    `app.deferred.finish()` (the daemon calls it once it listens)."""
    mcp_app = McpHttp(services) if mcp else None

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
    _ = services.lineage  # built now: it records harness versions from the first write on

    def later_routes() -> Iterator[list[BaseRoute]]:
        """Every route after the AML contract's, in routing order, step by step."""
        for routers in _later_routers():
            yield routes_of(*routers)
        tail: list[BaseRoute] = [*LazyUi(app).placeholders]  # the Memory Browser at /ui/ (and / redirects there)
        if mcp_app is not None:
            tail += mcp_app.routes
        yield tail

    if defer_routes:  # built by the daemon just after it listens (api/deferred.py says why)
        app.deferred = DeferredRoutes.install(app, later_routes, pause=app.wait_quiet)
    else:
        for step in later_routes():
            app.router.routes.extend(step)
    # The browser's snapshot upload is bounded by the snapshot import limit, not the general one.
    upload_limit = (services.transfer.limits.max_total_bytes + MULTIPART_OVERHEAD,
                    " (the snapshot import limit)")
    build_wall(app, services.settings, services.api_key, host=host,
               lane=services.aml if aml_fast_lane else None, per_path={"/ui/snapshot/preview": upload_limit},
               streamed=re.compile(f"{UPLOAD_PATHS.pattern}|{CHAT_IMPORT_PATH}"))
    return app
