"""ASGI guards around the whole HTTP face: a deadline for reading request bodies, and an answer
with a reason for any failure that got past the exception handlers.

Both sit outside every other middleware (BodyLimit reads chunked bodies itself, so the deadline
must cover it too).
"""

from __future__ import annotations

import asyncio
import logging
import time

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mateclaw_mem.api.errors import error_response

log = logging.getLogger(__name__)


class BodyTimeout(HTTPException):
    """The client did not finish sending its body before the deadline.

    An HTTPException so that it passes through FastAPI's body parsing (which turns any other
    exception into a 400) to the 408 it is; raised outside the routes (BodyLimit reads chunked
    bodies itself) it is answered by `ReadDeadline`."""

    def __init__(self, seconds: float) -> None:
        reason = f"the request body did not arrive within {seconds:g} seconds (server.body-read-timeout-seconds)"
        # The rest of the body will never be read, so the connection cannot be reused.
        super().__init__(408, {"reason": reason}, {"Connection": "close"})


class _TrackedSend:
    """`send`, remembering whether a response has started (after that no error answer can be sent)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


class ReadDeadline:
    """Answer 408 when a request body is not complete `seconds` after the request arrived.

    uvicorn times out idle keep-alive connections but never a body that trickles in, so without
    this a client sending one byte a second holds a worker (and, with BodyLimit, buffered memory)
    for as long as it likes. The deadline is for the whole body, not per chunk: a per-chunk
    timeout is beaten by sending a byte just before it runs out.
    """

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.seconds <= 0:
            await self.app(scope, receive, send)
            return
        deadline = time.monotonic() + self.seconds
        complete = False
        tracked = _TrackedSend(send)

        async def timed_receive() -> Message:
            nonlocal complete
            if complete:  # the body is in: later receives wait for a disconnect, untimed
                return await receive()
            left = deadline - time.monotonic()
            try:
                message = await asyncio.wait_for(receive(), timeout=max(left, 0.0))
            except TimeoutError:
                raise BodyTimeout(self.seconds) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                complete = True
            return message

        try:
            await self.app(scope, timed_receive, tracked)
        except BodyTimeout as exc:
            log.warning("request body for %s not complete after %g s; answered 408", scope.get("path"),
                        self.seconds)
            if not tracked.started:
                await error_response(408, exc.detail["reason"], exc.headers)(scope, receive, send)


class AnswerErrors:
    """Any exception the app's handlers left: logged here, and a 500 with a reason if no response
    has started.

    Starlette's own catch-all answers and then re-raises, after which uvicorn closes the
    connection; a keep-alive client then sees its next request dropped instead of an answer.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tracked = _TrackedSend(send)
        try:
            await self.app(scope, receive, tracked)
        except BodyTimeout:
            raise  # ReadDeadline's to answer
        except Exception as exc:
            if tracked.started:
                raise  # half a response: nothing better than closing the connection
            log.exception("unhandled error", exc_info=exc)
            await error_response(500, "internal error; see the daemon log")(scope, receive, send)
