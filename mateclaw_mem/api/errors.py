"""Every HTTP error as `{"detail": {"reason": ...}}`, with statuses derived from error codes.

Reasons are written for the caller and never carry secrets (the API key is only ever compared,
see `api/auth.py`) or tracebacks; unexpected exceptions become a generic 500.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from mateclaw_mem.db import is_busy
from mateclaw_mem.errors import MateclawError, StoreUnavailableError
from mateclaw_mem.wire import Wire

log = logging.getLogger(__name__)

STATUS_BY_CODE: dict[str, int] = {
    "invalid_input": 400,
    "invalid_path": 400,
    "not_found": 404,
    "conflict": 409,
    "rejected": 409,  # a safety guard refused a machine write (erosion)
    "busy": 429,  # another run holds the lock: retry later
    "too_large": 413,
    "unauthorized": 401,
    "forbidden": 403,
    "config": 500,
    "disabled": 409,  # a feature its setting switched off (the reason names the key)
    "model": 502,
    "unavailable": 503,  # the store's database cannot be reached now (errors.StoreUnavailableError): retry
}


class ErrorDetail(Wire):
    model_config = ConfigDict(extra="allow")

    reason: str


class ErrorBody(Wire):
    """What every error response carries (documented so OpenAPI clients and fuzzers know it)."""

    detail: ErrorDetail


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in (
        (400, "invalid input or path (the reason names it)"),
        (401, "API key missing"),
        (403, "API key wrong, or a request another web page started would change something"),
        (404, "not found"),
        (409, "conflict: the file changed since it was read, or already exists"),
        (413, "request body too large"),
        (422, "a field is missing or has the wrong type (detail.errors lists them)"),
        (429, "busy: another run holds the lock; retry later"),
        (408, "the request body did not arrive in time"),
        (421, "the Host header names no address this daemon serves (server.allowed-hosts)"),
        (500, "internal, configuration or file system error"),
        (502, "the configured model failed"),
        (503, "out of resources for now, or the store's database cannot be reached (the reason says which; retry)"),
        (507, "no space left for the workspace"),
    )
}


class ApiError(MateclawError):
    """An HTTP-only failure (auth, body size) with its own status."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers


def error_response(status: int, reason: str, headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse({"detail": {"reason": reason, **extra}}, status_code=status, headers=headers)


def _field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or "body"


async def _mateclaw_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, MateclawError)
    return _mateclaw_response(exc)


def _mateclaw_response(exc: MateclawError) -> JSONResponse:
    if isinstance(exc, ApiError):
        return error_response(exc.status, exc.message, exc.headers)
    if isinstance(exc, StoreUnavailableError):
        # Logged once per refusal at warning: the daemon recovers by itself when the database is back.
        log.warning("store unavailable, answered 503: %s", exc.message)
        return error_response(503, exc.message, {"Retry-After": "1"})
    return error_response(STATUS_BY_CODE.get(exc.code, 500), exc.message)


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
        for e in exc.errors()
    ]
    # Unparseable JSON is a malformed request (400), not a body of the wrong shape (422).
    if any(e["type"] == "json_invalid" for e in errors):
        return error_response(400, "malformed JSON body", errors=errors)
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    reason = f"{_field_path(first['loc'])}: {first['msg']}"
    if len(errors) > 1:
        reason += f" (and {len(errors) - 1} more)"
    return error_response(422, reason, errors=errors)


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail
    if isinstance(detail, dict) and "reason" in detail:
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=exc.headers)
    return error_response(exc.status_code, str(detail), exc.headers)


# A folder on the path moved, vanished or became a link while the write ran (a sync tool, a person
# reorganising, a hostile swap): the caller's request conflicts with what is on disk now.
_CHANGED_UNDER_US = {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.EEXIST, errno.ENOTEMPTY,
                     errno.EXDEV, errno.ESTALE}
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}
_RETRY_LATER = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN, errno.EBUSY, errno.ETXTBSY}


def os_error_status(exc: OSError) -> tuple[int, str]:
    """(status, reason) for a file system failure. The reason names the file, never its full path
    (the workspace location is none of the caller's business)."""
    name = os.path.basename(str(exc.filename)) if exc.filename else ""
    what = f"{errno.errorcode.get(exc.errno or 0, 'error')}: {exc.strerror or exc}" + (f" ({name})" if name else "")
    if exc.errno in _CHANGED_UNDER_US:
        return 409, f"a folder on the file's path is missing, is not a folder, or changed during the write " \
                    f"(moved, removed or replaced by a link), so the write did not complete - {what}"
    if exc.errno in _NO_SPACE:
        return 507, f"no space left for the workspace - {what}"
    if exc.errno == errno.ENAMETOOLONG:
        return 400, f"a file name is too long for the file system - {what}"
    if exc.errno in _RETRY_LATER or isinstance(exc, TimeoutError):
        return 503, f"out of a system resource for now; retry - {what}"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return 500, f"the workspace is not writable by the daemon - {what}"
    return 500, f"file system error - {what}"


async def _os_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, OSError)
    return _os_response(exc)


def _os_response(exc: OSError) -> JSONResponse:
    status, reason = os_error_status(exc)
    (log.warning if status < 500 else log.error)("file system error answered %d: %s", status, reason)
    return error_response(status, reason, {"Retry-After": "1"} if status == 503 else None)


async def _sqlite_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, sqlite3.Error)
    return _sqlite_response(exc)


def _sqlite_response(exc: sqlite3.Error) -> JSONResponse:
    text = str(exc)
    if is_busy(exc):
        return error_response(503, f"the database is busy; retry - {text}", {"Retry-After": "1"})
    log.error("database error: %s", text)
    if "full" in text:
        return error_response(507, f"no space left for the database - {text}")
    return error_response(500, f"database error - {text}")


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    return _unexpected_response(exc)


def _unexpected_response(exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return error_response(500, "internal error; see the daemon log")


def response_for(exc: Exception) -> JSONResponse:
    """The answer the installed handlers give `exc` (for code that answers outside the routes, like
    the AML fast lane, so that both paths answer a failure alike)."""
    if isinstance(exc, MateclawError):
        return _mateclaw_response(exc)
    if isinstance(exc, OSError):
        return _os_response(exc)
    if isinstance(exc, sqlite3.Error):
        return _sqlite_response(exc)
    return _unexpected_response(exc)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(MateclawError, _mateclaw_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    # Registered by class (not as the catch-all below): Starlette's catch-all answers 500 and then
    # re-raises, and uvicorn closes the connection - a dropped connection instead of a reason.
    app.add_exception_handler(OSError, _os_error)
    app.add_exception_handler(sqlite3.Error, _sqlite_error)
    app.add_exception_handler(Exception, _unexpected)
