"""Deterministic contradiction detection over claims, pure over their texts.

Three ways two claims can disagree:

- **same key**: `timezone: Europe/Berlin` in PROFILE.md and `timezone: Asia/Shanghai` in MEMORY.md
  (keys that hold lists -- likes, tools, ... -- are not single-valued, so they never pair);
- **same subject**: two plain claims equal but for one short span ("Prefers dark mode in editors" /
  "Prefers light mode in editors"), with more in common than differs;
- **correction**: the newer claim says it corrects ("light mode, not dark mode", "not X anymore",
  "no longer X", "actually I switched to light mode", "不是X而是Y", "X，不是Y", "不再X", "其实…改用Y").

A claim that describes a change over time ("used to", "until 2020", "以前") pairs with nothing:
a temporal change is history, not a contradiction. The correction patterns are our own rather than
memory/extraction/rules.py's: extraction needs a profile value out of the person's sentence, this
needs the corrected span out of any claim, and the "anymore" / "switched to" forms.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

# Keys whose value is a list: "likes: tea" and "likes: coffee" are both true.
MULTI_KEYS = frozenset({"likes", "like", "prefers", "dislikes", "tools", "languages", "language", "skills",
                        "interests", "hobbies", "projects", "喜欢", "不喜欢", "爱好", "工具", "语言", "技能"})
MAX_SPAN_TOKENS = 4  # a "same subject" pair differs in at most this many tokens on each side

_TEMPORAL = re.compile(
    r"\b(?:used to|until|formerly|previously|back then|in (?:19|20)\d\d|(?:19|20)\d\d\s*-\s*(?:19|20)\d\d|"
    r"years? ago|last (?:year|month|week)|no more than)\b|以前|曾经|之前|去年|过去|那时|直到",
    re.IGNORECASE)
_EN_PREFIX = re.compile(r"^(?:actually|correction|to correct myself|i mean|update)\b[,:\s]*", re.IGNORECASE)
_ZH_PREFIX = re.compile(r"^(?:其实|更正一下|纠正一下|更正|纠正|不对|说错了)[，,：:\s]*")
_SPAN = r"[^,.;!?()]+?"
_EN_FORMS = [  # (pattern, has old, has new)
    re.compile(rf"\bswitched from (?P<old>{_SPAN}) to (?P<new>{_SPAN})\s*[.!]*$", re.IGNORECASE),
    re.compile(rf"\bnot (?P<old>{_SPAN}),? but (?:rather )?(?P<new>{_SPAN})\s*[.!]*$", re.IGNORECASE),
    re.compile(rf"(?:^|[\s:])(?P<new>[\w .+#/:'-]+?),\s*not (?P<old>{_SPAN})\s*(?:anymore|any more)?\s*[.!]*$",
               re.IGNORECASE),
    re.compile(rf"\b(?:(?:do|does|am|is|are)(?:n't| not)|not|no longer) (?P<old>{_SPAN})\s+(?:anymore|any more)"
               r"\s*[.!]*$", re.IGNORECASE),
    re.compile(rf"\bno longer (?P<old>{_SPAN})\s*[.!]*$", re.IGNORECASE),
    re.compile(rf"\b(?:switched|changed|moved|went over) to (?P<new>{_SPAN})(?:\s+now)?\s*[.!]*$", re.IGNORECASE),
]
_ZH_FORMS = [
    re.compile(r"不是(?P<old>[^，,。；;！!而]+?)[，,]?\s*而?是(?P<new>[^，,。；;！!]+)"),
    re.compile(r"(?P<new>[^，,。；;！!]+?)[，,]\s*(?:而)?不是(?P<old>[^，,。；;！!]+)"),
    re.compile(r"从(?P<old>[^，,。；;！!]+?)(?:改成|换成|改用|换到|切换到)了?(?P<new>[^，,。；;！!]+)"),
    re.compile(r"(?:改用|换成|换用|切换到|改成)了?(?P<new>[^，,。；;！!了]+)"),
    re.compile(r"不再(?P<old>[^，,。；;！!了]+)"),
]
_TOKEN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\W_]+(?:[.:'+#/-][^\W_]+)*", re.UNICODE)
_STOP = frozenset({"a", "an", "the", "i", "user", "the user", "is", "are", "am", "my", "to", "of", "in", "and",
                   "用户", "我"})


class ClaimLike(Protocol):
    id: str
    key: str
    value: str
    text: str
    first_seen_ms: int
    changed_ms: int


@dataclass(frozen=True)
class Correction:
    old: str  # the corrected span ("dark mode"); "" when the text only says what is true now
    new: str  # the value now ("light mode"); "" when it only says what is no longer true
    statement: str  # the text without its "actually" prefix


@dataclass(frozen=True)
class Found:
    a: ClaimLike  # the earlier / corrected claim
    b: ClaimLike  # the later / correcting claim
    kind: str  # same_key | same_subject | correction
    reason: str


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.casefold())


def _clean(span: str) -> str:
    span = re.sub(r"^(?:to |the |a |an |using |use |uses |prefer |prefers |like |likes )+", "", span.strip(),
                  flags=re.IGNORECASE)
    return span.strip(" \t\"'“”‘’.。!！")


def temporal(text: str) -> bool:
    return bool(_TEMPORAL.search(text))


@lru_cache(maxsize=4096)  # detection asks once per pair; a claim's text is all it depends on
def correction(text: str) -> Correction | None:
    """The correction a claim states, if it states one."""
    zh = bool(re.search(r"[\u3400-\u9fff]", text)) and not re.search(r"[A-Za-z]{3,}\s+[A-Za-z]{3,}", text)
    statement = (_ZH_PREFIX if zh else _EN_PREFIX).sub("", text.strip()).strip()
    prefixed = statement != text.strip()
    for rx in (_ZH_FORMS if zh else _EN_FORMS):
        m = rx.search(statement)
        if m is None:
            continue
        groups = m.groupdict()
        old, new = _clean(groups.get("old") or ""), _clean(groups.get("new") or "")
        if (old or new) and len(tokens(old)) <= 8 and len(tokens(new)) <= 8:
            return Correction(old, new, statement)
    return Correction("", "", statement) if prefixed and statement else None


def _contains(text: str, span: str) -> bool:
    if not span:
        return False
    t, s = tokens(text), tokens(span)
    if not s:
        return False
    if all(len(x) == 1 and re.match(r"[\u3400-\u9fff]", x) for x in s):  # CJK: by characters
        return "".join(s) in "".join(t)
    return any(t[i:i + len(s)] == s for i in range(len(t) - len(s) + 1))


def corrected_by(claim: str, fix: Correction) -> bool:
    """Does `fix` correct `claim`? It names what the claim says (and the claim is not already the
    new value), or it gives a new value for the same thing (its last word, "mode" of "light mode")."""
    if temporal(claim) or (fix.new and _contains(claim, fix.new)):
        return False
    if fix.old:
        return _contains(claim, fix.old)
    if fix.new:
        head = tokens(fix.new)
        cjk = head and all(len(x) == 1 and re.match(r"[\u3400-\u9fff]", x) for x in head)
        tail = "".join(head[-2:]) if cjk else (head[-1] if head else "")
        return bool(tail) and tail not in _STOP and _contains(claim, tail)
    return same_subject(claim, fix.statement)


def same_subject(a: str, b: str) -> bool:
    """Equal but for one short span, with more in common than differs ("prefers dark mode in editors"
    / "prefers light mode in editors"; not "likes tea" / "likes coffee")."""
    ta, tb = tokens(a), tokens(b)
    if not ta or not tb or ta == tb:
        return False
    p = 0
    while p < min(len(ta), len(tb)) and ta[p] == tb[p]:
        p += 1
    s = 0
    while s < min(len(ta), len(tb)) - p and ta[-1 - s] == tb[-1 - s]:
        s += 1
    da, db = ta[p:len(ta) - s], tb[p:len(tb) - s]
    if not da or not db or len(da) > MAX_SPAN_TOKENS or len(db) > MAX_SPAN_TOKENS:
        return False  # one says more than the other (a refinement), or they differ in too much
    common = [t for t in ta[:p] + ta[len(ta) - s:] if t not in _STOP]
    if {"not", "no", "never", "don't", "doesn't", "不"} & set(da + db):
        return len(common) >= 2  # "likes tea" / "does not like tea" is a plain disagreement
    return len(common) >= 2 and len(common) > max(len(da), len(db))


def _norm_value(v: str) -> str:
    return " ".join(tokens(v))


def _later(x: ClaimLike, y: ClaimLike) -> tuple[ClaimLike, ClaimLike]:
    kx, ky = (max(x.first_seen_ms, x.changed_ms), x.id), (max(y.first_seen_ms, y.changed_ms), y.id)
    return (x, y) if kx <= ky else (y, x)


def pair(x: ClaimLike, y: ClaimLike) -> Found | None:
    """How `x` and `y` disagree, earlier claim first, or None."""
    if x.id == y.id or _norm_value(x.text) == _norm_value(y.text) or _norm_value(x.value) == _norm_value(y.value):
        return None  # the same claim (under another key, say) agrees with itself
    for older, newer in (_later(x, y), _later(x, y)[::-1]):
        fix = correction(newer.text)
        if fix is not None and correction(older.text) is None and corrected_by(older.text, fix):
            said = f"{fix.new!r}, not {fix.old!r}" if fix.old and fix.new else repr(fix.old or fix.new or "actually")
            return Found(older, newer, "correction", f"the later claim corrects the earlier one ({said})")
    if temporal(x.text) or temporal(y.text):
        return None
    a, b = _later(x, y)
    kx, ky = x.key.casefold().strip(), y.key.casefold().strip()
    if kx and kx == ky:
        if kx in MULTI_KEYS:
            return None
        va, vb = _norm_value(a.value), _norm_value(b.value)
        if not va or not vb or va == vb or va in vb or vb in va:  # "Berlin" / "Berlin, Germany": a refinement
            return None
        return Found(a, b, "same_key", f"{x.key}: {a.value!r} vs {b.value!r}")
    if not (kx in MULTI_KEYS and ky in MULTI_KEYS) and same_subject(a.text, b.text):
        return Found(a, b, "same_subject", "the same claim with a different value")
    return None


def detect(claims: Sequence[ClaimLike]) -> list[Found]:
    """Every disagreeing pair among `claims` (the facts one owner sees), in a stable order.

    Only pairs that can disagree are compared: the same key, or shared words (two for the same
    subject, one when either states a correction) -- found through an inverted index, so detection
    on every projection stays near-linear rather than comparing every pair."""
    ordered = sorted(claims, key=lambda c: c.id)
    postings: dict[str, list[int]] = {}
    for i, c in enumerate(ordered):
        for t in set(tokens(c.text)) - _STOP:
            postings.setdefault(t, []).append(i)
        if c.key:
            postings.setdefault("\0key:" + c.key.casefold().strip(), []).append(i)
    shared: dict[tuple[int, int], int] = {}
    for ids in postings.values():
        if len(ids) > 200:  # a word in most claims says nothing about which pairs disagree
            continue
        for n, i in enumerate(ids):
            for j in ids[n + 1:]:
                shared[(i, j)] = shared.get((i, j), 0) + 1
    out = []
    for (i, j), count in sorted(shared.items()):
        x, y = ordered[i], ordered[j]
        keyed = bool(x.key) and x.key.casefold().strip() == y.key.casefold().strip()
        if count < 2 and not keyed and correction(x.text) is None and correction(y.text) is None:
            continue
        found = pair(x, y)
        if found is not None:
            out.append(found)
    return out


def fingerprint(agent: str, owner: str | None, text_a: str, text_b: str) -> str:
    """Stable across rebuilds and line moves: the two normalised texts, in either order."""
    a, b = sorted((_norm_value(text_a), _norm_value(text_b)))
    return hashlib.sha1(f"{agent}\0{owner or ''}\0{a}\0{b}".encode()).hexdigest()[:20]
