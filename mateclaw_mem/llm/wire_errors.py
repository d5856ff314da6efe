"""HTTP error answers of OpenAI-compatible servers mapped to `ModelError` kinds."""

from __future__ import annotations

import email.utils
import time

import openai

from mateclaw_mem.errors import ModelError

_CONTEXT_HINTS = ("context_length_exceeded", "maximum context length", "context length", "too many tokens",
                  "context window", "prompt is too long")


def error_text(exc: openai.APIStatusError) -> str:
    return f"{exc.code or ''} {getattr(exc, 'param', '') or ''} {exc.message or ''}".lower()


def is_context_error(exc: openai.APIStatusError) -> bool:
    text = error_text(exc)
    return exc.status_code in (400, 413) and any(h in text for h in _CONTEXT_HINTS)


def retry_after(exc: openai.APIStatusError) -> float | None:
    headers = exc.response.headers if exc.response is not None else {}
    for name in ("retry-after-ms", "retry-after"):
        raw = headers.get(name)
        if not raw:
            continue
        try:
            value = float(raw)
            return value / 1000.0 if name == "retry-after-ms" else value
        except ValueError:
            parsed = email.utils.parsedate_to_datetime(raw) if name == "retry-after" else None
            if parsed is not None:
                return max(0.0, parsed.timestamp() - time.time())
    return None


def map_status_error(exc: openai.APIStatusError) -> ModelError:
    status = exc.status_code
    detail = (exc.message or "").strip()[:300]
    if is_context_error(exc):
        return ModelError(f"the prompt is larger than the model's context window: {detail}",
                          kind="context_too_large", retryable=False)
    if status in (401, 403):
        return ModelError(f"the model server refused the API key (HTTP {status}): {detail}; check model.api-key-env",
                          kind="auth", retryable=False)
    if status == 429:
        err = ModelError(f"rate limited by the model server: {detail}", kind="rate_limit", retryable=True)
    elif status >= 500 or status == 408:
        err = ModelError(f"model server error (HTTP {status}): {detail}", kind="server", retryable=True)
    else:
        return ModelError(f"model server rejected the request (HTTP {status}): {detail}", kind="bad_request",
                          retryable=False)
    err.retry_after = retry_after(exc)  # type: ignore[attr-defined]
    return err
