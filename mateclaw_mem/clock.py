"""Time is injected: every cooldown, daily note, decay and schedule reads a Clock."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, tzinfo
from typing import Protocol
from zoneinfo import ZoneInfo


class Clock(Protocol):
    tz: tzinfo

    def now(self) -> datetime:
        """An aware datetime in the configured timezone."""
        ...


def resolve_timezone(name: str | None) -> tzinfo:
    """`""`/None means the machine's local zone."""
    if name:
        return ZoneInfo(name)
    local = datetime.now().astimezone().tzinfo
    assert local is not None
    return local


class SystemClock:
    def __init__(self, tz: tzinfo | None = None) -> None:
        self.tz = tz or resolve_timezone(None)

    def now(self) -> datetime:
        return datetime.now(self.tz)


class ManualClock:
    """A clock tests set and advance by hand. Thread-safe."""

    def __init__(self, start: datetime, tz: tzinfo | None = None) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self.tz = tz or start.tzinfo
        self._now = start.astimezone(self.tz)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def set(self, when: datetime) -> None:
        with self._lock:
            self._now = when.astimezone(self.tz)

    def advance(self, delta: timedelta | None = None, **kwargs: float) -> datetime:
        with self._lock:
            self._now = self._now + (delta or timedelta(**kwargs))
            return self._now
