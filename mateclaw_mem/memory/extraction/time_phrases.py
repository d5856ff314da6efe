"""Rules mode: when something happened is not part of what it is. "I moved to Berlin last year" says
`location: Berlin`; "我去年搬到了柏林" says `所在地: 柏林`. A profile line holds the stable fact, and a
time phrase left in it would go stale ("Berlin last year", read a year later) and stop the next
statement of the same fact from matching it.
"""

from __future__ import annotations

import re
from functools import cache

_MONTH = (r"(?:january|february|march|april|may|june|july|august|september|october|november|december|"
          r"jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)")
_DAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_SPAN = r"(?:years?|months?|weeks?|days?|decades?)"
_COUNT = r"(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|\d+|a few|a couple(?: of)?|several|some|many)"
_POINT = (rf"(?:(?:early|late|mid)[- ]?)?(?:\d{{4}}s?|{_MONTH}(?: \d{{4}})?|last {_SPAN}|the (?:last|past) {_SPAN}|"
          rf"{_COUNT} {_SPAN}|last (?:year|month|week|spring|summer|autumn|fall|winter))")
# One time phrase at the end of a value; stripped repeatedly ("Berlin in 2019 already").
_EN_TAIL = (
    r"\s+(?:"
    rf"(?:since|in|from|back in|as of|until|till|during|around|for|over|about|starting|starting in) (?:the )?{_POINT}"
    rf"|(?:last|this|next|past) (?:year|month|week|weekend|spring|summer|autumn|fall|winter|night|morning|"
    rf"evening|time|{_DAY})"
    rf"|{_COUNT} {_SPAN} ago|(?:earlier|later) this (?:year|month|week)|a (?:while|long time) ago|ago"
    r"|yesterday|today|tonight|tomorrow|recently|lately|earlier|already|again|finally|just now|for now|"
    r"for good|for a while|these days|nowadays|by now|so far"
    r")$"
)

_ZH_NUM = r"(?:[一二三四五六七八九十两几半\d]+(?:多)?)"
_ZH_UNIT = r"(?:年|个月|个星期|星期|周|天)"
_ZH_POINT = (rf"(?:去年|前年|今年|明年|昨天|前天|今天|明天|上个?月|这个?月|上周|上星期|最近|近来|"
             rf"(?:从|自)?\d{{2,4}}年(?:\d{{1,2}}月)?(?:起|开始|以来|就)?|{_ZH_NUM}{_ZH_UNIT}(?:前|以前|之前)|"
             rf"刚刚|刚才|刚|已经|早就|终于)")
# After the subject or at the start of a clause: "我去年搬到了柏林", "去年我搬到了柏林".
_ZH_LEAD = rf"(?:^|(?<=我))(?:{_ZH_POINT})+"
# At the end of a value only whole time words: a single 刚 or 已 may end a name (王刚).
_ZH_TAIL = (rf"(?:已经)?(?:{_ZH_NUM}{_ZH_UNIT}(?:了|多了)?|(?:去年|前年|今年|昨天|前天|今天|最近)(?:以来)?|"
            rf"(?:从|自)?\d{{2,4}}年(?:以来|起|开始)?)$")


@cache
def _compiled(pattern: str, flags: int = 0) -> re.Pattern[str]:
    # On first use, not at import: these three cost ~6 ms, paid by every `serve` before its first
    # request although only rules-mode extraction reads them.
    return re.compile(pattern, flags)


def drop_zh_time(clause: str) -> str:
    """"我去年搬到了柏林" -> "我搬到了柏林", so the statement patterns see subject and verb together."""
    return _compiled(_ZH_LEAD).sub("", clause)


def strip_time(value: str, *, zh: bool) -> str:
    """"Berlin last year" -> "Berlin"; "北京三年" -> "北京". A value that is only a time phrase is
    returned unchanged (it is then not a place or a name, and the value checks decide)."""
    rx = _compiled(_ZH_TAIL) if zh else _compiled(_EN_TAIL, re.IGNORECASE)
    while True:
        cut = rx.sub("", value).rstrip(" ,，")
        if cut == value or not cut:
            return value
        value = cut
