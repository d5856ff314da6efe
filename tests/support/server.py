"""Run a real ASGI app under uvicorn on a free loopback port, in a background thread.

    with ApiServer(create_app(services)) as server:
        httpx.get(server.url + "/health")

`daemon_services(workspace, api_key=...)` builds the daemon's real services on a temp workspace;
`serve_api(workspace)` builds them, starts the extraction workers, runs the whole HTTP face on them and yields an httpx client (its `services`
attribute is there for assertions on the files).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import uvicorn

from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ApiServer:
    def __init__(self, app: Any, *, startup_timeout: float = 20.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"uvicorn-{self.port}", daemon=True)
        self._startup_timeout = startup_timeout

    def start(self) -> ApiServer:
        self._thread.start()
        deadline = time.monotonic() + self._startup_timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("uvicorn exited during start-up")
            if time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on port {self.port}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def daemon_services(workspace: Path, *, api_key: str | None = None, **overrides: Any) -> Services:
    """Real services on `workspace`; `api_key` is passed the way the daemon reads it (environment)."""
    env_name = f"MATECLAW_TEST_KEY_{os.getpid()}_{id(workspace)}"
    server = dict(overrides.pop("server", {}))
    server["api_key_env"] = env_name
    settings = load_settings(workspace=workspace, overrides={"server": server, **overrides})
    if api_key is not None:
        os.environ[env_name] = api_key
    try:
        services = Services(settings)
        assert (services.api_key is not None) == (api_key is not None)  # read while the variable is set
        return services
    finally:
        os.environ.pop(env_name, None)


def serve_api(
    workspace: Path, api_key: str | None = None, *, mcp: bool = True, seed: bool = True, **overrides: Any
) -> Iterator[httpx.Client]:
    """The daemon's app on real services, served until the generator is closed. `seed` creates the
    default agent first (the AML agent comes with the first Add); `mcp` mounts the MCP endpoint;
    `overrides` are settings, as `daemon_services` takes them."""
    from mateclaw_mem.api.app import create_app

    services = daemon_services(workspace, api_key=api_key, **overrides)
    if seed:
        services.seed_agents()  # the default agent, as the daemon's start does
    # As the daemon does: every service built before a request can arrive, then the extraction
    # workers. The watcher and the scheduler stay off; tests drive them.
    services.build()
    services.extraction.start()
    try:
        with ApiServer(create_app(services, mcp=mcp)) as server, \
                httpx.Client(base_url=server.url, timeout=30) as client:
            client.services = services  # type: ignore[attr-defined]
            yield client
    finally:
        services.close()
