"""`create_app(services)`: the HTTP face, composed. Add a router with one `include_router` line."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mateclaw_mem import __version__
from mateclaw_mem.api import aml
from mateclaw_mem.api.errors import error_response, install_error_handlers
from mateclaw_mem.runtime.services import Services


class BodyLimit:
    """Refuse request bodies over `max_bytes` with 413 before anything parses them.

    A declared Content-Length is checked up front; a body without one (chunked) is read here,
    counted, and replayed to the app only if it stays within the limit.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = error_response(413, f"request body larger than {self.max_bytes} bytes")
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None:
            if length.isdigit() and int(length) > self.max_bytes:
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
            if seen > self.max_bytes:
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


def create_app(services: Services) -> FastAPI:
    app = FastAPI(title="mateclaw-mem", version=__version__)
    app.state.services = services
    app.state.api_key = services.api_key
    _ = services.aml  # built now: the index catches up with the log before the first request
    install_error_handlers(app)

    @app.get("/health", tags=["health"])
    def health() -> dict[str, Any]:
        # Unauthenticated and secret-free: says whether auth is on, never what the key is.
        return {"status": "ok", "version": __version__, "auth": bool(services.api_key)}

    app.include_router(aml.router)
    # Other faces' routers go here, one line each.

    app.add_middleware(BodyLimit, max_bytes=services.settings.server.max_body_bytes)
    return app
