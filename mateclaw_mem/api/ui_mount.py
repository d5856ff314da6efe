"""The Memory Browser's routes, added to the app by the first request that wants them.

Importing the browser (its page modules, Jinja2 and its templates) and building its routes was
~60 ms of every daemon start (scripts/bench/daemon_start.py), for pages a person may never open
in a session. None of its routes is in the OpenAPI schema, so nothing needs them before a request
to `/` or `/ui...` arrives: that request installs them (`api.ui.install_ui`, once, under a lock on
the event loop) and is then routed as if they had always been there.
"""

from __future__ import annotations

import asyncio

from fastapi import FastAPI
from starlette.routing import Route
from starlette.types import Receive, Scope, Send


class LazyUi:
    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self._lock = asyncio.Lock()
        self._installed = False
        # Put into the app's routes by `create_app`. An endpoint that is not a function is an ASGI
        # app to Starlette: it gets every method.
        self.placeholders = [Route("/", self), Route("/ui", self), Route("/ui/{rest:path}", self)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._installed:
            async with self._lock:
                if not self._installed:
                    from mateclaw_mem.api.ui import install_ui

                    routes = self.app.router.routes
                    for route in self.placeholders:
                        routes.remove(route)
                    install_ui(self.app)
                    self._installed = True
        await self.app.router(scope, receive, send)  # now the browser's own routes answer
