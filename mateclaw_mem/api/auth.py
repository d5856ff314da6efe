"""API-key authentication as a FastAPI dependency.

No key configured: open (a loopback desktop daemon). Key configured: accept it as
`Authorization: Bearer <key>`, `Authorization: Token <key>` or `X-Api-Key: <key>`; missing -> 401,
wrong -> 403. The comparison is constant-time and the key never appears in a response or a log.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from mateclaw_mem.api.errors import ApiError, error_response


def _presented_key(headers: Mapping[str, str]) -> str | None:
    header = headers.get("authorization")
    if header:
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() in ("bearer", "token") and value.strip():
            return value.strip()
    key = headers.get("x-api-key")
    return key.strip() if key and key.strip() else None


async def require_api_key(request: Request) -> None:
    """Dependency for every authenticated router; reads the key from `app.state.api_key`.
    async: it only compares headers, so it runs on the event loop instead of a pool thread."""
    check_key(request, getattr(request.app.state, "api_key", None))


def check_key(request: Request, expected: str | None) -> None:
    """Raise the 401/403 `ApiError` unless `request` presents `expected` (None = open)."""
    if not expected:
        return
    presented = _presented_key(request.headers)
    if presented is None:
        raise ApiError(
            401,
            "unauthorized",
            "missing API key: send 'Authorization: Bearer <key>', 'Authorization: Token <key>' or 'X-Api-Key: <key>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not _matches(presented, expected):
        raise ApiError(403, "forbidden", "invalid API key")


def key_accepted(headers: Mapping[str, str], expected: str | None) -> bool:
    """Whether `check_key` would let these headers through (for the AML fast lane, which hands
    anything else to the routes so that the refusal is theirs)."""
    if not expected:
        return True
    presented = _presented_key(headers)
    return presented is not None and _matches(presented, expected)


def _matches(presented: str, expected: str) -> bool:
    # Starlette decodes header bytes as latin-1; re-encoding restores the bytes sent, so a key
    # with non-ASCII characters (configured as UTF-8) still compares equal.
    return hmac.compare_digest(presented.encode("latin-1"), expected.encode("utf-8"))


class RequireApiKey:
    """The same check for a mounted ASGI app that is not a FastAPI route (the MCP endpoint)."""

    def __init__(self, app: ASGIApp, expected: str | None) -> None:
        self.app = app
        self.expected = expected

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.expected:
            try:
                check_key(Request(scope), self.expected)
            except ApiError as exc:
                await error_response(exc.status, exc.message, exc.headers)(scope, receive, send)
                return
        await self.app(scope, receive, send)
