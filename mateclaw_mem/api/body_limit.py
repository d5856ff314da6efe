"""Request bodies bounded before anything parses them: the app's general limit and the paths that differ."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mateclaw_mem.api.errors import error_response
from mateclaw_mem.errors import TooLargeError

# Room for a query and options at the cap even if every character is sent as a \uXXXX escape.
SEARCH_BODY_BYTES = 64 * 1024
# The snapshot uploads: their route counts the body as it streams, without buffering it here.
UPLOAD_PATHS = re.compile(r"/api/v1/agents/[^/]+/workspace/memory/import(?:/preview)?")
MULTIPART_OVERHEAD = 64 * 1024  # boundaries, part headers and the strategy field around the archive


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


async def counted_body(request: Request, ceiling: int, too_big: str) -> AsyncIterator[bytes]:
    """The body of an upload route (exempt from BodyLimit), refused with `too_big` once past
    `ceiling` bytes as it streams in: a chunked upload declares no length to check up front."""
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > ceiling:
            raise TooLargeError(too_big)
        yield chunk
