"""MCP over streamable HTTP: `/agents/<agent>/mcp` for any agent, `/mcp` for the default agent.

Every path ends in `/mcp` because clients keep only such paths: the MCP Inspector rewrites any other
path to `/mcp`, so the old `/mcp/agents/<agent>` silently reached the default agent. That old path
now answers 404 with the new one, rather than a redirect, so a configuration that some clients
mangle is fixed instead of half working.

`?tools=core|memory-tool|learning|all` picks the tool profile (mcp/profiles.py), `core` when absent:
the same default as `mateclaw-mem mcp`, so a small local model is not sent ~7k tokens of tools it never
calls. An unknown profile is a 400 naming the ones there are.

One MCP server per agent and profile, built on its first request: the server's name and instructions (what a
client shows and the model reads at `initialize`) are fixed per server, and each must name the agent
it serves. Their session managers run in one task group owned by the app's lifespan; each runs in
its own task, which enters and leaves it (anyio wants both in one task).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from mateclaw_mem.api.auth import RequireApiKey
from mateclaw_mem.api.errors import error_response
from mateclaw_mem.errors import MateclawError
from mateclaw_mem.mcp import profiles

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from mateclaw_mem.runtime.services import Services

MCP_PATH = "/mcp"
AGENT_MCP_PATH = "/agents/{agent}/mcp"
OLD_AGENT_PATH = "/mcp/agents/{agent}"


def agent_mcp_path(agent: str) -> str:
    return AGENT_MCP_PATH.format(agent=agent)


class McpHttp:
    """The MCP routes and the per-agent servers behind them, guarded by the REST API key."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._managers: dict[tuple[str, str], StreamableHTTPSessionManager] = {}
        self._group: TaskGroup | None = None
        self._lock: anyio.Lock | None = None
        key = services.api_key
        self.routes: list[Any] = [
            Route(MCP_PATH, endpoint=RequireApiKey(_Endpoint(self, None), key)),
            Route(AGENT_MCP_PATH, endpoint=RequireApiKey(_Endpoint(self, "agent"), key)),
            Route(OLD_AGENT_PATH, endpoint=RequireApiKey(_moved, key)),
        ]

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Held by the app's lifespan: the servers started meanwhile stop when it ends."""
        self._lock = anyio.Lock()
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                group.cancel_scope.cancel()
                self._group = None
                self._managers.clear()

    async def manager(self, agent: str, tools: str) -> StreamableHTTPSessionManager:
        if self._group is None or self._lock is None:
            raise RuntimeError("the MCP endpoint is used outside the app's lifespan")
        async with self._lock:  # two first requests for one agent build one server
            manager = self._managers.get((agent, tools))
            if manager is None:
                manager = self._build(agent, tools)
                await self._group.start(_keep_running, manager)
                self._managers[(agent, tools)] = manager
        return manager

    def _build(self, agent: str, tools: str) -> StreamableHTTPSessionManager:
        from mcp.server.transport_security import TransportSecuritySettings

        from mateclaw_mem.mcp.server import build_server

        server = build_server(self.services, agent, tools)
        # Stateless + JSON: no per-client session state or SSE streams to keep alive in an idle daemon.
        # The SDK's Host/Origin check is off: the app's OriginGuard (api/origin_guard.py) makes that
        # check for every face, MCP included, with server.allowed-hosts; the SDK's would be a second
        # one with other names (loopback only, and only with a port) and another answer.
        server.streamable_http_app(stateless_http=True, json_response=True,
                                   transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        return server.session_manager


async def _keep_running(manager: StreamableHTTPSessionManager, *, task_status: TaskStatus[None]) -> None:
    async with manager.run():
        task_status.started()
        await anyio.sleep_forever()


class _Endpoint:
    """One agent's MCP endpoint: the agent from the path (or the default), which must exist."""

    def __init__(self, mcp: McpHttp, param: str | None) -> None:
        self.mcp = mcp
        self.param = param

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        services = self.mcp.services
        if self.param is None:
            agent = services.settings.default_agent
        else:
            agent = scope.get("path_params", {}).get(self.param, "")
        try:
            services.store.require_agent(agent)
        except MateclawError as exc:  # never created, or a name no agent can have: nothing there
            await error_response(404, exc.message)(scope, receive, send)
            return
        try:
            tools = profiles.check(_query(scope).get("tools", profiles.DEFAULT))
        except MateclawError as exc:
            await error_response(400, exc.message)(scope, receive, send)
            return
        manager = await self.mcp.manager(agent, tools)
        await manager.handle_request(scope, receive, send)


def _query(scope: Scope) -> dict[str, str]:
    from urllib.parse import parse_qsl

    return dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))


async def _moved(scope: Scope, receive: Receive, send: Send) -> None:
    agent = scope.get("path_params", {}).get("agent", "")
    await error_response(
        404,
        f"the MCP endpoint of agent {agent!r} is {agent_mcp_path(agent)} (and {MCP_PATH} for the default agent); "
        f"{OLD_AGENT_PATH.format(agent=agent)} is gone because MCP clients such as the Inspector rewrite any "
        "path that does not end in /mcp to /mcp",
    )(scope, receive, send)
