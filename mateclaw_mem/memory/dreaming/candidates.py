"""Dream candidates: the `##` sections of the recent daily notes, scored on evidence.

Evidence, in order of weight:

- **Recurrence**: the same claim seen on several distinct days and in several sessions (sections).
  Each section is split into facts (list items, else sentences); facts are clustered when they state
  the same claim (memory/dreaming/claims.py): the same profile key and value (`- likes: hiking`, "I
  really like hiking"), or the same content words — stemmed, stop words and fillers dropped, order
  folded, weighted by rarity (IDF over the window) — with no value swapped in place, so "prefers dark
  mode" and "prefers light mode" stay apart while rephrasings fall together.
- **Explicit "remember"** markers in the note.
- **Real retrieval hits**: a search that actually returned the section (never passive injection
  into prompts, which would only reward files that are always injected anyway).
- **Recency**: newer notes weigh a little more.

A focused dream weights candidates about its topic. Only `memory/YYYY-MM-DD.md` files are read:
DREAMS.md and the archives are never dreaming input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.sections import normalise_title, split_sections
from mateclaw_mem.memory.dreaming import claims
from mateclaw_mem.memory.dreaming.shingles import containment, idf_weights, shingles
from mateclaw_mem.workspace import oversized

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store import WorkspaceStore

DAILY_RE = re.compile(r"^memory/(\d{4}-\d{2}-\d{2})\.md$")
_HEADING_TIME = re.compile(r"^(\d{1,2}:\d{2})\b\s*(.*)$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?(.*)$")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])")
_REMEMBER = re.compile(
    r"\b(?:remember|don't forget|do not forget|never forget|keep in mind|for the record|make a note)\b"
    r"|记住|记下|记一下|别忘|不要忘|备忘",
    re.IGNORECASE,
)

PRESENT_CONTAINMENT = 0.8  # a fact whose shingles are this much inside a MEMORY.md line is already there
MIN_FACT_WORDS = 2  # fewer content words say too little to be the same claim as anything
MAX_FACTS_PER_SECTION = 20
FACT_CHARS = 400
RECENCY_HALF_LIFE_DAYS = 3.0
MAX_PROMOTIONS = 20


# -- candidates ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One `##` section of a daily note."""

    rel: str  # memory/2026-11-28.md
    day: date
    heading: str  # "09:15 Editor setup"
    time: str  # "09:15" or "" when the heading has no time
    text: str  # the section body, heading excluded
    line_start: int  # 1-based lines in the file (frontmatter included), heading line first
    line_end: int
    explicit: bool
    facts: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.rel}#{self.heading}"

    @property
    def source(self) -> str:
        return f"{self.rel} {self.heading}".strip()


def split_facts(text: str) -> list[str]:
    """Facts of a section body: its list items, else its sentences. Headings and blanks skipped."""
    items: list[str] = []
    prose: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "<!--", "```", "~~~", "---")):
            continue
        m = _LIST_ITEM.match(line)
        if m:
            items.append(m.group(1).strip())
        else:
            prose.append(line.lstrip("> ").strip())
    out = list(items)
    for line in prose:
        out.extend(s.strip() for s in _SENTENCE_SPLIT.split(line) if s and s.strip())
    cleaned = []
    for f in out:
        f = " ".join(f.split())
        if len(f) > FACT_CHARS:
            f = f[: FACT_CHARS - 1].rstrip() + "…"
        if f:
            cleaned.append(f)
    return cleaned[:MAX_FACTS_PER_SECTION]


def parse_daily(rel: str, day: date, text: str) -> list[Candidate]:
    """The `##` sections of one daily note, in file order."""
    block, body = frontmatter.split(text)
    line_no = block.count("\n") + 1
    preamble, sections = split_sections(body)
    line_no += preamble.count("\n")
    out: list[Candidate] = []
    for s in sections:
        n_lines = max(1, s.text.count("\n") + (0 if s.text.endswith("\n") else 1))
        heading = " ".join(s.title.split())
        m = _HEADING_TIME.match(heading)
        section_body = s.text.split("\n", 1)[1] if "\n" in s.text else ""
        facts = tuple(split_facts(section_body))
        if facts:
            out.append(
                Candidate(
                    rel=rel,
                    day=day,
                    heading=heading,
                    time=m.group(1) if m else "",
                    text=section_body.strip("\n"),
                    line_start=line_no,
                    line_end=line_no + n_lines - 1,
                    explicit=bool(_REMEMBER.search(s.text)),
                    facts=facts,
                )
            )
        line_no += n_lines
    return out


def daily_rels(today: date, day_range: int) -> list[tuple[str, date]]:
    """The daily notes a dream looks at: today and the `day_range - 1` days before, newest first."""
    return [(f"memory/{d:%Y-%m-%d}.md", d) for d in (today - timedelta(days=i) for i in range(day_range))]


def collect(
    store: WorkspaceStore,
    agent: str,
    *,
    owner: str | None,
    today: date,
    day_range: int,
    limit: int,
) -> tuple[list[Candidate], list[str]]:
    """Candidates newest first (latest note, latest section first), at most `limit`.

    Returns (candidates, the note files that existed and were read)."""
    candidates: list[Candidate] = []
    looked_at: list[str] = []
    for rel, day in daily_rels(today, day_range):
        if len(candidates) >= limit:
            break
        try:
            snap = store.read(agent, rel, owner=owner)
        except InvalidInputError as exc:
            # One unreadable note (not UTF-8, say) must not stop the night; the diary names it.
            looked_at.append(f"{rel} (skipped: {exc.message})")
            continue
        if not snap.exists:
            continue
        looked_at.append(rel)
        text = oversized.head(rel, snap.text, store.file_max_bytes, reader="dreaming")
        for c in reversed(parse_daily(rel, day, text)):
            if len(candidates) >= limit:
                break
            candidates.append(c)
    return candidates, looked_at


# -- scoring ---------------------------------------------------------------------------------------


@dataclass
class FactCluster:
    """One fact as it recurred across the window."""

    text: str  # the newest phrasing as MEMORY.md would show it (claims.shown: a plain one before a correction)
    shingles: frozenset[str]
    phrasings: list[str] = field(default_factory=list)  # every wording of it, newest first, unique
    days: set[date] = field(default_factory=set)
    sessions: set[str] = field(default_factory=set)  # candidate keys (one section = one session)
    sources: list[Candidate] = field(default_factory=list)  # newest first, unique
    hits: int = 0
    explicit: bool = False
    topic_match: float = 0.0
    score: float = 0.0
    present: bool = False  # already in MEMORY.md

    @property
    def recurring(self) -> bool:
        return len(self.days) >= 2


@dataclass
class ScoredCandidate:
    candidate: Candidate
    score: float
    days: int  # distinct days of its most recurring fact
    sessions: int
    recency: float
    hits: int
    explicit: bool
    topic_match: float
    clusters: list[int]  # indexes into Scored.clusters

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.candidate.source,
            "file": self.candidate.rel,
            "heading": self.candidate.heading,
            "score": round(self.score, 3),
            "days": self.days,
            "sessions": self.sessions,
            "hits": self.hits,
            "explicit": self.explicit,
            "topic_match": round(self.topic_match, 3),
        }


@dataclass
class Scored:
    candidates: list[ScoredCandidate]  # best first
    clusters: list[FactCluster]  # best first
    older: list[Candidate] = field(default_factory=list)  # notes before the window: evidence for topics.py


def _hits_for(c: Candidate, hits: Sequence[Any]) -> int:
    """Retrieval hits on this section: same file, and the same heading or overlapping lines."""
    total = 0
    heading_key = normalise_title(c.heading)
    for h in hits:
        if getattr(h, "rel", None) != c.rel:
            continue
        title = normalise_title(str(getattr(h, "title", "") or "").lstrip("#"))
        start = int(getattr(h, "line_start", 0) or 0)
        end = int(getattr(h, "line_end", 0) or start)
        if (title and title == heading_key) or (start and start <= c.line_end and end >= c.line_start):
            total += int(getattr(h, "count", 1) or 1)
    return total


def _topic_match(topic_shingles: frozenset[str], text_shingles: frozenset[str]) -> float:
    if not topic_shingles:
        return 0.0
    words = frozenset(s for s in topic_shingles if " " not in s)
    return containment(words or topic_shingles, text_shingles)


def _focus(score: float, match: float, topic: str | None) -> float:
    # A focused dream multiplies: up to 2x on a full match, 0.25x when the candidate is off topic.
    return score * (0.25 + 1.75 * match) if topic else score


def score(
    candidates: Sequence[Candidate],
    *,
    today: date,
    hits: Sequence[Any] = (),
    topic: str | None = None,
    memory_body: str = "",
    older: Sequence[Candidate] = (),
) -> Scored:
    """Cluster the facts of `candidates`, then score clusters and candidates on their evidence."""
    facts: list[tuple[int, str, claims.Claim]] = []
    for ci, c in enumerate(candidates):
        for text in c.facts:
            claim = claims.read(text)
            if len(claim.words) >= MIN_FACT_WORDS or claim.pairs:
                facts.append((ci, text, claim))
    memory_claims = [claims.read(line) for line in _memory_lines(memory_body)]
    weights = idf_weights([f[2].words for f in facts] + [m.words for m in memory_claims])
    roots = _cluster([f[2] for f in facts], weights)
    topic_sh = shingles(topic) if topic else frozenset()
    hit_counts = [_hits_for(c, hits) for c in candidates]
    groups: dict[int, list[int]] = {}
    for i in range(len(facts)):
        groups.setdefault(roots[i], []).append(i)

    clusters: list[FactCluster] = []
    cand_clusters: dict[int, list[int]] = {}
    present = _Present(memory_claims, weights)
    for members in groups.values():
        # Candidates are newest first, so the lowest candidate index holds the newest phrasing.
        members.sort(key=lambda i: facts[i][0])
        phrasings = list(dict.fromkeys(facts[i][1] for i in members))
        text = claims.shown(phrasings)
        cl = FactCluster(text=text, shingles=shingles(text), phrasings=phrasings)
        seen_sources: set[str] = set()
        for i in members:
            c = candidates[facts[i][0]]
            cl.days.add(c.day)
            cl.sessions.add(c.key)
            cl.explicit = cl.explicit or c.explicit
            if c.key not in seen_sources:
                seen_sources.add(c.key)
                cl.sources.append(c)
                cl.hits += hit_counts[facts[i][0]]
        cl.topic_match = max((_topic_match(topic_sh, shingles(facts[i][1])) for i in members), default=0.0)
        newest = max(cl.days)
        base = (len(cl.days) - 1) + 0.25 * (len(cl.sessions) - len(cl.days)) + 0.5 * _recency(today, newest)
        base += (1.0 if cl.explicit else 0.0) + 0.75 * math.log2(1 + cl.hits)
        cl.score = _focus(base, cl.topic_match, topic)
        cl.present = present.holds([facts[i][2] for i in members])
        clusters.append(cl)
    clusters.sort(key=lambda k: (-k.score, -len(k.days), k.text))
    index_of = {id(k): n for n, k in enumerate(clusters)}
    for k in clusters:
        for c in k.sources:
            cand_clusters.setdefault(id(c), []).append(index_of[id(k)])

    scored: list[ScoredCandidate] = []
    for ci, c in enumerate(candidates):
        mine = cand_clusters.get(id(c), [])
        best_days = max((len(clusters[k].days) for k in mine), default=1)
        best_sessions = max((len(clusters[k].sessions) for k in mine), default=1)
        recency = _recency(today, c.day)
        match = _topic_match(topic_sh, shingles(f"{c.heading}\n{c.text}"))
        base = (best_days - 1) + 0.25 * (best_sessions - best_days) + 0.5 * recency
        base += (1.0 if c.explicit else 0.0) + 0.75 * math.log2(1 + hit_counts[ci])
        scored.append(
            ScoredCandidate(
                candidate=c,
                score=_focus(base, match, topic),
                days=best_days,
                sessions=best_sessions,
                recency=recency,
                hits=hit_counts[ci],
                explicit=c.explicit,
                topic_match=match,
                clusters=sorted(mine),
            )
        )
    scored.sort(key=lambda s: (-s.score, -s.candidate.day.toordinal(), s.candidate.key))
    return Scored(scored, clusters, list(older))


def promotable(scored: Scored, *, topic: str | None = None, limit: int = MAX_PROMOTIONS) -> list[FactCluster]:
    """Rules mode: recurring facts (2+ distinct days) not yet in MEMORY.md, best first. A focused
    dream promotes only facts about its topic."""
    out = []
    for k in scored.clusters:
        if not k.recurring or k.present:
            continue
        if topic and k.topic_match <= 0:
            continue
        out.append(k)
        if len(out) >= limit:
            break
    return out


def _cluster(found: list[claims.Claim], weights: dict[str, float]) -> list[int]:
    """The cluster (a root index) of each of `found`: facts that state the same claim share one.
    Union-find; facts are bounded (candidates x MAX_FACTS_PER_SECTION)."""
    parent = list(range(len(found)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    # The same words (and negation, and key/value), or the same key/value in any words, join without
    # comparing; then each distinct reading is compared only with those it shares a word with (an
    # inverted index), the cheap weighted overlap first.
    first_of: dict[tuple[frozenset[str], bool, frozenset[claims.Pair]], int] = {}
    by_pairs: dict[frozenset[claims.Pair], int] = {}
    for i, c in enumerate(found):
        at = first_of.setdefault((c.words, c.negated, c.pairs), i)
        if at != i:
            parent[find(i)] = find(at)
        elif c.pairs:
            parent[find(i)] = find(by_pairs.setdefault(c.pairs, i))
    distinct = list(first_of.values())
    total = [sum(weights.get(x, 1.0) for x in found[i].words) for i in distinct]
    postings: dict[str, list[int]] = {}
    for n, i in enumerate(distinct):
        for x in found[i].words:
            postings.setdefault(x, []).append(n)
    for n, i in enumerate(distinct):
        shared: dict[int, float] = {}
        for x in found[i].words:
            w = weights.get(x, 1.0)
            for m in postings[x]:
                if m > n:
                    shared[m] = shared.get(m, 0.0) + w
        for m, inter in shared.items():
            union = total[n] + total[m] - inter
            j = distinct[m]
            if union and inter / union >= claims.SAME_CLAIM and find(i) != find(j) \
                    and claims.same(found[i], found[j], weights):
                parent[find(j)] = find(i)
    return [find(i) for i in range(len(found))]


class _Present:
    """Is a cluster already in MEMORY.md: one of its wordings mostly inside a line there, or the same
    claim as a line there (a rephrasing promoted on an earlier night must not be promoted again)."""

    def __init__(self, lines: list[claims.Claim], weights: dict[str, float]) -> None:
        self.lines = lines
        self.weights = weights
        self.shingles = [shingles(c.text) for c in lines]
        self.postings: dict[str, list[int]] = {}
        for n, c in enumerate(lines):
            for x in c.words:
                self.postings.setdefault(x, []).append(n)
            for pair in c.pairs:
                self.postings.setdefault(f"\0{pair}", []).append(n)

    def holds(self, members: list[claims.Claim]) -> bool:
        for c in members:
            sh = shingles(c.text)
            if any(containment(sh, line) >= PRESENT_CONTAINMENT for line in self.shingles):
                return True
            near = {n for x in c.words for n in self.postings.get(x, ())}
            near |= {n for pair in c.pairs for n in self.postings.get(f"\0{pair}", ())}
            if any(claims.same(c, self.lines[n], self.weights) for n in near):
                return True
        return False


def _recency(today: date, day: date) -> float:
    age = max(0, (today - day).days)
    return 0.5 ** (age / RECENCY_HALF_LIFE_DAYS)


def _memory_lines(body: str) -> list[str]:
    out = []
    for raw in body.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "<!--", ">")):
            continue
        m = _LIST_ITEM.match(line)
        out.append(m.group(1) if m else line)
    return out
