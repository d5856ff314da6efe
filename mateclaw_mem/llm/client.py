"""OpenAI-compatible model client: chat completions (never the Responses API) and embeddings.

Works against OpenAI, Ollama, LM Studio, vLLM and llama.cpp servers because it only uses
`/chat/completions` and `/embeddings`. The `openai` package's own retries are off: we retry here so
that every attempt is recorded in the usage log and the backoff is ours to bound.

    client = ModelClient.from_settings(settings, usage=UsageLog(settings.log_db))
    result = client.chat_json(messages, ExtractionResult, step="extraction")

Every call is bounded (llm/bounds.py, llm/transport.py): `max_tokens` is always sent; chat answers
are streamed, so when the call's wall-clock deadline passes or `close()` runs the stream is closed and
a server that cancels on disconnect stops generating; at most `max_concurrent_calls` calls are in
flight per server. Messages go out with alternating roles (llm/roles.py).

Failures raise `ModelError(kind=..., retryable=...)` with kind one of timeout | rate_limit | server |
connection | bad_request | context_too_large | auth | invalid_output | cancelled (the client was
closed). `retryable` says whether trying again later makes sense; the client itself repeats only
connection errors, 429 and 5xx -- never a timed-out generation, which may still be running.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import openai
from pydantic import BaseModel, ValidationError

from mateclaw_mem.errors import ConfigError, ModelError
from mateclaw_mem.llm.bounds import CallBounds, estimate_prompt_tokens, estimate_tokens
from mateclaw_mem.llm.jsonparse import JSONExtractError, extract_json_object
from mateclaw_mem.llm.roles import normalise_roles
from mateclaw_mem.llm.streaming import Accumulator
from mateclaw_mem.llm.transport import (
    TRANSPORT_ERRORS,
    CallCancelled,
    CallScope,
    ServerSlots,
    active,
    scoped_http_client,
)
from mateclaw_mem.llm.usage import UsageLog, UsageRecord
from mateclaw_mem.llm.wire_errors import error_text, is_context_error, map_status_error

T = TypeVar("T", bound=BaseModel)

_REPAIR_ECHO_CHARS = 2000
_NOT_RETRIED = ("timeout", "cancelled")
_CLOSE_WAIT_SECONDS = 2.0


@dataclass(frozen=True)
class ChatResult:
    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: int
    finish_reason: str | None
    model: str
    usage_estimated: bool = False  # the server sent no usage: ~4 characters per token


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
        max_tokens: int = 1024,
        step_max_tokens: Mapping[str, int] | None = None,
        timeout_per_1k_prompt_tokens: float = 0.0,
        timeout_per_1k_answer_tokens: float = 0.0,
        max_concurrent_calls: int = 1,
        system_prompt: str = "system",
        backoff_base: float = 0.5,
        backoff_cap: float = 8.0,
        retry_after_cap: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not base_url or not (model or embedding_model):  # embeddings-only: search vectors, rules mode otherwise
            raise ConfigError("model client needs model.base-url and model.model (empty means rules mode)")
        if json_mode not in ("auto", "json_object", "off"):
            raise ConfigError(f"model.json-mode {json_mode!r}: use auto, json_object or off")
        if system_prompt not in ("system", "fold"):
            raise ConfigError(f"model.system-prompt {system_prompt!r}: use system or fold")
        if max_concurrent_calls < 1:
            raise ConfigError(f"model.max-concurrent-calls {max_concurrent_calls}: use 1 or more")
        self.base_url = base_url
        self.model = model
        self.timeout_seconds = timeout_seconds
        self.max_retries = max_retries
        self.json_mode = json_mode
        self.temperature = temperature
        self.embedding_model = embedding_model or model
        self.usage = usage
        self.bounds = CallBounds(timeout_seconds, max_tokens, dict(step_max_tokens or {}),
                                 timeout_per_1k_prompt_tokens, timeout_per_1k_answer_tokens)
        self.max_concurrent_calls = max_concurrent_calls
        self.fold_system = system_prompt == "fold"
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.retry_after_cap = retry_after_cap
        self._sleep = sleep
        # auto mode learns once that this server rejects response_format and stops sending it;
        # stream_options (the usage chunk) is learnt the same way, whatever the json mode.
        self._response_format_ok: bool = json_mode != "off"
        self._stream_options_ok = True
        self._slots = ServerSlots.for_url(base_url)
        self._inflight: set[CallScope] = set()
        self._inflight_cond = threading.Condition()
        self._closed = False
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_seconds, max_retries=0,
            http_client=scoped_http_client(),
        )

    @classmethod
    def from_settings(cls, settings: Any, *, usage: UsageLog | None = None, **overrides: Any) -> ModelClient:
        """Build from `Settings` (or its `.model` section). Raises ConfigError in rules mode."""
        section = getattr(settings, "model", settings)
        if not (section.configured or getattr(section, "embeddings_configured", False)):  # embeddings-only is fine
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
            max_tokens=section.max_tokens,
            step_max_tokens=section.step_max_tokens,
            timeout_per_1k_prompt_tokens=section.timeout_per_1k_prompt_tokens,
            timeout_per_1k_answer_tokens=section.timeout_per_1k_answer_tokens,
            max_concurrent_calls=section.max_concurrent_calls,
            system_prompt=section.system_prompt,
            usage=usage,
        )
        kwargs.update(overrides)
        return cls(**kwargs)

    def close(self) -> None:
        """Shutdown: abort every call in flight (their streams are closed), then release the pool."""
        with self._inflight_cond:
            self._closed = True
            for scope in self._inflight:
                scope.cancel("closed")
            end = time.monotonic() + _CLOSE_WAIT_SECONDS
            while self._inflight and time.monotonic() < end:
                self._inflight_cond.wait(0.05)
        self._client.close()

    def max_tokens_for(self, step: str) -> int:
        """The max_tokens a call of `step` sends when its caller passes none."""
        return self.bounds.max_tokens_for(step)

    def prepare_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages exactly as they go on the wire (roles alternate; system folded if configured)."""
        return normalise_roles(messages, fold_system=self.fold_system)

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
        """One streamed chat completion, bounded in tokens and time, with bounded retries on
        429 / 5xx / connection errors (a timeout is final: the generation may still be running)."""
        wire = self.prepare_messages(messages)
        limit = max_tokens if max_tokens is not None else self.max_tokens_for(step)
        use_rf = json_object and self._response_format_ok
        attempt = 0
        while True:
            try:
                return self._chat_once(wire, step=step, response_format=use_rf, temperature=temperature,
                                       max_tokens=limit)
            except _RejectedResponseFormat:
                # The server does not do response_format: plain prompting from now on (auto mode).
                self._response_format_ok = False
                use_rf = False
                continue
            except _RejectedStreamOptions:
                self._stream_options_ok = False
                continue
            except ModelError as exc:
                if not exc.retryable or exc.kind in _NOT_RETRIED or attempt >= self.max_retries:
                    raise
                self._backoff(exc, attempt)
                attempt += 1

    def _chat_once(
        self,
        messages: list[dict[str, Any]],
        *,
        step: str,
        response_format: bool,
        temperature: float | None,
        max_tokens: int,
    ) -> ChatResult:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature if temperature is None else temperature,
            "max_tokens": max_tokens,
            "stream": True,
        }
        stream_options = self._stream_options_ok
        if stream_options:
            kwargs["stream_options"] = {"include_usage": True}
        if response_format:
            kwargs["response_format"] = {"type": "json_object"}
        prompt_estimate = estimate_prompt_tokens(messages)
        scope = CallScope(self.bounds.timeout_for(prompt_estimate, max_tokens))
        acc = Accumulator()
        try:
            with self._call(scope):
                acc.sent = True
                stream = self._client.chat.completions.create(**kwargs, timeout=max(0.01, scope.remaining()))
                try:
                    acc.read(stream, scope)
                finally:
                    stream.close()
        except openai.APIStatusError as exc:
            latency = _ms_since(scope.started)
            if stream_options and exc.status_code == 400 and "stream_options" in error_text(exc):
                self._record(step, 0, 0, latency, False, "bad_request", "stream_options rejected; retrying without")
                raise _RejectedStreamOptions() from exc
            if response_format and exc.status_code == 400 and self.json_mode == "auto" and not is_context_error(exc):
                self._record(step, 0, 0, latency, False, "bad_request", "response_format rejected; retrying without")
                raise _RejectedResponseFormat() from exc
            err = map_status_error(exc)
            self._record(step, 0, 0, latency, False, err.kind, err.message)
            raise err from exc
        except (CallCancelled, openai.APIError, *TRANSPORT_ERRORS, ValueError) as exc:
            err = self._call_error(exc, scope, what=acc.progress())
            self._record(step, 0, acc.tokens_seen(), _ms_since(scope.started), False, err.kind, err.message)
            raise err from exc
        latency = _ms_since(scope.started)
        if not acc.saw_choice:
            err = ModelError("model answer had no choices", kind="server", retryable=True)
            self._record(step, acc.prompt_tokens, acc.completion_tokens, latency, False, err.kind, err.message)
            raise err
        text = "".join(acc.parts)
        estimated = not acc.got_usage
        pt = prompt_estimate if estimated else acc.prompt_tokens
        ct = estimate_tokens(text) if estimated else acc.completion_tokens
        # The usage log's note column says the figures are estimates (ok rows never count as errors).
        self._record(step, pt, ct, latency, True, None, "usage estimated (~4 chars/token)" if estimated else None)
        return ChatResult(text, pt, ct, latency, acc.finish_reason, acc.model, estimated)

    @contextmanager
    def _call(self, scope: CallScope) -> Iterator[None]:
        """Register `scope` for close(), hold a server slot, and bound this thread's reads by it."""
        with self._inflight_cond:
            if self._closed:
                raise CallCancelled("closed")
            self._inflight.add(scope)
        try:
            with self._slots.slot(self.max_concurrent_calls, scope), active(scope):
                yield
        finally:
            with self._inflight_cond:
                self._inflight.discard(scope)
                self._inflight_cond.notify_all()

    def _call_error(self, exc: BaseException, scope: CallScope, *, what: str) -> ModelError:
        reason = exc.reason if isinstance(exc, CallCancelled) else scope.fired()
        if reason == "closed":
            return ModelError(f"model call to {self.base_url} cancelled: the client is shutting down ({what})",
                              kind="cancelled", retryable=True)
        if reason == "timeout" or isinstance(exc, openai.APITimeoutError):
            return ModelError(
                f"model timed out after {scope.timeout_seconds:g}s ({self.base_url}; {what}); the stream was "
                "closed so the server can stop generating -- raise model.timeout-seconds or "
                "model.timeout-per-1k-*-tokens for a slow local server", kind="timeout", retryable=True)
        if isinstance(exc, (openai.APIConnectionError, *TRANSPORT_ERRORS)):
            return ModelError(f"cannot reach the model server at {self.base_url}: {exc}", kind="connection",
                              retryable=True)
        # A malformed body, an error event inside the stream and other client-side surprises.
        return ModelError(f"model server answered something unreadable: {exc}", kind="server", retryable=True)

    def _backoff(self, exc: ModelError, attempt: int) -> None:
        delay = getattr(exc, "retry_after", None)
        if delay is None:
            delay = min(self.backoff_cap, self.backoff_base * (2**attempt))
        self._sleep(max(0.0, min(delay, self.retry_after_cap)))

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

    def embed(self, texts: list[str], *, step: str = "embed", input_type: str | None = None) -> list[list[float]]:
        if not texts:
            return []
        attempt = 0
        while True:
            scope = CallScope(self.bounds.timeout_for(sum(estimate_tokens(t) for t in texts), 0))
            try:
                with self._call(scope):
                    resp = self._client.embeddings.create(model=self.embedding_model, input=list(texts),
                                                          encoding_format="float",
                                                          extra_body={"input_type": input_type} if input_type else None,
                                                          timeout=max(0.01, scope.remaining()))
            except openai.APIStatusError as exc:
                err = map_status_error(exc)
            except (CallCancelled, openai.APIError, *TRANSPORT_ERRORS, ValueError) as exc:
                err = self._call_error(exc, scope, what="embeddings")
            else:
                pt = int(getattr(resp.usage, "prompt_tokens", 0) or 0)
                self._record(step, pt, 0, _ms_since(scope.started), True, None, None)
                data = sorted(resp.data, key=lambda d: d.index)
                return [list(map(float, d.embedding)) for d in data]
            self._record(step, 0, 0, _ms_since(scope.started), False, err.kind, err.message)
            if not err.retryable or err.kind in _NOT_RETRIED or attempt >= self.max_retries:
                raise err
            self._backoff(err, attempt)
            attempt += 1

    # -- internals -------------------------------------------------------------------------------

    def _record(self, step: str, pt: int, ct: int, latency: int, ok: bool, kind: str | None, msg: str | None) -> None:
        if self.usage is not None:
            self.usage.record(UsageRecord(step, self.model, pt, ct, latency, ok, kind, msg))


class _RejectedResponseFormat(Exception):
    pass


class _RejectedStreamOptions(Exception):
    pass


class _InvalidAnswer(Exception):
    pass


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _describe_validation(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors()[:5]:
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)
