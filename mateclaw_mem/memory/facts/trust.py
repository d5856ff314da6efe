"""Trust: 0.5 at the start, HELPFUL +0.1, UNHELPFUL -0.2, a confirmation +0.1 (the seed's steps),
clamped to [0, 1], times 2^(-days / `half_life_days`) counted from the last confirmation, edit, use
or feedback -- so a fact nobody touches fades, and one still in use or confirmed is whole again.

The decay clock starts when the fact was first seen and is reset only by something that happened to
the fact (an event, or its text changing) -- never by a rebuild of the projection, which is where
the seed's decay goes wrong (it measures from a timestamp every rebuild resets, so nothing decays).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

START = 0.5
STEPS = {"helpful": 0.1, "unhelpful": -0.2, "confirm": 0.1}
DAY_MS = 86_400_000


@dataclass(frozen=True)
class Event:
    kind: str  # helpful | unhelpful | confirm | edit | use | forget
    at_ms: int


def decayed(value: float, since_ms: int, now_ms: int, half_life_days: float) -> float:
    days = max(0, now_ms - since_ms) / DAY_MS
    return value * 2 ** (-days / half_life_days)


def trust(events: Iterable[Event], *, first_seen_ms: int, changed_ms: int, now_ms: int,
          half_life_days: float) -> float:
    """The fact's trust at `now_ms`: its feedback-adjusted base (clamped after every step) times
    2^(-days since its last confirmation, edit, use or feedback / half-life). `changed_ms`: when
    its text last changed (an edit)."""
    value, anchor = START, max(first_seen_ms, changed_ms if changed_ms <= now_ms else first_seen_ms)
    for e in sorted(events, key=lambda e: e.at_ms):
        if e.at_ms > now_ms:
            break
        value = min(1.0, max(0.0, value + STEPS.get(e.kind, 0.0)))
        anchor = max(anchor, e.at_ms)
    return round(decayed(value, anchor, now_ms, half_life_days), 4)


def last_anchor(events: Iterable[Event], first_seen_ms: int, changed_ms: int) -> int:
    return max([first_seen_ms, changed_ms, *(e.at_ms for e in events)])
