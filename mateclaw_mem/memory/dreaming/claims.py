"""What one fact of a daily note claims, read so that the same claim in other words is found again,
and a later claim that takes an earlier one's place is seen as doing so. Rules-mode dreaming clusters
facts with it (memory/dreaming/candidates.py) and promotes what recurs in meaning (rules.py).

A fact is read three ways:

- **profile key and value**: `- likes: hiking`, extraction's `- likes + hiking` and
  `- location: Berlin → Lisbon`, and what extraction reads from a sentence ("I really like hiking",
  "User loves hiking" — said of the person, so read as the person's own words). The same key with the
  same value is one claim whatever the wording; the same key with another value is another claim.
- **content words** (memory/dreaming/shingles.py): case, punctuation, stop words, word order,
  inflection and filler folded away. Two facts are one claim when their words mostly agree (weighted
  Jaccard) and neither puts a different word where the other has its own: "prefers dark mode in
  editors" / "prefers light mode in editors" share most words, but "light" stands where "dark" stood,
  and a value swapped in place is a different claim, never a rephrasing. A negation on one side only
  is a different claim too.
- **correction** (memory/contradictions/detect.py): "light mode, not dark mode", "actually I switched
  to …", "I no longer …". A correction is compared by what it says is true now.

`supersedes(newer, older)`: the newer fact corrects the older, removes its value (`likes − coffee`),
or gives a key that holds one value at a time (location, employer, …) another one.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache

from mateclaw_mem.memory.contradictions.detect import Correction, corrected_by, correction
from mateclaw_mem.memory.dreaming.shingles import content_words, similarity, strip_source, words
from mateclaw_mem.memory.extraction.rules import facts_from_text

# Weighted Jaccard of `words` at which two facts may be one claim. Checked on the fixture weeks of
# tests/test_dreaming.py and tests/test_dreaming_recurrence.py: rephrasings score 0.6-1.0 once the
# fillers are gone, and what has as much in common while saying another thing is a value swapped
# in place, which `_swapped` refuses whatever the score. When each side also says something the
# other does not (not in place: a detail here, another there), more must be shared: at 0.5 the
# random six-word facts of scripts/bench/dream_scoring.py sharing four words fell together.
SAME_CLAIM = 0.5
SAME_CLAIM_BOTH_ADD = 0.6

# Keys as extraction writes them (memory/extraction/rules_apply.py) and as people write them in notes.
_KEYS = {
    "name": "name", "名字": "name", "姓名": "name",
    "role": "role", "job": "role", "occupation": "role", "职业": "role", "工作": "role",
    "employer": "employer", "company": "employer", "works at": "employer", "公司": "employer",
    "工作单位": "employer",
    "location": "location", "city": "location", "lives in": "location", "所在地": "location", "城市": "location",
    "住址": "location",
    "hometown": "hometown", "家乡": "hometown",
    "timezone": "timezone", "time zone": "timezone", "tz": "timezone", "时区": "timezone",
    "likes": "likes", "like": "likes", "喜欢": "likes",
    "prefers": "prefers", "preferences": "prefers", "偏好": "prefers", "偏爱": "prefers",
    "dislikes": "dislikes", "dislike": "dislikes", "不喜欢": "dislikes",
    "tools": "tools", "stack": "tools", "tech stack": "tools", "工具": "tools", "技术栈": "tools",
    "languages": "languages", "语言": "languages",
}
# Keys that hold one value at a time: a new value replaces the old one (as PROFILE.md's upsert does).
SINGLE_KEYS = frozenset({"name", "role", "employer", "location", "hometown", "timezone"})

_KEYED = re.compile(r"^(?P<key>[^\W\d][\w ]{0,20}?)\s*(?:(?P<op>[+−])|[:：])\s*(?P<value>\S.*)$")
_ITEMS = re.compile(r"\s*[,;、，；]\s*")
_ARROW = re.compile(r"\s*(?:→|->)\s*")
# A note says "the user likes …" / "Caroline works at …" where the person says "I like …": read the
# sentence as theirs so extraction's patterns apply (a name is taken only before a profile verb).
_SUBJECT = re.compile(r"^(?:(?i:(?:the )?(?:user|person))|(?!(?:It|He|She|They|We|This|That|There|Everyone)\b)"
                      r"(?P<name>[A-Z][a-z]+))(?P<poss>'s)?\s+")
_VERB3 = re.compile(r"^(?P<verb>likes|loves|enjoys|adores|prefers|dislikes|hates|lives|works|speaks|uses|is|has)"
                    r"\b", re.IGNORECASE)
_VERB1 = {"is": "am", "has": "have"}
_NEGATION = re.compile(r"\b(?:not|no|never|nor|cannot|none|without)\b|n't\b|不(?![错过仅少久断同])|没|别再")

Pair = tuple[str, str]


@dataclass(frozen=True)
class Claim:
    text: str
    words: frozenset[str]  # compared as a set (order folded)
    seq: tuple[str, ...]  # the same words in order, to see a value swapped in place
    negated: bool
    pairs: frozenset[Pair]  # profile (key, value) it states
    removes: frozenset[Pair]  # profile (key, value) it says no longer holds
    fix: Correction | None

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(k for k, _ in self.pairs)


def _value(text: str) -> str:
    return " ".join(sorted(set(content_words(text))))


def _keyed(text: str) -> tuple[set[Pair], set[Pair]] | None:
    """`key: value`, `key + value`, `key − value`, `key: old → new` with a known profile key."""
    m = _KEYED.match(text)
    key = _KEYS.get(" ".join(m.group("key").split()).casefold()) if m else None
    if m is None or key is None:
        return None
    value = m.group("value").strip().rstrip("。.")
    old, arrow, new = value.partition("→") if "→" in value else value.partition("->")
    pairs: set[Pair] = set()
    removes: set[Pair] = set()
    if arrow:
        removes |= {(key, v) for v in map(_value, _items(old, key)) if v}
        value = new
    target = removes if m.group("op") == "−" else pairs
    target |= {(key, v) for v in map(_value, _items(value, key)) if v}
    return pairs, removes


def _items(value: str, key: str) -> list[str]:
    return [value.strip()] if key in SINGLE_KEYS else [x for x in _ITEMS.split(value.strip()) if x]


def _first_person(text: str) -> str:
    if text.startswith("用户"):
        return "我" + text[2:]
    m = _SUBJECT.match(text)
    if m is None:
        return text
    rest = text[m.end():]
    if m.group("poss"):
        return "My " + rest
    v = _VERB3.match(rest)
    if v is None or (m.group("name") and v.group("verb").lower() in _VERB1):
        return text
    verb = v.group("verb").lower()
    return "I " + _VERB1.get(verb, verb[:-1]) + rest[v.end():]


def _profile(text: str) -> tuple[set[Pair], set[Pair]]:
    pairs: set[Pair] = set()
    removes: set[Pair] = set()
    for f in facts_from_text(_first_person(text)):
        if f.kind != "profile" or not (v := _value(f.value)):
            continue
        (removes if f.op == "remove" else pairs).add((_KEYS.get(f.key, f.key), v))
    return pairs, removes


@lru_cache(maxsize=8192)  # a night reads each fact (and each MEMORY.md line) once; the text is all it needs
def read(text: str) -> Claim:
    text = strip_source(text)
    fix = correction(text)
    keyed = _keyed(text)
    if keyed is not None:
        pairs, removes = keyed
        now = display(text)  # `location: Berlin → Lisbon` says where the person is now
        negated = bool(removes) and not pairs  # `likes − coffee`
    else:
        # A correction is compared by what it says is true now: "light mode, not dark mode" is a claim
        # about light mode; "I no longer drink coffee" stays a negated claim about coffee.
        now = fix.new if fix and fix.old and fix.new else (fix.statement if fix else text)
        pairs, removes = _profile(now)
        negated = bool(_NEGATION.search(now.casefold()))
    return Claim(text, words(now), content_words(now), negated, frozenset(pairs), frozenset(removes), fix)


def same(a: Claim, b: Claim, weights: dict[str, float]) -> bool:
    """Do `a` and `b` state the same claim?"""
    if a.pairs and a.pairs == b.pairs:
        return True
    if a.keys & b.keys:
        return False  # the same key with another value
    if a.negated != b.negated:
        return False
    both_add = not (a.words <= b.words or b.words <= a.words)
    if similarity(a.words, b.words, weights) < (SAME_CLAIM_BOTH_ADD if both_add else SAME_CLAIM):
        return False
    return not _swapped(a.seq, b.seq)


def conflicts(a: Claim, b: Claim, weights: dict[str, float]) -> bool:
    """Do `a` and `b` say one thing two ways: a one-value key given two values, or mostly the same
    words with a value swapped in place or a negation on one side? (A thread of one topic is never
    made of these: they are a contradiction to resolve, memory/contradictions/.)"""
    if any(k in SINGLE_KEYS and (k, v) not in b.pairs for k, v in a.pairs if k in b.keys):
        return True
    if similarity(a.words, b.words, weights) < SAME_CLAIM:
        return False
    return a.negated != b.negated or _swapped(a.seq, b.seq)


def _swapped(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Does one put a word of its own where the other has a word of its own ("dark" / "light")?
    Words only moved elsewhere, or added on one side, leave the claim as it was."""
    sa, sb = set(a), set(b)
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "replace" and set(a[i1:i2]) - sb and set(b[j1:j2]) - sa:
            return True
    return False


def supersedes(newer: Claim, older: Claim) -> bool:
    """Does `newer` take `older`'s place: corrects it, removes its value, or gives one of its
    one-value keys another value?"""
    if newer.removes & older.pairs:
        return True
    for key, value in newer.pairs:
        if key in SINGLE_KEYS and any(k == key and not _overlap(v, value) for k, v in older.pairs):
            return True
    fix = newer.fix
    return fix is not None and correction(older.text) is None and corrected_by(older.text, fix)


def _overlap(a: str, b: str) -> bool:
    # "berlin" and "berlin germani" are one place said twice, not a move.
    return bool(set(a.split()) & set(b.split()))


def display(text: str) -> str:
    """A fact as MEMORY.md shows it: extraction's change notes as the value they leave
    (`likes + hiking` → `likes: hiking`, `location: Berlin → Lisbon` → `location: Lisbon`)."""
    m = _KEYED.match(text)
    if m is None and _ARROW.search(text):  # a word-level correction note, `dark mode → light mode`
        return _ARROW.split(text)[-1].strip() or text
    if m is None or _KEYS.get(" ".join(m.group("key").split()).casefold()) is None or m.group("op") == "−":
        return text
    value = _ARROW.split(m.group("value"))[-1].strip()
    sep = "：" if re.search(r"[\u3400-\u9fff]", m.group("key")) else ": "
    return f"{m.group('key').strip()}{sep}{value}" if value else text


def shown(phrasings: list[str]) -> str:
    """The wording a cluster is promoted in (`phrasings` newest first): the newest one that is not a
    correction ("Light mode, not dark mode" reads as an argument once the argument is over), else the
    newest as written."""
    return display(next((p for p in phrasings if read(p).fix is None), phrasings[0]))
