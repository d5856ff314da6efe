"""A circuit breaker per provider, on the injected clock.

closed: every call goes through; `threshold` consecutive failures open it.
open: calls are skipped until `cooldown` has passed since it opened; then
half-open: exactly one trial call goes through — success closes the circuit, failure opens it
again for another cooldown. Not thread-safe on its own: the registry calls it under its lock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
Admission = Literal["call", "trial", "skip"]


class CircuitBreaker:
    def __init__(self, threshold: int, cooldown: timedelta) -> None:
        self.threshold = max(1, threshold)
        self.cooldown = cooldown
        self.state = CLOSED
        self.failures = 0  # consecutive
        self.opened_at: datetime | None = None
        self._trial = False  # a half-open trial call is in flight

    def admit(self, now: datetime) -> Admission:
        if self.state == CLOSED:
            return "call"
        if self.state == OPEN:
            assert self.opened_at is not None
            if now - self.opened_at < self.cooldown:
                return "skip"
            self.state = HALF_OPEN
        if self._trial:  # one trial at a time; concurrent callers skip until it reports
            return "skip"
        self._trial = True
        return "trial"

    def success(self) -> None:
        self.state, self.failures, self.opened_at, self._trial = CLOSED, 0, None, False

    def failure(self, now: datetime) -> None:
        self.failures += 1
        self._trial = False
        if self.state == HALF_OPEN or self.failures >= self.threshold:
            self.state, self.opened_at = OPEN, now

    def release(self) -> None:
        """A trial that never ran (the total budget ran out first): the next call may try."""
        self._trial = False

    def view(self, now: datetime) -> dict[str, Any]:
        state = self.state
        retry_at = None
        if state == OPEN and self.opened_at is not None:
            retry = self.opened_at + self.cooldown
            if now >= retry:
                state = HALF_OPEN  # the next call is the trial
            else:
                retry_at = retry.isoformat(timespec="seconds")
        return {"circuit": state, "consecutive_failures": self.failures, "retry_at": retry_at}
