"""One stored turn parsed for ranking (`Doc`, `parse_doc`): its terms' counts per field, packed
one int a term, and the flags the ranking reads (a time, a number, names, how much it asks).

A long history's first search after a start parses every turn of the owner (30,000: most of its
seconds), so this is written for speed; tests/test_message_turns.py holds it to the plain definitions.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mateclaw_mem.index.messages.fields import FIELDS, MONTHS, WEEKDAYS, split_speaker
from mateclaw_mem.index.tokenizer import STOPWORDS, tokenize

# Words that place an event in time. A "when" question's answer usually sits in a turn that says
# "yesterday", "last week" or "in May" - relative to the message date the answer model sees.
_TEMPORAL = frozenset(
    tokenize(
        "yesterday today tomorrow tonight ago last next week weekend weeks month months year years day days"
        " morning evening night recently soon earlier later since before after until"
        " " + " ".join(MONTHS) + " " + " ".join(WEEKDAYS)
    )
) - STOPWORDS
# The lookahead (every number word's first letter) only skips the places no word can start: the
# same matches, in half the time of trying the whole alternation at every character.
_NUMBER_WORD_RE = re.compile(
    r"\b(?=[cdefhmnost])(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty"
    r"|thirty|forty|fifty|hundred|thousand|million|dozen|couple|several|once|twice)\b",
    re.IGNORECASE,
)
# A digit anywhere or a number word: two searches, not one alternation of both (tried at every
# character, the digit made it take 1.7x as long: an Add parses each turn it indexes).
_DIGIT_RE = re.compile(r"\d")


def _has_number(text: str) -> bool:
    return _DIGIT_RE.search(text) is not None or _NUMBER_WORD_RE.search(text) is not None

_CAPITAL_RE = re.compile(r"\b[A-Z][a-z]+(?:'s)?\b")
_IMAGE_RE = re.compile(r"\[shares image:[^\]]*\]")
_SENTENCE_RE = re.compile(r"[^.!?]+[.!?]*")
_SENTENCE_END = frozenset(".!?:;\"'(-\u2013\u2014")
# A field's count of a term, added once per occurrence into the term's packed int (`unpack`).
_ONE_IN = (1, 1 << 16, 1 << 32, 1 << 48)

# A term's count in one field of one turn is capped here (only a hostile message of 2 MB reaches
# it): its saturated score has long stopped moving, and four counts then pack into one int.
COUNT_CAP = 0xFFFF

def _question_share(spoken: str) -> float:
    """How much of a turn is asking: "Oscar, my guinea pig. How are yours?" is mostly an answer.
    `spoken`: the turn's text without its image captions."""
    asked = total = 0
    for sentence in _SENTENCE_RE.findall(spoken):
        n = len(sentence.split())
        total += n
        if sentence.rstrip().endswith("?"):
            asked += n
    return asked / total if total else 0.0


def _proper_names(spoken: str) -> frozenset[str]:
    """Capitalised words not at a sentence start ("we met Matt at the Chicago show"): a cheap
    stand-in for named entities, which is what who/where questions ask for. `spoken`: the turn's
    text without its image captions."""
    out: set[str] = set()
    for m in _CAPITAL_RE.finditer(spoken):
        j = m.start() - 1
        while j >= 0 and spoken[j].isspace():  # the character before it, past any whitespace
            j -= 1
        if j < 0 or spoken[j] in _SENTENCE_END:
            continue  # a sentence start says nothing about the word
        word = m.group(0)
        tokens = _NAME_TOKENS.get(word)
        if tokens is None:
            if len(_NAME_TOKENS) >= _NAME_CACHE:
                _NAME_TOKENS.clear()
            tokens = _NAME_TOKENS[word] = tuple(tokenize(word))
        out.update(tokens)
    return frozenset(out)


# The same few names come back in turn after turn ("Caroline", "Melanie's"): their tokens, kept.
_NAME_TOKENS: dict[str, tuple[str, ...]] = {}
_NAME_CACHE = 8192


def unpack(packed: int) -> tuple[int, int, int, int]:
    """A posting's four field counts (packed by `parse_doc`, 16 bits a field)."""
    return packed & 0xFFFF, packed >> 16 & 0xFFFF, packed >> 32 & 0xFFFF, packed >> 48


@dataclass(slots=True)  # 30,000 turns of one user are 30,000 of these
class Doc:
    id: int
    speaker: str | None
    is_question: bool
    has_time: bool
    question_share: float  # share of the spoken words that are in sentences ending with '?'
    has_number: bool  # digits or a number word: what "how many" questions want
    names: frozenset[str]  # capitalised words inside sentences (tokenized): who/where answers
    # term -> its counts in (body, ctx, nb, dt) packed in one int, 16 bits a field (`unpack`): the
    # same int is the term's posting of this turn. First-seen order, fields in turn (not set order,
    # which varies with hash seeds): ties in feedback term selection break the same way everywhere.
    # None once the view has put them in its postings (`OwnerView.tf` reads them back): a dict per
    # turn was a third of a long history's memory.
    counts: dict[str, int] | None
    body: tuple[str, ...]  # the terms with a body count, in the order of `counts`
    lens: tuple[int, int, int, int]
    conversation_id: str
    role: str
    content: str  # kept so a search returns hits without another query
    ts_ms: int
    prev: int | None = None  # neighbouring turns of the same conversation (set by the view)
    next: int | None = None
    # Share of its content words this turn repeats from the other speaker's statement just before
    # it ("Wow, a dance studio!" after "I opened a dance studio"): a reaction, not where it was said.
    echo: float = 0.0
    # Kept by the view for score inheritance: the turns just before and after, and the same
    # speaker's turns two steps away either side.
    around: tuple[int, ...] = ()
    thread: tuple[int, ...] = ()
    terms: tuple[str, ...] = field(init=False)  # every term of `counts`, in its order (kept when it is not)

    def __post_init__(self) -> None:
        self.terms = tuple(self.counts or ())


def parse_doc(r: sqlite3.Row | Mapping[str, Any]) -> Doc:
    """A stored document with its fields (`docfields.read`: space-joined; `docfields.row`: token
    lists) parsed for ranking.

    A long history's first search parses every turn (30,000: most of its seconds), so the counts
    are packed as they are counted - each occurrence added into its field's 16 bits - instead of
    being made as tuples and packed again."""
    fields = [r[f].split() if isinstance(r[f], str) else r[f] for f in FIELDS]  # (lists: docfields.row)
    lens = (len(fields[0]), len(fields[1]), len(fields[2]), len(fields[3]))
    counts: dict[str, int] = {}
    get = counts.get
    for t in fields[0]:  # (a `Counter`'s own checks took longer than counting a turn's words)
        counts[t] = get(t, 0) + 1
    body = tuple(counts)
    if max(lens) > COUNT_CAP:  # only then can a count exceed it (and carry into the next field)
        counts = _capped(fields)
    else:
        for f in (1, 2, 3):
            one = _ONE_IN[f]
            for t in fields[f]:
                counts[t] = get(t, 0) + one
    text = split_speaker(r["content"])[1]
    spoken = _IMAGE_RE.sub("", text) if "[" in text else text
    return Doc(r["id"], r["speaker"], bool(r["is_question"]), not _TEMPORAL.isdisjoint(body),
               _question_share(spoken), _has_number(text), _proper_names(spoken), counts, body, lens,
               r["conversation_id"], r["role"], r["content"], r["ts_ms"])


def _capped(fields: list[list[str]]) -> dict[str, int]:
    """`parse_doc`'s packed counts of a turn with a field over COUNT_CAP tokens, each count capped
    (only a hostile message of megabytes gets here)."""
    per_field = [Counter(x) for x in fields]
    return {t: sum(min(c.get(t, 0), COUNT_CAP) * _ONE_IN[f] for f, c in enumerate(per_field))
            for t in dict.fromkeys(itertools.chain(*per_field))}


def echo_of(d: Doc, prev: Doc) -> float:
    # Repeating a *question's* words is how an answer starts ("How's the store?" / "The store's
    # doing great"): only a statement's words make a reaction.
    if prev.speaker == d.speaker or prev.question_share >= 0.5:
        return 0.0
    mine = [t for t in d.body if t not in STOPWORDS]
    if not mine:
        return 0.0
    theirs = set(prev.body)
    return sum(1 for t in mine if t in theirs) / len(mine)
