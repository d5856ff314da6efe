"""Errors every layer may raise. Each carries a stable code and a message that names the problem.

Faces map `code` to an exit status or an HTTP status; nothing here knows about either.
"""

from __future__ import annotations


class MateclawError(Exception):
    """Base for errors a user should see as a message, never as a traceback."""

    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(MateclawError):
    code = "config"


class InvalidPathError(MateclawError):
    code = "invalid_path"


class InvalidInputError(MateclawError):
    code = "invalid_input"


class TooLargeError(InvalidInputError):
    """An input beyond its documented size limit (HTTP 413)."""

    code = "too_large"


class NotFoundError(MateclawError):
    code = "not_found"


class ConflictError(MateclawError):
    """A write was refused because the file changed since the writer read it."""

    code = "conflict"


class DisabledError(MateclawError):
    """A feature switched off by a setting (the message names the key): HTTP 409, exit 6."""

    code = "disabled"


class BusyError(MateclawError):
    """Another run holds the lock (a dream, an extraction, a second daemon)."""

    code = "busy"


class ModelError(MateclawError):
    """The configured model failed. Never a reason to silently fall back to rules."""

    code = "model"

    def __init__(self, message: str, *, kind: str = "error", retryable: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable


class StoreUnavailableError(MateclawError):
    """The store's database cannot be reached now (PostgreSQL down or restarting, a connection dropped
    mid-call after the bounded retry): HTTP 503 with Retry-After, exit 8. Nothing half-done is left by
    the call that failed; a retry once the database is back gets the full answer (an Add's request id
    makes that retry safe). The message names the database and what failed, never a password."""

    code = "unavailable"


class RejectedError(MateclawError):
    """A machine write a safety guard refused (it would erode memory a person saw); nothing written."""

    code = "rejected"
