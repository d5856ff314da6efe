"""Deadlines, cancellation and per-server call slots for model calls.

Why not httpx's own timeout: it bounds each socket read, not the call, so a server that streams one
token every 50 ms never times out; and nothing in httpx lets another thread (shutdown) stop a read.
Here every read of a model connection is done in short slices inside a `CallScope`: when the scope's
wall-clock deadline passes or the scope is cancelled, the socket is closed at once, which a server
that cancels on disconnect (llama.cpp does) takes as the end of the generation.

`ServerSlots` caps the calls in flight per model server (keyed by base URL, shared process-wide by
every client, embeddings included); the wait for a slot counts against the call's deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

# The openai package talks through httpx2 since 2.x (httpx before); bound whichever it uses.
try:
    import httpcore2 as httpcore
    import httpx2 as httpx
except ImportError:  # pragma: no cover - older openai releases
    import httpcore  # type: ignore[no-redef]
    import httpx  # type: ignore[no-redef]

POLL_SECONDS = 0.05  # how soon a deadline or a shutdown is noticed during a read


class CallCancelled(Exception):
    """The scope's deadline passed ("timeout") or its client was closed ("closed")."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CallScope:
    """One model call's deadline and cancellation flag (thread-safe)."""

    def __init__(self, timeout_seconds: float) -> None:
        self.started = time.monotonic()
        self.timeout_seconds = timeout_seconds
        self.deadline = self.started + timeout_seconds
        self._cancelled: str | None = None

    def cancel(self, reason: str = "closed") -> None:
        self._cancelled = self._cancelled or reason

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def fired(self) -> str | None:
        """Why the call must stop now ("closed" / "timeout"), or None."""
        if self._cancelled:
            return self._cancelled
        return "timeout" if time.monotonic() >= self.deadline else None

    def check(self) -> None:
        reason = self.fired()
        if reason:
            raise CallCancelled(reason)


_current = threading.local()


@contextmanager
def active(scope: CallScope) -> Iterator[CallScope]:
    """Make `scope` govern every model-connection read made by this thread inside the block."""
    previous = getattr(_current, "scope", None)
    _current.scope = scope
    try:
        yield scope
    finally:
        _current.scope = previous


def _scope() -> CallScope | None:
    return getattr(_current, "scope", None)


class _ScopedStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        scope = _scope()
        if scope is None:
            return self._inner.read(max_bytes, timeout)
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            if scope.fired():
                # Closing the socket is what tells the server to stop generating.
                self._inner.close()
                raise httpcore.ReadError(f"model call stopped: {scope.fired()}")
            slice_ = POLL_SECONDS if end is None else min(POLL_SECONDS, end - time.monotonic())
            if slice_ <= 0:
                raise httpcore.ReadTimeout("timed out")
            try:
                return self._inner.read(max_bytes, slice_)
            except httpcore.ReadTimeout:
                continue  # no byte in this slice: look at the scope again

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _ScopedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _ScopedBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _ScopedStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _ScopedStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def scoped_http_client() -> Any:
    """An httpx client whose reads obey the calling thread's `CallScope`."""
    transport = httpx.HTTPTransport()
    pool = getattr(transport, "_pool", None)
    if pool is None or not hasattr(pool, "_network_backend"):  # pragma: no cover - an httpx/httpcore upgrade
        raise RuntimeError("httpx transport layout changed: cannot bound model calls (pin httpx/httpcore)")
    pool._network_backend = _ScopedBackend()
    return httpx.Client(transport=transport)


class ServerSlots:
    """Calls in flight per model server, process-wide."""

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _by_url: ClassVar[dict[str, ServerSlots]] = {}

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.in_flight = 0

    @classmethod
    def for_url(cls, base_url: str) -> ServerSlots:
        key = base_url.rstrip("/")
        with cls._lock:
            slots = cls._by_url.get(key)
            if slots is None:
                slots = cls._by_url[key] = ServerSlots()
            return slots

    @contextmanager
    def slot(self, limit: int, scope: CallScope) -> Iterator[None]:
        """Hold one of `limit` slots; raises CallCancelled when the scope fires while waiting."""
        with self._cond:
            while self.in_flight >= limit:
                scope.check()
                self._cond.wait(max(0.001, min(POLL_SECONDS, scope.remaining())))
            scope.check()
            self.in_flight += 1
        try:
            yield
        finally:
            with self._cond:
                self.in_flight -= 1
                self._cond.notify_all()  # waiters may hold different limits


TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (httpx.HTTPError, httpcore.NetworkError, httpcore.TimeoutException)
