"""Times as a person reads them, in the daemon's own time zone (`timezone` in the settings, the
Clock's `tz`): the stored ISO stamps carry whatever offset wrote them (UTC from another process, an
old zone before a move), so every page converts them here rather than printing them raw."""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

# The scheduler's triggers for a nightly run (runtime/scheduler.py): only those were "last night".
SCHEDULED = ("schedule", "catch-up")


def local(at: str | None, tz: tzinfo) -> datetime | None:
    if not at:
        return None
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=tz)).astimezone(tz)


def greeting(now: datetime) -> str:
    """By the local hour: a card opened at 21:00 is not greeted with "Good morning"."""
    if 5 <= now.hour < 12:
        return "Good morning"
    if 12 <= now.hour < 18:
        return "Good afternoon"
    return "Good evening"


def day_and_time(when: datetime, now: datetime) -> str:
    """`Today at 23:49`, `Yesterday at 23:49`, or `On Mon 8 May at 23:49` (the year when not this one)."""
    clock = f"{when:%H:%M}"
    days = (now.date() - when.date()).days
    if days == 0:
        return f"Today at {clock}"
    if days == 1:
        return f"Yesterday at {clock}"
    year = f" {when.year}" if when.year != now.year else ""
    return f"On {when:%a} {when.day} {when:%b}{year} at {clock}"


def short(at: str | None, tz: tzinfo, now: datetime) -> str:
    """A stored stamp in plain words, or "" when there is none."""
    when = local(at, tz)
    return day_and_time(when, now) if when else ""


def run_heading(report: dict[str, Any], tz: tzinfo, now: datetime) -> str:
    """The morning card's heading: "Last night" only for the scheduled nightly run of last night
    (or of early this morning); a dream run by hand says when it ran."""
    when = local(report.get("at"), tz)
    if when is None:
        return "Latest dream"
    days = (now.date() - when.date()).days
    if report.get("trigger") in SCHEDULED and ((days == 0 and when.hour < 12) or (days == 1 and when.hour >= 18)):
        return "Last night"
    return day_and_time(when, now)
