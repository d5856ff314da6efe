"""Runs the registered memory providers for one prompt: concurrently, each within its deadline, all
within a total budget, each behind a circuit breaker.

- Deadlines: a call's deadline is `min(its start + timeout, prefetch start + total budget)`
  (`time.monotonic()`: deadlines measure real elapsed time, which a test clock must not bend). A
  call that misses it is abandoned — its thread runs on, its answer is ignored — and counts as a
  failure. A call still queued when the budget runs out is cancelled (`not_started`, no fault of
  the provider's). An answer is used only if the call finished by its deadline.
- One late call at a time: while an abandoned call of a provider is still running, that provider is
  skipped (`busy`, a failure), so a hung provider holds at most one worker thread and cannot starve
  the others of the pool.
- Circuit breaker per provider (`circuit.py`), timed by the injected Clock: after N consecutive
  failures it is skipped for the cooldown, then one trial call decides.
- `sync_turn` hands a recorded chat turn to every provider that takes one (`sync_turn` of its own,
  which must not block); a provider's failure there is logged, never raised, and never trips its
  breaker (only recall is guarded by it).
- Every prefetch returns a report (who answered, timed out, failed, was skipped, how long each
  took); `status()` keeps the per-provider picture (circuit, counts, recent timeouts) for `status`.

Call outcomes: `ok`, `timeout`, `error`, `busy`, `circuit_open`, `not_started`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import ConfigError
from mateclaw_mem.providers.base import MemoryProvider, ProviderItem
from mateclaw_mem.providers.circuit import CircuitBreaker

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.settings import MemorySettings

log = logging.getLogger(__name__)

OK, TIMEOUT, ERROR, BUSY, CIRCUIT_OPEN, NOT_STARTED = "ok", "timeout", "error", "busy", "circuit_open", "not_started"
FAILURES = (TIMEOUT, ERROR, BUSY)
MAX_POOL = 4
RECENT = 5  # timeouts remembered per provider for `status`


@dataclass(frozen=True)
class ProviderCall:
    """What one provider did in one prefetch."""

    provider: str
    outcome: str
    ms: float | None = None  # how long it ran before answering or being abandoned; None = never ran
    items: int = 0
    error: str | None = None
    circuit: str = "closed"  # the circuit's state after this call

    def as_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "outcome": self.outcome, "ms": self.ms, "items": self.items,
                "error": self.error, "circuit": self.circuit}


@dataclass
class Prefetch:
    """One prefetch: the items of every provider that answered in time (registration order) and
    the report."""

    items: dict[str, list[ProviderItem]]
    calls: list[ProviderCall]
    elapsed_ms: float
    timeout_ms: int
    budget_ms: int

    def outcome(self, provider: str) -> str | None:
        return next((c.outcome for c in self.calls if c.provider == provider), None)

    def _named(self, *outcomes: str) -> list[str]:
        return [c.provider for c in self.calls if c.outcome in outcomes]

    def as_dict(self) -> dict[str, Any]:
        return {
            "elapsed_ms": self.elapsed_ms, "timeout_ms": self.timeout_ms, "budget_ms": self.budget_ms,
            "answered": self._named(OK), "timed_out": self._named(TIMEOUT), "failed": self._named(ERROR, BUSY),
            "skipped": self._named(CIRCUIT_OPEN, NOT_STARTED),
            "calls": [c.as_dict() for c in self.calls],
        }


@dataclass
class _State:
    provider: MemoryProvider
    breaker: CircuitBreaker
    late: int = 0  # abandoned calls still running
    calls: int = 0
    answered: int = 0
    timeouts: int = 0
    errors: int = 0
    skipped: int = 0
    last_error: str | None = None
    last_ms: float | None = None  # the latest call that ran
    total_ms: float = 0.0
    timed: int = 0  # calls that ran (the mean latency's denominator)
    recent_timeouts: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT))


@dataclass
class _Call:
    state: _State
    trial: bool
    # (started, deadline), set together by the worker so the waiting thread never sees half of it.
    window: tuple[float, float] | None = None
    finished: float | None = None
    late_start: bool = False  # started after the budget ran out: not run at all
    done: bool = False
    abandoned: bool = False


class ProviderRegistry:
    def __init__(
        self,
        providers: Sequence[MemoryProvider],
        clock: Clock,
        *,
        timeout_ms: int = 1500,
        total_budget_ms: int = 2500,
        failure_threshold: int = 3,
        cooldown_seconds: float = 30,
        max_workers: int | None = None,
        origins: dict[str, str | Callable[[], str]] | None = None,
    ) -> None:
        names = [p.name for p in providers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"memory provider names must be unique; repeated: {', '.join(dupes)}")
        self.clock = clock
        # provider name -> the distribution that supplied it (a callable: read when `status` first asks)
        self.origins = dict(origins or {})
        self.timeout_ms = timeout_ms
        self.budget_ms = total_budget_ms
        self.failure_threshold = failure_threshold
        self.cooldown_seconds = cooldown_seconds
        cooldown = timedelta(seconds=cooldown_seconds)
        self._states = {p.name: _State(p, CircuitBreaker(failure_threshold, cooldown)) for p in providers}
        self._max_workers = max_workers or max(1, min(MAX_POOL, len(providers)))
        self._pool: ThreadPoolExecutor | None = None  # created on the first prefetch
        # Reentrant: a future that is already done runs its callback (which locks) inside `submit`'s caller.
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._closed = False

    @classmethod
    def from_settings(cls, providers: Sequence[MemoryProvider], memory: MemorySettings, clock: Clock,
                      **kwargs: Any) -> ProviderRegistry:
        return cls(providers, clock, timeout_ms=memory.provider_prefetch_timeout_ms,
                   total_budget_ms=memory.provider_prefetch_total_budget_ms,
                   failure_threshold=memory.provider_circuit_failure_threshold,
                   cooldown_seconds=memory.provider_circuit_cooldown_seconds, **kwargs)

    @property
    def names(self) -> list[str]:
        return list(self._states)

    # -- one prefetch ------------------------------------------------------------------------------

    def prefetch(self, agent: str, owner: str | None, query: str) -> Prefetch:
        start = time.monotonic()
        # 0 = unlimited (the seed's meaning): no total budget / no per-call timeout.
        budget_end = start + self.budget_ms / 1000 if self.budget_ms > 0 else math.inf
        timeout = self.timeout_ms / 1000 if self.timeout_ms > 0 else math.inf
        now = self.clock.now()
        outcomes: dict[str, tuple[str, float | None, list[ProviderItem], str | None]] = {}
        running: dict[Future[list[ProviderItem] | None], _Call] = {}
        with self._lock:
            for name, st in self._states.items():
                if self._closed:
                    outcomes[name] = (NOT_STARTED, None, [], "the registry is closed")
                    continue
                admission = st.breaker.admit(now)
                if admission == "skip":
                    outcomes[name] = (CIRCUIT_OPEN, None, [], None)
                    continue
                call = _Call(st, trial=admission == "trial")
                if st.late:
                    outcomes[name] = (BUSY, None, [], "its previous call is still running past its deadline")
                    continue
                future = self._executor().submit(self._run, call, agent, owner, query, budget_end, timeout)
                future.add_done_callback(lambda _f, c=call: self._on_done(c))
                running[future] = call
        pending = set(running)
        while pending:
            t = time.monotonic()
            wake = budget_end
            for f in pending:
                c = running[f]
                # A queued call that starts at any moment from now gets a deadline >= now + timeout.
                wake = min(wake, c.window[1] if c.window else t + timeout)
            # An unlimited wait is None: Event.wait refuses an infinite float.
            done, _ = wait(pending, timeout=None if math.isinf(wake) else max(0.0, wake - t),
                           return_when=FIRST_COMPLETED)
            pending -= done
            t = time.monotonic()
            for f in list(pending):
                c = running[f]
                if c.window is None:
                    # Still queued behind other calls; a cancel that fails means it just started.
                    if t >= budget_end and f.cancel():
                        pending.discard(f)
                elif t >= c.window[1]:
                    pending.discard(f)
                    with self._lock:
                        if not c.done:
                            c.abandoned = True
                            c.state.late += 1
        for f, c in running.items():
            outcomes[c.state.provider.name] = self._classify(f, c)
        return self._settle(outcomes, running, start)

    def _run(self, call: _Call, agent: str, owner: str | None, query: str, budget_end: float,
             timeout: float) -> list[ProviderItem] | None:
        started = time.monotonic()
        call.window = (started, min(started + timeout, budget_end))
        if started >= budget_end:
            call.late_start = True
            return None
        try:
            return call.state.provider.prefetch(agent, owner, query, deadline=call.window[1])
        finally:
            call.finished = time.monotonic()

    def _on_done(self, call: _Call) -> None:
        with self._lock:
            call.done = True
            if call.abandoned:
                call.state.late -= 1
            self._idle.notify_all()

    def _classify(self, f: Future[list[ProviderItem] | None],
                  c: _Call) -> tuple[str, float | None, list[ProviderItem], str | None]:
        if f.cancelled() or c.late_start:
            return NOT_STARTED, None, [], "the total budget ran out before it started"
        assert c.window is not None
        started, deadline = c.window
        if not f.done() or c.finished is None or c.finished > deadline:
            limit = "total budget" if deadline < started + timeout_of(self.timeout_ms) - 1e-6 else "timeout"
            return TIMEOUT, _ms(deadline - started), [], f"no answer within its deadline ({limit})"
        ms = _ms(c.finished - started)
        exc = f.exception()
        if exc is not None:
            return ERROR, ms, [], f"{type(exc).__name__}: {exc}"
        items = f.result()
        if not isinstance(items, list) or not all(isinstance(i, ProviderItem) for i in items):
            return ERROR, ms, [], f"returned {type(items).__name__}, not a list of ProviderItem"
        return OK, ms, items, None

    def _settle(self, outcomes: dict[str, tuple[str, float | None, list[ProviderItem], str | None]],
                running: dict[Future[list[ProviderItem] | None], _Call], start: float) -> Prefetch:
        trials = {c.state.provider.name for c in running.values() if c.trial}
        now = self.clock.now()
        calls: list[ProviderCall] = []
        items: dict[str, list[ProviderItem]] = {}
        with self._lock:
            for name, st in self._states.items():
                outcome, ms, got, error = outcomes[name]
                st.calls += 1
                if ms is not None:
                    st.last_ms, st.total_ms, st.timed = ms, st.total_ms + ms, st.timed + 1
                if outcome == OK:
                    st.breaker.success()
                    st.answered += 1
                    items[name] = got
                elif outcome in FAILURES:
                    st.breaker.failure(now)
                    st.last_error = error
                    if outcome == TIMEOUT:
                        st.timeouts += 1
                        st.recent_timeouts.append(now.isoformat(timespec="seconds"))
                    else:
                        st.errors += 1
                    log.warning("memory provider %s: %s (%s)", name, outcome, error)
                else:
                    st.skipped += 1
                    if outcome == NOT_STARTED and name in trials:
                        st.breaker.release()
                calls.append(ProviderCall(name, outcome, ms, len(got), error, st.breaker.state))
        return Prefetch(items, calls, _ms(time.monotonic() - start), self.timeout_ms, self.budget_ms)

    # -- lifecycle and status ----------------------------------------------------------------------

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="mateclaw-provider")
        return self._pool

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no abandoned call is still running; False if some still are after `timeout`."""
        end = time.monotonic() + timeout
        with self._idle:
            while any(st.late for st in self._states.values()):
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
            return True

    def _origin(self, name: str) -> str:
        """Where a provider came from; a callable is read once (two threads may both read it: same answer)."""
        origin = self.origins.get(name, "in code")
        if callable(origin):
            origin = self.origins[name] = origin()
        return origin

    def status(self) -> dict[str, Any]:
        """Circuit states and counts since this process started (the daemon's are the live ones)."""
        now = self.clock.now()
        origins = {name: self._origin(name) for name in self._states}  # outside the lock: it may read METADATA
        with self._lock:
            providers = {
                name: {
                    **st.breaker.view(now),
                    "calls": st.calls, "answered": st.answered, "timeouts": st.timeouts, "errors": st.errors,
                    "skipped": st.skipped, "running_late": st.late, "last_error": st.last_error,
                    "recent_timeouts": list(st.recent_timeouts),
                    "latency_ms": {"last": st.last_ms,
                                   "mean": _ms(st.total_ms / st.timed / 1000) if st.timed else None},
                    "failures": st.timeouts + st.errors,
                    "from": origins[name],
                    **_own_status(st.provider),
                }
                for name, st in self._states.items()
            }
        return {"timeout_ms": self.timeout_ms, "total_budget_ms": self.budget_ms,
                "failure_threshold": self.failure_threshold, "cooldown_seconds": self.cooldown_seconds,
                "providers": providers}

    def sync_turn(self, agent: str, owner: str | None, messages: Sequence[tuple[str, str]]) -> None:
        """A recorded turn's (role, content) messages, for every provider that keeps its own store."""
        for name, st in self._states.items():
            sync = getattr(st.provider, "sync_turn", None)
            if not callable(sync) or self._closed:
                continue
            try:
                sync(agent, owner, list(messages))
            except Exception as exc:  # a plug-in's sync must never fail the turn being recorded
                log.warning("memory provider %s: sync_turn failed (%s: %s)", name, type(exc).__name__, exc)

    def close(self) -> None:
        # Never wait for a late provider call: shutting down must not hang on a hung provider.
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        for st in self._states.values():
            closer = getattr(st.provider, "close", None)
            if callable(closer):
                try:
                    closer()
                except Exception:
                    log.exception("memory provider %s: close failed", st.provider.name)


def _own_status(provider: MemoryProvider) -> dict[str, Any]:
    report = getattr(provider, "status", None)
    if not callable(report):
        return {}
    try:
        return {"details": report()}
    except Exception as exc:  # status must always render
        return {"details": {"error": f"{type(exc).__name__}: {exc}"}}


def timeout_of(ms: int) -> float:
    return ms / 1000 if ms > 0 else math.inf


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)
