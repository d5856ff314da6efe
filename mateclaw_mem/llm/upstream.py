"""The user's own model behind the chat proxy: a request forwarded as it came, an answer passed back
byte for byte.

Not `llm/client.py`: that client plans our own steps (JSON answers, normalised roles, retries). The
proxy must leave a client's request as it was - tools, tool calls, `response_format`, sampling
fields, any vendor field - and hand back the upstream's answer unchanged, streamed as it arrives, so
it speaks plain HTTP (httpx, async: a stream must not hold a thread per open chat).

Bounded like every model call here: a connect timeout, an idle timeout (no byte for that long, before
the first token or between two, ends it), a deadline for the whole answer, and a cap on its bytes. An
upstream that fails answers in OpenAI's error shape: its own body and status when it sent one, else
502 (unreachable, a broken answer) or 504 (a deadline passed).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

if TYPE_CHECKING:
    from mateclaw_mem.settings import UpstreamSettings

_ERROR_BODY_BYTES = 64_000  # an upstream's error body is read this far; the rest is not ours to carry
STOPPING = "mateclaw-mem is stopping: the answer was cut short; send the request again once it is back"
STOPPING_CODE = "daemon_stopping"
T = TypeVar("T")


def error_body(message: str, kind: str = "upstream_error", code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape, which every OpenAI SDK turns into its own exception with this message."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class UpstreamError(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(str(body.get("error", {}).get("message") or body))
        self.status = status
        self.body = body

    @property
    def stopping(self) -> bool:
        """Ended by the daemon's stop (`Upstream.end_calls`), not by the upstream."""
        return self.body.get("error", {}).get("code") == STOPPING_CODE


def _stopping_error() -> UpstreamError:
    return UpstreamError(503, error_body(STOPPING, "server_error", STOPPING_CODE))


class _Ended(Exception):
    """The daemon's stop ended the call (`Upstream.end_calls`)."""


@dataclass
class Streamed:
    """An open streamed answer: iterate it for the raw bytes; `text` is the assistant's text so far."""

    _response: httpx.Response
    _deadline: float
    _max_bytes: int
    headers: dict[str, str] = field(default_factory=dict)
    text: str = ""
    finished: bool = False  # the upstream said [DONE] or a finish_reason
    error: str | None = None  # why it stopped early, when it did
    ended: bool = False  # ... the daemon's stop (`error` says so to the client; not the upstream's fault)
    _pending: bytes = b""
    _calls: _Calls | None = None  # (what ends it at the daemon's stop)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        sent = 0
        stop = self._calls.open() if self._calls is not None else None
        chunks = self._response.aiter_raw()
        try:
            while True:
                try:
                    chunk = await _unless(stop, anext(chunks))
                except StopAsyncIteration:
                    break
                sent += len(chunk)
                if sent > self._max_bytes:
                    self.error = (f"the upstream's answer passed {self._max_bytes} bytes "
                                  "(proxy.upstream.max-answer-bytes)")
                    break
                self._feed(chunk)
                yield chunk
                if time.monotonic() > self._deadline:
                    self.error = "the upstream's answer passed proxy.upstream.timeout-seconds"
                    break
        except _Ended:
            self.error, self.ended = STOPPING, True
        except httpx.TimeoutException:
            self.error = "the upstream sent nothing for proxy.upstream.idle-timeout-seconds"
        except httpx.HTTPError as exc:
            self.error = f"the upstream connection failed: {type(exc).__name__}"
        finally:
            if self._calls is not None and stop is not None:
                self._calls.close(stop)
            await self._response.aclose()
        if self.error is not None:  # the client learns why the stream ended, in the stream's own format
            yield b"data: " + json.dumps(error_body(self.error)).encode() + b"\n\n"

    def _feed(self, chunk: bytes) -> None:
        """Collect the assistant's text from the SSE lines (`data: {...}`) as they pass."""
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                self.finished = True
                continue
            try:
                obj = json.loads(data)
            except ValueError:
                continue
            for choice in obj.get("choices") or [] if isinstance(obj, dict) else []:
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                    self.text += delta["content"]
                if choice.get("finish_reason"):
                    self.finished = True


class _Calls:
    """The calls in flight, each with a future its end settles (on its own event loop), so that a
    stop coming from another thread ends them where they wait."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[asyncio.Future[None]] = set()
        self.ended = False

    def open(self) -> asyncio.Future[None]:
        stop = asyncio.get_running_loop().create_future()
        with self._lock:
            if self.ended:
                stop.set_result(None)
            self._open.add(stop)
        return stop

    def close(self, stop: asyncio.Future[None]) -> None:
        with self._lock:
            self._open.discard(stop)

    @contextmanager
    def call(self) -> Iterator[asyncio.Future[None]]:
        """A call's stop future while it runs; a stop that ends it is the 503 a client gets."""
        stop = self.open()
        try:
            yield stop
        except _Ended:
            raise _stopping_error() from None
        finally:
            self.close(stop)

    def end(self) -> int:
        with self._lock:
            self.ended = True
            stops = list(self._open)
        for stop in stops:
            stop.get_loop().call_soon_threadsafe(_settle, stop)
        return len(stops)


def _settle(stop: asyncio.Future[None]) -> None:
    if not stop.done():
        stop.set_result(None)


async def _unless(stop: asyncio.Future[None] | None, step: Awaitable[T]) -> T:
    """`await step`, unless `stop` is settled first: then the step is cancelled and _Ended raised."""
    if stop is None:
        return await step
    task = asyncio.ensure_future(step)
    try:
        await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # this call cancelled (its client left): the step goes with it
        await _unwound(task)
        raise
    if task.done():
        return task.result()
    await _unwound(task)
    raise _Ended


async def _unwound(task: asyncio.Future[Any]) -> None:
    """`task` cancelled and finished, before the caller closes the response it reads: never two
    at once on one connection."""
    task.cancel()
    await asyncio.wait((task,))  # (raises nothing of the task's own)
    if not task.cancelled():
        task.exception()  # (retrieved: the stop or the caller's cancellation ends it all the same)


class Upstream:
    """One per daemon; safe to share between requests (httpx's async pool)."""

    def __init__(self, settings: UpstreamSettings) -> None:
        self.settings = settings
        self._calls = _Calls()
        self.base_url = settings.base_url.rstrip("/")
        timeout = httpx.Timeout(connect=settings.connect_timeout_seconds, read=settings.idle_timeout_seconds,
                                write=settings.idle_timeout_seconds, pool=settings.connect_timeout_seconds)
        self._client = httpx.AsyncClient(timeout=timeout, follow_redirects=False)

    def _headers(self) -> dict[str, str]:
        key = self.settings.api_key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def models(self) -> dict[str, Any]:
        """The upstream's model list; our configured model alone when it has none to give."""
        try:
            r = await self._client.get(f"{self.base_url}/models", headers=self._headers())
            data = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            data = None
        if isinstance(data, dict) and isinstance(data.get("data"), list) and data["data"]:
            return data
        name = self.settings.model or "default"
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "upstream"}]}

    def end_calls(self) -> int:
        """From any thread (the daemon's stop): every answer still awaited or streaming ends now - a
        stream with an error event saying so, in the stream's own format, a whole answer with a 503 -
        and every later call is answered so at once. Returns how many were open."""
        return self._calls.end()

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """A non-streamed answer, as the upstream sent it. It comes whole after the generation, so
        the wait for its first byte is the whole deadline, not the idle timeout."""
        timeout = httpx.Timeout(self.settings.timeout_seconds, connect=self.settings.connect_timeout_seconds)
        late = "the upstream did not answer within its timeout (proxy.upstream.idle-timeout-seconds / timeout-seconds)"
        cap = self.settings.max_answer_bytes
        with self._calls.call() as stop:
            r = await _unless(stop, self._send(body, timeout, late))
            raw = await _unless(stop, _read(r, cap, late))
        if len(raw) > cap:
            raise UpstreamError(502, error_body("the upstream's answer passed proxy.upstream.max-answer-bytes"))
        data = _json(raw)
        if r.status_code != 200:
            raise UpstreamError(r.status_code, _as_error(data, r.status_code, raw))
        if not isinstance(data, dict):
            raise UpstreamError(502, error_body("the upstream's answer is not a JSON object", code="upstream_invalid"))
        return data

    async def open_stream(self, body: dict[str, Any]) -> Streamed:
        """Send a streamed request and wait for the upstream's status: an error is raised here (the
        client gets it with the upstream's status), a 200 is handed back to be relayed."""
        with self._calls.call() as stop:
            r = await _unless(stop, self._send(body, None, "the upstream did not start its answer within "
                                                           "proxy.upstream.idle-timeout-seconds"))
        if r.status_code != 200:
            raw = await _read(r, _ERROR_BODY_BYTES, "")
            raise UpstreamError(r.status_code, _as_error(_json(raw), r.status_code, raw))
        headers = {k: v for k, v in r.headers.items() if k.lower() in ("content-type", "x-request-id")}
        return Streamed(r, time.monotonic() + self.settings.timeout_seconds, self.settings.max_answer_bytes, headers,
                        _calls=self._calls)

    async def _send(self, body: dict[str, Any], timeout: httpx.Timeout | None, late: str) -> httpx.Response:
        """The request sent, its status and headers read (its body not yet); a failure to get that
        far is the UpstreamError a client gets: 504 with `late`, or 502 when unreachable."""
        request = self._client.build_request("POST", f"{self.base_url}/chat/completions", json=body,
                                             headers=self._headers(), timeout=timeout or self._client.timeout)
        try:
            return await self._client.send(request, stream=True)
        except httpx.TimeoutException:
            raise UpstreamError(504, error_body(late, code="upstream_timeout")) from None
        except httpx.HTTPError as exc:
            raise UpstreamError(502, error_body(f"the upstream at {self.base_url} could not be reached "
                                                f"({type(exc).__name__})", code="upstream_unreachable")) from None

    async def aclose(self) -> None:
        await self._client.aclose()


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


async def _read(r: httpx.Response, cap: int, late: str) -> bytes:
    """The body of `r`, at most one byte past `cap` (an answer over it is refused, never held whole);
    closes `r`. A read that times out is a 504 saying `late` (none: what was read so far, as after
    a read that fails)."""
    raw = b""
    try:
        async for chunk in r.aiter_raw():
            raw += chunk
            if len(raw) > cap:
                break
    except httpx.TimeoutException:
        if late:
            raise UpstreamError(504, error_body(late, code="upstream_timeout")) from None
    except httpx.HTTPError:
        pass
    finally:
        await r.aclose()
    return raw


def _as_error(data: Any, status: int, raw: bytes) -> dict[str, Any]:
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return data  # already OpenAI's shape: the client sees exactly what the upstream said
    text = raw[:500].decode("utf-8", "replace") if raw else ""
    return error_body(f"the upstream answered {status}{': ' + text if text else ''}")
