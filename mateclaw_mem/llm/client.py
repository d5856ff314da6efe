"""OpenAI-compatible model client: chat completions (never the Responses API) and embeddings.

Works against OpenAI, Ollama, LM Studio, vLLM and llama.cpp servers because it only uses
`/chat/completions` and `/embeddings`. The `openai` package's own retries are off: we retry here so
that every attempt is recorded in the usage log and the backoff is ours to bound.

    client = ModelClient.from_settings(settings, usage=UsageLog(settings.log_db))
    result = client.chat_json(messages, ExtractionResult, step="extraction")

Failures raise `ModelError(kind=..., retryable=...)` with kind one of
timeout | rate_limit | server | connection | bad_request | context_too_large | auth | invalid_output.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import openai
from pydantic import BaseModel, ValidationError

from mateclaw_mem.errors import ConfigError, ModelError
from mateclaw_mem.llm.jsonparse import JSONExtractError, extract_json_object
from mateclaw_mem.llm.usage import UsageLog, UsageRecord

T = TypeVar("T", bound=BaseModel)

_CONTEXT_HINTS = ("context_length_exceeded", "maximum context length", "context length", "too many tokens",
                  "context window", "prompt is too long")
_REPAIR_ECHO_CHARS = 2000


@dataclass(frozen=True)
class ChatResult:
    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: int
    finish_reason: str | None
    model: str


class ModelClient:
    """One configured model endpoint. Thread-safe (the underlying httpx client is)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "not-needed",
        timeout_seconds: float = 60.0,
        max_retries: int = 2,
        json_mode: str = "auto",
        temperature: float = 0.2,
        embedding_model: str = "",
        usage: UsageLog | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 8.0,
        retry_after_cap: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not base_url or not model:
            raise ConfigError("model client needs model.base-url and model.model (empty means rules mode)")
        if json_mode not in ("auto", "json_object", "off"):
            raise ConfigError(f"model.json-mode {json_mode!r}: use auto, json_object or off")
        self.base_url = base_url
        self.model = model
        self.timeout_seconds = timeout_seconds
        self.max_retries = max_retries
        self.json_mode = json_mode
        self.temperature = temperature
        self.embedding_model = embedding_model or model
        self.usage = usage
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.retry_after_cap = retry_after_cap
        self._sleep = sleep
        # auto mode learns once that this server rejects response_format and stops sending it.
        self._response_format_ok: bool = json_mode != "off"
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_seconds, max_retries=0
        )

    @classmethod
    def from_settings(cls, settings: Any, *, usage: UsageLog | None = None, **overrides: Any) -> ModelClient:
        """Build from `Settings` (or its `.model` section). Raises ConfigError in rules mode."""
        section = getattr(settings, "model", settings)
        if not section.configured:
            raise ConfigError("no model configured (model.base-url and model.model are empty): rules mode")
        kwargs: dict[str, Any] = dict(
            base_url=section.base_url,
            model=section.model,
            api_key=section.api_key(),
            timeout_seconds=section.timeout_seconds,
            max_retries=section.max_retries,
            json_mode=section.json_mode,
            temperature=section.temperature,
            embedding_model=getattr(section, "embedding_model", ""),
            usage=usage,
        )
        kwargs.update(overrides)
        return cls(**kwargs)

    def close(self) -> None:
        self._client.close()

    # -- chat ------------------------------------------------------------------------------------

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        step: str,
        json_object: bool = False,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> ChatResult:
        """One chat completion with bounded retries on 429 / 5xx / timeouts / connection errors."""
        use_rf = json_object and self._response_format_ok
        attempt = 0
        while True:
            try:
                return self._chat_once(messages, step=step, response_format=use_rf, temperature=temperature,
                                       max_tokens=max_tokens)
            except _RejectedResponseFormat:
                # The server does not do response_format: plain prompting from now on (auto mode).
                self._response_format_ok = False
                use_rf = False
                continue
            except ModelError as exc:
                if not exc.retryable or attempt >= self.max_retries:
                    raise
                delay = getattr(exc, "retry_after", None)
                if delay is None:
                    delay = min(self.backoff_cap, self.backoff_base * (2**attempt))
                self._sleep(max(0.0, min(delay, self.retry_after_cap)))
                attempt += 1

    def _chat_once(
        self,
        messages: list[dict[str, Any]],
        *,
        step: str,
        response_format: bool,
        temperature: float | None,
        max_tokens: int | None,
    ) -> ChatResult:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature if temperature is None else temperature,
        }
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        if response_format:
            kwargs["response_format"] = {"type": "json_object"}
        started = time.monotonic()
        try:
            completion = self._client.chat.completions.create(**kwargs)
        except openai.APIStatusError as exc:
            latency = _ms_since(started)
            if (
                response_format
                and exc.status_code == 400
                and self.json_mode == "auto"
                and not _is_context_error(exc)
            ):
                self._record(step, 0, 0, latency, False, "bad_request", "response_format rejected; retrying without")
                raise _RejectedResponseFormat() from exc
            err = _map_status_error(exc)
            self._record(step, 0, 0, latency, False, err.kind, err.message)
            raise err from exc
        except openai.APITimeoutError as exc:
            err = ModelError(f"model timed out after {self.timeout_seconds:g}s ({self.base_url})", kind="timeout",
                             retryable=True)
            self._record(step, 0, 0, _ms_since(started), False, err.kind, err.message)
            raise err from exc
        except openai.APIConnectionError as exc:
            err = ModelError(f"cannot reach the model server at {self.base_url}: {exc}", kind="connection",
                             retryable=True)
            self._record(step, 0, 0, _ms_since(started), False, err.kind, err.message)
            raise err from exc
        except (openai.OpenAIError, ValueError) as exc:  # a malformed body and other client-side surprises
            err = ModelError(f"model server answered something unreadable: {exc}", kind="server", retryable=True)
            self._record(step, 0, 0, _ms_since(started), False, err.kind, err.message)
            raise err from exc
        latency = _ms_since(started)
        usage = getattr(completion, "usage", None)
        pt = int(getattr(usage, "prompt_tokens", 0) or 0)
        ct = int(getattr(usage, "completion_tokens", 0) or 0)
        choices = getattr(completion, "choices", None) or []
        if not choices or getattr(choices[0], "message", None) is None:
            err = ModelError("model answer had no choices", kind="server", retryable=True)
            self._record(step, pt, ct, latency, False, err.kind, err.message)
            raise err
        text = choices[0].message.content or ""
        self._record(step, pt, ct, latency, True, None, None)
        return ChatResult(text, pt, ct, latency, choices[0].finish_reason, str(getattr(completion, "model", "")))

    # -- JSON answers ----------------------------------------------------------------------------

    def chat_json(
        self,
        messages: list[dict[str, Any]],
        schema: type[T],
        *,
        step: str,
        temperature: float | None = None,
        max_tokens: int | None = None,
        check: Callable[[T], None] | None = None,
    ) -> T:
        """Ask for a JSON object, parse it tolerantly and validate it with `schema` (and `check`,
        which may raise ValueError). One repair round trip tells the model what was wrong; a second
        failure raises ModelError(kind="invalid_output")."""
        use_json = self.json_mode != "off"
        result = self.chat(messages, step=step, json_object=use_json, temperature=temperature, max_tokens=max_tokens)
        try:
            return self._validate(result, schema, check)
        except _InvalidAnswer as first:
            problem = str(first)
        repair = [
            *messages,
            {"role": "assistant", "content": result.text[:_REPAIR_ECHO_CHARS]},
            {
                "role": "user",
                "content": (
                    f"Your previous answer could not be used: {problem}. Reply again with exactly one JSON "
                    "object that follows the requested schema, and nothing else."
                ),
            },
        ]
        result = self.chat(repair, step=f"{step}.repair", json_object=use_json, temperature=temperature,
                           max_tokens=max_tokens)
        try:
            return self._validate(result, schema, check)
        except _InvalidAnswer as second:
            raise ModelError(
                f"model answer for {step} was invalid twice: {second}", kind="invalid_output", retryable=False
            ) from None

    @staticmethod
    def _validate(result: ChatResult, schema: type[T], check: Callable[[T], None] | None) -> T:
        try:
            data = extract_json_object(result.text)
        except JSONExtractError as exc:
            hint = " (the answer was cut off at the token limit)" if result.finish_reason == "length" else ""
            raise _InvalidAnswer(f"{exc}{hint}") from None
        try:
            value = schema.model_validate(data)
        except ValidationError as exc:
            raise _InvalidAnswer(_describe_validation(exc)) from None
        if check is not None:
            try:
                check(value)
            except ValueError as exc:
                raise _InvalidAnswer(str(exc)) from None
        return value

    # -- embeddings ------------------------------------------------------------------------------

    def embed(self, texts: list[str], *, step: str = "embed") -> list[list[float]]:
        if not texts:
            return []
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                resp = self._client.embeddings.create(
                    model=self.embedding_model, input=list(texts), encoding_format="float"
                )
            except openai.APIStatusError as exc:
                err = _map_status_error(exc)
            except openai.APITimeoutError:
                err = ModelError("embedding request timed out", kind="timeout", retryable=True)
            except openai.APIConnectionError as exc:
                err = ModelError(f"cannot reach the model server at {self.base_url}: {exc}", kind="connection",
                                 retryable=True)
            else:
                pt = int(getattr(resp.usage, "prompt_tokens", 0) or 0)
                self._record(step, pt, 0, _ms_since(started), True, None, None)
                data = sorted(resp.data, key=lambda d: d.index)
                return [list(map(float, d.embedding)) for d in data]
            self._record(step, 0, 0, _ms_since(started), False, err.kind, err.message)
            if not err.retryable or attempt >= self.max_retries:
                raise err
            delay = getattr(err, "retry_after", None)
            if delay is None:
                delay = min(self.backoff_cap, self.backoff_base * (2**attempt))
            self._sleep(max(0.0, min(delay, self.retry_after_cap)))
            attempt += 1

    # -- internals -------------------------------------------------------------------------------

    def _record(self, step: str, pt: int, ct: int, latency: int, ok: bool, kind: str | None, msg: str | None) -> None:
        if self.usage is not None:
            self.usage.record(UsageRecord(step, self.model, pt, ct, latency, ok, kind, msg))


class _RejectedResponseFormat(Exception):
    pass


class _InvalidAnswer(Exception):
    pass


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _is_context_error(exc: openai.APIStatusError) -> bool:
    text = f"{exc.code or ''} {exc.message or ''}".lower()
    return exc.status_code in (400, 413) and any(h in text for h in _CONTEXT_HINTS)


def _retry_after(exc: openai.APIStatusError) -> float | None:
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


def _map_status_error(exc: openai.APIStatusError) -> ModelError:
    status = exc.status_code
    detail = (exc.message or "").strip()[:300]
    if _is_context_error(exc):
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
    err.retry_after = _retry_after(exc)  # type: ignore[attr-defined]
    return err


def _describe_validation(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors()[:5]:
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)
