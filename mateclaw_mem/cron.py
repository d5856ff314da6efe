"""Cron expressions as the seed writes them (Quartz: `sec min hour dom month dow [year]` with `?`)
and classic 5-field cron, turned into APScheduler 3 `CronTrigger` fields.

Settings validation imports this module: APScheduler is imported only inside `cron_trigger`, so it
stays fast. The scheduler and the dreaming service's next-run time share the trigger helpers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

_QUARTZ_DOW_NAMES = {"SUN": "sun", "MON": "mon", "TUE": "tue", "WED": "wed", "THU": "thu", "FRI": "fri", "SAT": "sat"}
# Quartz numbers days 1=SUN..7=SAT; APScheduler 0=mon..6=sun.
_QUARTZ_DOW_NUM = {"1": "sun", "2": "mon", "3": "tue", "4": "wed", "5": "thu", "6": "fri", "7": "sat"}
# Classic cron numbers days 0/7=sun, 1=mon..6=sat.
_UNIX_DOW_NUM = {"0": "sun", "1": "mon", "2": "tue", "3": "wed", "4": "thu", "5": "fri", "6": "sat", "7": "sun"}
_FIELD = re.compile(r"^[0-9A-Za-z*/,\-?]+$")


@dataclass(frozen=True)
class CronSpec:
    second: str
    minute: str
    hour: str
    day: str
    month: str
    day_of_week: str
    year: str | None = None

    def trigger_kwargs(self) -> dict[str, str]:
        kwargs = {
            "second": self.second,
            "minute": self.minute,
            "hour": self.hour,
            "day": self.day,
            "month": self.month,
            "day_of_week": self.day_of_week,
        }
        if self.year:
            kwargs["year"] = self.year
        return kwargs


def _map_dow(field: str, numbers: dict[str, str]) -> str:
    if field in ("*", "?"):
        return "*"

    def one(token: str) -> str:
        step = ""
        if "/" in token:
            token, step = token.split("/", 1)
            step = "/" + step
        parts = token.split("-")
        mapped = []
        for p in parts:
            up = p.upper()
            if up in _QUARTZ_DOW_NAMES:
                mapped.append(_QUARTZ_DOW_NAMES[up])
            elif p in numbers:
                mapped.append(numbers[p])
            elif p == "*":
                mapped.append("*")
            else:
                raise ValueError(f"day-of-week {p!r} is not supported (use 1-7 / SUN-SAT)")
        return "-".join(mapped) + step

    return ",".join(one(t) for t in field.split(","))


def parse_cron(expr: str) -> CronSpec:
    """Parse Quartz (6/7 fields) or classic (5 fields) cron. Raises ValueError naming the problem."""
    fields = expr.split()
    if len(fields) not in (5, 6, 7):
        raise ValueError(
            f"cron {expr!r} has {len(fields)} fields; expected Quartz 'sec min hour day month weekday' "
            "(e.g. '0 30 3 * * ?') or classic 'min hour day month weekday'"
        )
    for i, f in enumerate(fields):
        numeric_only = i < (3 if len(fields) > 5 else 2) + 1  # second/minute/hour and day of month
        if not _FIELD.match(f) or (numeric_only and re.search(r"[A-Za-z]", f)):
            raise ValueError(f"cron {expr!r}: field {f!r} uses unsupported syntax (L, W and # are not supported)")
    if len(fields) == 5:
        minute, hour, day, month, dow = fields
        return CronSpec("0", minute, hour, day.replace("?", "*"), month, _map_dow(dow, _UNIX_DOW_NUM))
    second, minute, hour, day, month, dow = fields[:6]
    year = fields[6] if len(fields) == 7 and fields[6] not in ("*", "?") else None
    return CronSpec(second, minute, hour, day.replace("?", "*"), month, _map_dow(dow, _QUARTZ_DOW_NUM), year)


def cron_trigger(expr: str, tz: tzinfo) -> CronTrigger:
    from apscheduler.triggers.cron import CronTrigger

    return CronTrigger(timezone=tz, **parse_cron(expr).trigger_kwargs())


def next_fire_after(trigger: CronTrigger, after: datetime) -> datetime | None:
    """The first fire time strictly after `after`."""
    # get_next_fire_time(None, now) is inclusive of `now` on whole seconds; a microsecond makes it strict.
    return trigger.get_next_fire_time(None, after + timedelta(microseconds=1))
