"""Dates as a reader of the prompt needs them: absolute, in words a person (and a model) reads at once.

A recalled line or a daily-note entry says *when* it was said ("8 May 2023"), and the relative dates
said in it ("yesterday", "last week", "上周") are resolved against that moment and written beside the
original words ("yesterday (7 May 2023)"): read weeks later, "yesterday" alone answers no "when"
question, and the original words stay so nothing the person said is rewritten.

`day_label` uses "8 May 2023" rather than ISO: it is what people write, and what the answers to
"when did …" questions are written as, so a reader matches one against the other without converting.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# Abbreviations people write ("last Tues"), each mapped to its weekday's index.
_WEEKDAY_WORDS = {**{d: i for i, d in enumerate(_WEEKDAYS)}, "mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3,
                  "thur": 3, "thurs": 3, "fri": 4, "sat": 5}
_WEEKDAY_ABBR = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "a couple": 2, "a few": 3, "few": 3}
_ZH_DIGITS = {"一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}


def day_label(d: date) -> str:
    """'8 May 2023'."""
    return f"{d.day} {_MONTHS[d.month - 1]} {d.year}"


def dated_label(d: date) -> str:
    """'Mon 8 May 2023': the weekday lets a reader resolve "last Friday" said that day."""
    return f"{_WEEKDAY_ABBR[d.weekday()]} {day_label(d)}"


def _month_label(d: date) -> str:
    return f"{_MONTHS[d.month - 1]} {d.year}"


def _shift_months(d: date, months: int) -> date:
    y, m = divmod(d.month - 1 + months, 12)
    return date(d.year + y, m + 1, 1)


def _week_of(d: date) -> str:
    monday = d - timedelta(days=d.weekday())
    return f"the week of {day_label(monday)}"


def _count(word: str) -> int | None:
    word = word.lower()
    if word.isdigit():
        n = int(word)
        return n if 0 < n <= 400 else None
    return _NUMBERS.get(word)


_COUNT_RE = r"(\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten|a couple(?: of)?|a few|few)"
_EN = re.compile(
    r"\b(?:"
    r"(?P<yesterday>the day before yesterday|yesterday|last night)"
    r"|(?P<today>today|tonight|this morning|this afternoon|this evening)"
    r"|(?P<tomorrow>the day after tomorrow|tomorrow)"
    r"|(?P<rel>last|next|this past|this coming|past) (?P<unit>week|weekend|month|year|"
    + "|".join(sorted(_WEEKDAY_WORDS, key=len, reverse=True)) + r")\.?"
    r"|(?P<n>" + _COUNT_RE + r") (?P<span>days?|weeks?|months?|years?) ago"
    r")\b",
    re.IGNORECASE,
)
_ZH = re.compile(r"(?P<zh>大前天|前天|昨天|昨晚|今天|今晚|明天|后天|上上周|上周|上星期|下周|下星期|本周|这周|"
                 r"上个月|上月|下个月|这个月|去年|前年|今年|明年|(?P<zn>[一两二三四五六七八九十\d]{1,3})(?P<zu>天|周|个星期|个月|年)前)")


def _en_date(m: re.Match[str], said: date) -> str | None:
    g = m.groupdict()
    if g["yesterday"]:
        return day_label(said - timedelta(days=2 if g["yesterday"].lower().startswith("the day") else 1))
    if g["today"]:
        return day_label(said)
    if g["tomorrow"]:
        return day_label(said + timedelta(days=2 if g["tomorrow"].lower().startswith("the day") else 1))
    if g["rel"]:
        rel, unit = g["rel"].lower(), g["unit"].lower()
        sign = 1 if rel in ("next", "this coming") else -1
        if unit in ("week", "weekend"):
            shifted = said + timedelta(weeks=sign)
            if unit == "weekend":
                saturday = shifted - timedelta(days=shifted.weekday()) + timedelta(days=5)
                return f"the weekend of {day_label(saturday)}"
            return _week_of(shifted)
        if unit == "month":
            return _month_label(_shift_months(said, sign))
        if unit == "year":
            return str(said.year + sign)
        target = _WEEKDAY_WORDS[unit]
        if sign < 0:  # "last Friday": the latest Friday before the day it was said
            back = (said.weekday() - target) % 7 or 7
            return day_label(said - timedelta(days=back))
        ahead = (target - said.weekday()) % 7 or 7
        return day_label(said + timedelta(days=ahead))
    n = _count(g["n"] or "")
    if n is None:
        return None
    span = g["span"].lower().rstrip("s")
    about = "about " if "few" in g["n"].lower() or "couple" in g["n"].lower() else ""
    if span == "day":
        return about + day_label(said - timedelta(days=n))
    if span == "week":
        return about + _week_of(said - timedelta(weeks=n))
    if span == "month":
        return about + _month_label(_shift_months(said, -n))
    return about + str(said.year - n)


def _zh_date(m: re.Match[str], said: date) -> str | None:
    word = m.group("zh")
    days = {"大前天": -3, "前天": -2, "昨天": -1, "昨晚": -1, "今天": 0, "今晚": 0, "明天": 1, "后天": 2}
    if word in days:
        return day_label(said + timedelta(days=days[word]))
    weeks = {"上上周": -2, "上周": -1, "上星期": -1, "下周": 1, "下星期": 1, "本周": 0, "这周": 0}
    if word in weeks:
        return _week_of(said + timedelta(weeks=weeks[word]))
    months = {"上个月": -1, "上月": -1, "下个月": 1, "这个月": 0}
    if word in months:
        return _month_label(_shift_months(said, months[word]))
    years = {"前年": -2, "去年": -1, "今年": 0, "明年": 1}
    if word in years:
        return str(said.year + years[word])
    raw = m.group("zn")
    n = int(raw) if raw.isdigit() else (_ZH_DIGITS.get(raw) if len(raw) == 1 else None)
    if not n:
        return None
    unit = m.group("zu")
    if unit == "天":
        return day_label(said - timedelta(days=n))
    if unit in ("周", "个星期"):
        return _week_of(said - timedelta(weeks=n))
    if unit == "个月":
        return _month_label(_shift_months(said, -n))
    return str(said.year - n)


def resolve_relative(text: str, said: date) -> str:
    """`text` with each relative date followed by the date it means, said on `said`:
    "I went yesterday" -> "I went yesterday (7 May 2023)". Words already followed by a bracket are
    left alone, so resolving twice changes nothing."""
    for pattern, resolve, fmt in ((_EN, _en_date, " ({})"), (_ZH, _zh_date, "（{}）")):
        out: list[str] = []
        pos = 0
        for m in pattern.finditer(text):
            if text[m.end():m.end() + 2].lstrip().startswith(("(", "（")):
                continue
            when = resolve(m, said)
            if when is None:
                continue
            out += [text[pos:m.end()], fmt.format(when)]
            pos = m.end()
        if out:
            text = "".join(out) + text[pos:]
    return text
