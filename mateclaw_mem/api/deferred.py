"""Routes the daemon builds just after it starts listening, with every request for them held until then.

Building a FastAPI route is ~2 ms (its parameter and response validators), and importing the
routers behind the hot paths' (everything after `/health`, the agents and the AML contract) was
~100-180 ms of every daemon start before `/health` could answer (scripts/bench/daemon_start.py).
Nothing in them is needed to answer the first requests a start is waited on for, so the daemon
builds them right after it listens, on its main thread, before its background work starts.

Until then one catch-all route stands where they will be, after the routes built with the app. A
request it catches waits (on the event loop, holding no lock and building nothing) until the build
is done, then is routed again through the whole list, as if the routes had always been there. The
routes before it are exactly those that came first in the full order anyway, so no request is ever
answered by a different route than it would have been. The build swaps the route list in one
assignment: a request being routed finishes on the list it started on (and meets the catch-all).
`app.openapi()` waits for the build too, so the schema is never cached half-built.

The build comes in steps (a router module or two each) and, before each, waits while `pause` says
requests are in flight (the AML lane's, `LaneApp.wait_quiet`), at most `STEP_WAIT` seconds a step:
a restart is timed to its first Add/Search answer, and a 100k-message search sent the moment the
daemon listened took 159-169 ms sharing the interpreter with the whole build, 34 ms without it.
The wait is bounded so that requests arriving back to back for ever still let the build finish.

The daemon also builds the rest of its services in `finish` (`first`), before the routes: until
then `LaneApp` lets only AML searches and `/health` through (they read only what was built before
it listened) and holds every other request here, Adds included.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import FastAPI
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from mateclaw_mem.api.errors import error_response

PENDING, INSTALLED, FAILED = "pending", "installed", "failed"
FAILED_REASON = "the daemon failed to build its HTTP routes; see its log"  # (503 to what waited)
STEP_WAIT = 0.25  # seconds a step of the build waits for the requests in flight, at most
# `build()`: the later routes, in routing order, as the steps that build them (each a list of routes).
Build = Callable[[], Iterable[list[BaseRoute]]]
# `pause(timeout)`: returns once no request that goes first is in flight, or after `timeout` seconds.
Pause = Callable[[float], object]


class DeferredRoutes:
    def __init__(self, app: FastAPI, build: Build, pause: Pause | None = None) -> None:
        self.app = app
        self._build = build
        self._pause = pause
        self.step_wait = STEP_WAIT
        self._lock = threading.Lock()  # guards state and waiters only; nothing is built under it
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._done = threading.Event()
        self.state = PENDING
        self.held = 0  # requests that waited for the build (the daemon logs it)
        # An endpoint that is not a function is an ASGI app to Starlette: it gets every method.
        self.placeholder = Route("/{path:path}", self, include_in_schema=False)

    @classmethod
    def install(cls, app: FastAPI, build: Build, pause: Pause | None = None) -> DeferredRoutes:
        """Put the catch-all at the end of the app's routes; `build()` yields the routes it stands
        for, step by step; `pause` is waited on before each step."""
        deferred = cls(app, build, pause)
        app.router.routes.append(deferred.placeholder)
        generate = app.openapi

        def openapi() -> dict[str, Any]:
            deferred.wait()
            return generate()

        app.openapi = openapi  # type: ignore[method-assign]
        return deferred

    def finish(self, first: Callable[[Callable[[], object]], object] | None = None) -> None:
        """Build the routes and put them where the catch-all stood (once; the daemon calls it).
        `first(pause)`: what must be done before any held request goes on (the daemon builds the
        rest of its services), given the pause to call between its own steps."""
        if self.state != PENDING:
            return
        state = FAILED
        try:
            if first is not None:
                first(self.pause)
            later: list[BaseRoute] = []
            steps = iter(self._build())
            while True:
                self.pause()
                step = next(steps, None)
                if step is None:
                    break
                later += step
            routes = list(self.app.router.routes)
            at = routes.index(self.placeholder)
            routes[at:at + 1] = later
            self.app.router.routes = routes
            state = INSTALLED
        finally:
            with self._lock:
                self.state = state
                waiters, self._waiters = self._waiters, []
            self._done.set()
            for loop, future in waiters:
                loop.call_soon_threadsafe(_resolve, future)

    def pause(self) -> None:
        """Wait while requests that go first are in flight, at most `step_wait` seconds."""
        if self._pause is not None:
            self._pause(self.step_wait)

    def wait(self, timeout: float | None = None) -> bool:
        """Block this thread until `finish` has run (for callers off the event loop)."""
        return self._done.wait(timeout)

    async def finished(self) -> None:
        """Until `finish` has run (on the event loop, holding no lock and building nothing)."""
        if self.state == PENDING:
            with self._lock:
                future = None
                if self.state == PENDING:
                    loop = asyncio.get_running_loop()
                    future = loop.create_future()
                    self._waiters.append((loop, future))
                    self.held += 1
            if future is not None:
                await future

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.finished()
        if self.state != INSTALLED:  # the build failed: the daemon is stopping, its log says why
            await error_response(503, FAILED_REASON)(scope, receive, send)
            return
        await self.app.router(scope, receive, send)  # routed again, now through the full list


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # a request whose client left was cancelled meanwhile
        future.set_result(None)
