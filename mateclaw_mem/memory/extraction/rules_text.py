"""Rules mode's text helpers, shared by the readers of the person's sentences (memory/extraction/
rules.py, rules_requests.py, rules_values.py): sentences, Chinese or not, questions, and the pattern
cache."""

from __future__ import annotations

import re
from functools import cache


# Patterns are compiled on first use, not at import: the ~90 of rules mode cost ~25 ms, which every
# `serve` paid before its first request though only an extraction or a forget request reads them.
def src(pattern: str, flags: int = 0) -> tuple[str, int]:
    return pattern, flags


@cache
def rx(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


def cjk() -> re.Pattern[str]:  # one CJK ideograph
    return rx(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


_SENTENCE_SPLIT = src(r"(?<=[.!?])\s+|(?<=[。！？；;])|\n+")


def is_zh(text: str) -> bool:
    ideographs = len(cjk().findall(text))
    if not ideographs:
        return False
    first = re.search(r"[A-Za-z\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]", text)
    latin = len(re.findall(r"[A-Za-z]", text))
    # "我的时区是Asia/Shanghai" is Chinese even though most letters are Latin.
    return ideographs * 2 >= latin or bool(first and cjk().match(first.group(0)))


def sentences(text: str) -> list[str]:
    return [s.strip() for s in rx(*_SENTENCE_SPLIT).split(text or "") if s and s.strip()]


def strip_lead(s: str) -> str:
    return re.sub(r"^(?:[-*•>]\s*)+", "", s).strip()


_QUESTION_START = src(
    r"^(?:do|does|did|can|could|would|will|should|shall|may|might|is|are|am|was|were|have|has|what|why|how|"
    r"when|where|who|whom|whose|which|isn't|aren't|don't|doesn't|didn't|won't|wouldn't|couldn't)\b",
    re.IGNORECASE,
)
ZH_QUESTION = src(
    r"(?:吗|么|呢|吧)[。.！!]?$|什么|怎么|为什么|是否|能不能|是不是|有没有|哪(?:里|儿|个|些)|多少|几"
)


def is_question(s: str) -> bool:
    t = s.strip()
    if t.endswith(("?", "？")):
        return True
    if rx(*_QUESTION_START).match(t):
        return True
    return bool(is_zh(t) and rx(*ZH_QUESTION).search(t))

