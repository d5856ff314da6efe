"""Topic threads: what a person keeps coming back to, in other words each time (rules-mode dreaming).

People rarely say the same thing twice. "I'm reading a fantasy book that really captivates me" on one
day and "I'm more into reading and fantasy novels" weeks later are no rephrasing of one claim (their
words overlap little), yet they are one thread of the person's life. What two such facts share is the
*thing* they are about, a noun or a name, where a platitude shares only its verbs and its mood ("I'm
gonna keep pushing for them" / "We'll keep pushing each other"): a word overlap cannot tell these
apart at the scores both reach, a topic can.

- **Topic terms** of a fact: the content words of its noun phrases (the words after an article, a
  possessive or a preposition: "a *fantasy book*", "my *kids*", "into *reading*", "for *mental
  health*"), and names said mid-sentence ("Harry Potter", "LGBTQ"). Words that carry no topic of their
  own are left out whatever their place: generic verbs, adjectives and nouns ("keep", "new", "stuff",
  "time", "journey"), dates and numbers. A term in a large share of the person's own facts says
  nothing about any one of them (IDF over the person's history, not a corpus).
- **A thread**: the facts that share a topic term, kept when they span 2 or more days and 2 or more
  sessions, and when one of them is new tonight (the window); terms with the same facts make one
  thread ("Mental / health"). The head of a noun phrase the person calls theirs is a term of its own
  ("my kids" is not "kids in need"). A fact belongs to one thread at most. Facts that disagree
  (a value swapped in place, a negation on one side: claims.conflicts) are a contradiction, never a
  thread. English only: CJK facts are left to the claim-level clusters (claims.py).

A thread is promoted as one dated line, every day it came up and its newest fact in the person's words,
its sources after it (rules.py): `Fantasy (2023-08-02, 2023-08-09): "I'm reading a fantasy book that
really captivates me" (Source: memory/2023-08-09.md 10:35; memory/2023-08-02.md 16:24 · dreamed …)`.
The facts come from the dream's window and, as evidence only, the notes of the HISTORY_DAYS before it.

Measured (tests/test_dreaming_topics.py): on 257 hand-labelled pairs of real facts of the LoCoMo dev
replay, the pair relation (`linked`) has precision 0.87 at recall 0.63 of the candidate pairs, where
word overlap stays under 0.3 precision at every threshold; the replay promotes 16 threads, 15 true.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import TYPE_CHECKING

from mateclaw_mem.index.tokenizer import STOPWORDS, tokenize
from mateclaw_mem.memory.dreaming import candidates as cand
from mateclaw_mem.memory.dreaming import claims

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store import WorkspaceStore

MAX_THREADS = 3  # per night: each line is in every prompt (MEMORY.md is always on)
FACT_SHOWN_CHARS = 120
HISTORY_DAYS = 30  # daily notes read for evidence (the window's own are read anyway)
HISTORY_MAX_SECTIONS = 400
MAX_TERM_SHARE = 0.15  # a term in more of the person's facts than this is their everyday talk
MIN_DAYS = 2
MIN_SESSIONS = 2

_CHUNK_SPLIT = re.compile(r"[.,;:!?()\[\]\"“”–—]+|\s-\s")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*(?:-[A-Za-z]+)*|\d+")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Words after which a noun phrase starts.
_OPENERS = _words("a an the my our your his her their its this that these those some any each every another about "
                  "of in on at with for from into onto through during after before around near love loves enjoy "
                  "enjoys")
_OWN = frozenset({"my", "our"})
_PRONOUNS = _words("i me you he him she her it we us they them myself yourself ourselves themselves everyone someone "
                   "anyone everybody somebody anybody everything something anything nothing i'm i've i'd i'll you're "
                   "we're they're it's that's there's what's")


def _stemmed(text: str) -> frozenset[str]:
    # Through the shared tokenizer, so the list follows its stemmer.
    return frozenset(tokenize(text))


# Words that name no topic of their own: the verbs, adjectives and nouns any life story is told with.
_GENERIC = _stemmed(
    # verbs
    "make made keep kept push pushing go going went gone get got take took give gave see saw seen look looking "
    "find found feel felt think thought want need try tried help helped start started stay come came bring "
    "brought put let say said tell told know knew mean show showed use used work worked play played do doing "
    "love loved like liked enjoy enjoyed hope hoped wish believe remind reminded happen happened share shared "
    "learn learned talk talked hear heard meet met join joined spend spent "
    "create created change changed live lived lift move moved build built grow grew care cared matter mattered "
    "appreciate thank thanks wait waited check finish finished continue continued keep pass handle "
    "manage managed reach reached hit celebrate celebrated fight stop connect connected remember forget "
    "understand understood inspire inspired motivate motivated support supported encourage encouraged "
    "achieve achieved succeed improve improved focus focused explore explored face faced follow "
    "gonna wanna gotta "
    # adjectives, adverbs
    "new old great good bad big little small amazing awesome super cool nice hard tough easy fun happy sad "
    "excited exciting proud glad sure real true best better worse first last next own same other different "
    "whole special important huge lot lots much many more most less few full positive negative strong "
    "beautiful wonderful incredible awesome crazy tired busy free early late long short right wrong "
    "favorite favourite special fantastic perfect lucky grateful thankful rewarding fulfilling meaningful "
    "inspiring inspired powerful comfortable safe ready able worth kind interesting "
    "really truly always never often sometimes still even also again ever together alone "
    # nouns that go with anything
    "thing things stuff time times way ways people person life lives day days week weeks weekend month months "
    "year years today tonight tomorrow yesterday moment moments bit kind sort part lot place places world "
    "journey experience experiences chance opportunity opportunities idea ideas support love help feeling "
    "feelings step steps goal goals dream dreams plan plans effort difference impact future past "
    "memory memories end start point side home everyone everything something nothing anything "
    "reminder reason reasons question questions news word words story stories picture pictures photo photos "
    "challenge challenges struggle struggles passion passions strength energy vibe vibes mind heart soul "
    "others other friend friends group groups one ones called named middle progress piece pieces local resource "
    "resources "
    # feelings: a mood recurs in everyone's week
    "relief excitement worry stress joy happiness pride fear anxiety emotion emotions"
    # dates
    " january february march april may june july august september october november december monday tuesday "
    "wednesday thursday friday saturday sunday morning afternoon evening night"
)


@dataclass(frozen=True)
class Fact:
    """One fact of a daily note, with where it was said."""

    text: str
    day: date
    session: str  # the section's key: one section, one session
    source: str  # "memory/2023-06-02.md 14:00"
    new: bool  # in tonight's window (else: the person's older notes, for evidence only)


@dataclass
class Thread:
    terms: list[str]  # stems, best first
    label: str  # the terms as the person wrote them
    facts: list[Fact] = field(default_factory=list)  # newest first
    score: float = 0.0

    @property
    def days(self) -> set[date]:
        return {f.day for f in self.facts}

    @property
    def sessions(self) -> set[str]:
        return {f.session for f in self.facts}


def topic_terms(text: str) -> dict[str, str]:
    """The topic-bearing terms of `text` -> the word as written (first seen). A term is a stem; the
    head of a noun phrase the person says is theirs is marked "+" ("my kids", "our team"): their own
    kids and "kids in need", their team and "their hardware team", are two topics that share a word.
    A modifier is never marked ("my dance studio" is about dance as much as "a dance competition")."""
    out: dict[str, str] = {}

    def flush(chunk: list[tuple[str, str]], owned: bool) -> None:
        # The head is the phrase's last word, generic or not ("my transgender journey" is no more theirs
        # than "a transgender conference" where it comes to "transgender").
        for n, (stem, word) in enumerate(chunk):
            if stem not in _GENERIC and not stem.isdigit() and len(stem) > 2:
                out.setdefault(stem + "+" * (owned and n == len(chunk) - 1), word)
        chunk.clear()

    for piece in _CHUNK_SPLIT.split(text):
        raw = _WORD.findall(piece)
        chunk: list[tuple[str, str]] = []
        opened = owned = False
        for i, w in enumerate(raw):
            low = w.lower().replace("’", "'")
            named = i > 0 and w[0].isupper() and low not in _PRONOUNS and len(w) > 1
            if low in _OPENERS:
                flush(chunk, owned)
                # "like a family", "as a kid": a comparison, not what the fact is about.
                opened = not (i > 0 and raw[i - 1].lower() in {"like", "as"})
                owned = opened and low in _OWN
                continue
            stems = [] if low in _PRONOUNS or low.isdigit() else [s for s in tokenize(low) if s not in STOPWORDS]
            if not stems:
                flush(chunk, owned)
                # "and" / "or" keep a list of nouns going ("reading and fantasy novels"); others close it.
                opened = opened and low in {"and", "or", "&"}
                continue
            if opened or named:
                chunk += [(s, re.sub(r"['’]s?$", "", w)) for s in stems]
        flush(chunk, owned)
    return out


def _weights(facts: Sequence[Fact], terms: Sequence[dict[str, str]]) -> dict[str, float]:
    df: dict[str, int] = {}
    for t in terms:
        for s in t:
            df[s] = df.get(s, 0) + 1
    n = max(1, len(facts))
    # Everyday talk (a term in more than MAX_TERM_SHARE of the facts) weighs nothing; a small history
    # cannot say that (3 of 10 facts is no pattern yet), so the share counts only past 20 facts.
    return {s: (0.0 if n >= 20 and c / n > MAX_TERM_SHARE else math.log(1.0 + n / c)) for s, c in df.items()}


def _read(facts: Sequence[Fact], skip: set[str]) -> tuple[list[dict[str, str]], dict[str, float]]:
    terms = [topic_terms(claims.strip_source(f.text)) if f.text not in skip else {} for f in facts]
    return terms, _weights(facts, terms)


def linked(facts: Sequence[Fact]) -> Callable[[int, int], bool]:
    """Are facts `i` and `j` of `facts` (the person's history) about one topic: a topic term in common
    that is no everyday talk of theirs, and not a contradiction? The pair relation `threads` groups
    by, as tests/data/dream_topic_pairs.json scores it."""
    terms, weights = _read(facts, set())

    def pair(i: int, j: int) -> bool:
        shared = any(weights.get(s, 0.0) > 0.0 for s in terms[i].keys() & terms[j].keys())
        return shared and not _conflicting([facts[i], facts[j]])

    return pair


def threads(facts: Sequence[Fact], *, taken: Iterable[str] = (), limit: int = MAX_THREADS) -> list[Thread]:
    """The threads worth a line tonight, best first. `taken`: fact texts already promoted or already
    in MEMORY.md (never in two lines)."""
    terms, weights = _read(facts, set(taken))
    by_term: dict[str, list[int]] = {}
    for i, t in enumerate(terms):
        for s in t:
            if weights.get(s, 0.0) > 0.0:
                by_term.setdefault(s, []).append(i)
    # Terms with the same facts are one topic ("fantasy" and "novels" said together each time).
    groups: dict[tuple[int, ...], list[str]] = {}
    for s, indexes in by_term.items():
        if len({facts[i].day for i in indexes}) >= MIN_DAYS:
            groups.setdefault(tuple(indexes), []).append(s)
    ranked = sorted(groups.items(), key=lambda g: -_score(g[0], g[1], facts, weights))
    used: set[int] = set()
    out: list[Thread] = []
    for members, stems in ranked:
        left = [i for i in members if i not in used]
        chosen = [facts[i] for i in left]
        if (len({f.day for f in chosen}) < MIN_DAYS or len({f.session for f in chosen}) < MIN_SESSIONS
                or not any(f.new for f in chosen) or _conflicting(chosen)):
            continue
        stems = sorted(stems, key=lambda s: -weights[s])[:3]
        chosen.sort(key=lambda f: (f.day, f.source), reverse=True)
        label = _label([next(terms[i][s] for i in left if s in terms[i]) for s in stems], chosen)
        out.append(Thread(stems, label[:1].upper() + label[1:], chosen, _score(tuple(left), stems, facts, weights)))
        used.update(left)
        if len(out) >= limit:
            break
    return out


def _label(words: list[str], facts: Sequence[Fact]) -> str:
    """The topic's words as the person said them together ("mental health"), else one by one."""
    for f in facts:
        said = _WORD.findall(f.text)
        low = [w.lower() for w in said]
        for n in range(len(low) - len(words) + 1):
            if sorted(low[n:n + len(words)]) == sorted(w.lower() for w in words):
                return " ".join(said[n:n + len(words)])
    return " / ".join(words)


def _score(members: Sequence[int], stems: Sequence[str], facts: Sequence[Fact], weights: dict[str, float]) -> float:
    days = len({facts[i].day for i in members})
    return days + 0.5 * max(weights[s] for s in stems) + 0.1 * len(stems)


def _conflicting(facts: Sequence[Fact]) -> bool:
    read = [claims.read(f.text) for f in facts]
    w: dict[str, float] = {}
    return any(claims.conflicts(a, b, w) for n, a in enumerate(read) for b in read[n + 1:])


def shown(thread: Thread) -> str:
    """The thread's line (without its sources): the label, every day it came up, and the newest fact
    in the person's words. Short on purpose: MEMORY.md is in every prompt, and the whole of each
    fact stays in its daily note (and in recall)."""
    days = ", ".join(f"{d:%Y-%m-%d}" for d in sorted(thread.days))
    text = " ".join(claims.strip_source(thread.facts[0].text).split()).rstrip(".")
    if len(text) > FACT_SHOWN_CHARS:
        text = text[:FACT_SHOWN_CHARS - 1].rstrip() + "…"
    return f'{thread.label} ({days}): "{text}"'


_LINE = re.compile(r'^(?:[-*+]\s+)?(?P<label>[^()"\n]{1,80}) '
                   r'\((?P<days>\d{4}-\d{2}-\d{2}(?:, \d{4}-\d{2}-\d{2})*)\): "')


def promoted_before(memory_body: str) -> list[tuple[frozenset[str], set[date]]]:
    """The threads MEMORY.md already holds: each line's topic (its label's stems) and its days."""
    out = []
    for line in memory_body.splitlines():
        m = _LINE.match(line.strip())
        if m:
            out.append((_stemmed(m.group("label").replace("/", " ")),
                        {date.fromisoformat(d) for d in m.group("days").split(", ")}))
    return out


def already_threaded(facts: Sequence[Fact], memory_body: str) -> set[str]:
    """Facts a thread line of MEMORY.md already covers: said on one of its days, about its topic."""
    before = promoted_before(memory_body)
    if not before:
        return set()
    return {f.text for f in facts
            if any(f.day in days and stems & {t.rstrip("+") for t in topic_terms(claims.strip_source(f.text))}
                   for stems, days in before)}


def facts_of(window: Sequence[cand.Candidate], older: Sequence[cand.Candidate]) -> list[Fact]:
    return [Fact(text, c.day, c.key, f"{c.rel} {c.time}".strip(), new)
            for cs, new in ((window, True), (older, False)) for c in cs for text in c.facts]


def history(store: WorkspaceStore, agent: str, *, owner: str | None, today: date,
            day_range: int) -> list[cand.Candidate]:
    """The person's daily notes before the dream's window, back HISTORY_DAYS (as many as
    `dream.archive-keep-days` keeps out of the month archives by default): a topic said tonight may
    have come up three weeks ago, and people talk in sessions weeks apart."""
    if day_range >= HISTORY_DAYS:
        return []
    found, _ = cand.collect(store, agent, owner=owner, today=today - timedelta(days=day_range),
                            day_range=HISTORY_DAYS - day_range, limit=HISTORY_MAX_SECTIONS)
    return found
