"""Structured entries: `structured/{user,feedback,project,reference}.md`, one `## key` per entry.

- remember / recall / forget match keys whole (case and spacing ignored): `lang` never hits
  `## language`, unlike the seed's prefix match, because a prefix hit overwrites the wrong entry.
- The always-on block carries user and feedback entries within `system-block-max-chars` and
  `system-block-max-entries-per-type`: the newest (by `Updated`) are admitted first, the admitted
  ones are rendered in file order so the prompt prefix stays stable (cache-friendly), and a footer
  says how many were left out. The files are never cut to fit.
- Project and reference entries join a prompt only when relevant to its query: through the
  injected search service when there is one, else by token overlap with the shared tokenizer.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import ConflictError, InvalidInputError, NotFoundError
from mateclaw_mem.index.tokenizer import STOPWORDS, tokenize
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown import structured as fmt
from mateclaw_mem.markdown.structured import Entry
from mateclaw_mem.redaction import redact

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.workspace.store import WorkspaceStore, WriteResult

log = logging.getLogger(__name__)

TYPES: tuple[str, ...] = ("user", "feedback", "project", "reference")
ALWAYS_ON_TYPES: tuple[str, ...] = ("user", "feedback")
ON_DEMAND_TYPES: tuple[str, ...] = ("project", "reference")
KEY_MAX = 80
TEXT_MAX = 2000
PERSON = "person"
NEW_FILE = "---\nenabled: false\n---\n"
BLOCK_TITLE = "--- STRUCTURED MEMORY ---"
RELEVANT_TITLE = "--- RELEVANT ENTRIES ---"
_TYPE_LABELS = {"user": "About the user", "feedback": "Feedback on how to work",
                "project": "project", "reference": "reference"}


@dataclass(frozen=True)
class TypedEntry:
    type: str
    entry: Entry

    def as_dict(self) -> dict[str, Any]:
        e = self.entry
        return {"type": self.type, "key": e.key, "text": e.text, "source": e.source, "updated": e.updated,
                "pinned": e.pinned}


@dataclass(frozen=True)
class RememberResult:
    type: str
    entry: Entry
    created: bool  # False: an entry with the same key was replaced
    changed: bool
    write: WriteResult | None


@dataclass(frozen=True)
class StructuredBlock:
    text: str  # "" when there is nothing to show
    included: dict[str, int] = field(default_factory=dict)
    omitted: dict[str, int] = field(default_factory=dict)
    max_chars: int = 0
    entries: tuple[TypedEntry, ...] = ()  # the admitted ones, in block order (turn bookkeeping)

    @property
    def omitted_total(self) -> int:
        return sum(self.omitted.values())


# A relevance source: (agent, owner, query, candidates, limit) -> the relevant candidates, best first.
Relevance = Callable[[str, "str | None", str, Sequence[TypedEntry], int], list[TypedEntry]]


def check_type(type_: str) -> str:
    if type_ not in TYPES:
        raise InvalidInputError(f"unknown structured entry type {type_!r}; use one of {', '.join(TYPES)}")
    return type_


def check_key(key: str) -> str:
    key = " ".join((key or "").split())
    if not key:
        raise InvalidInputError("structured entry key is empty")
    if len(key) > KEY_MAX:
        raise InvalidInputError(f"structured entry key {key[:20]!r}… is longer than {KEY_MAX} characters")
    if key.startswith("#"):
        raise InvalidInputError(f"structured entry key {key!r} must not start with '#'")
    return key


def check_text(text: str, key: str) -> str:
    text = (text or "").strip()
    if not text:
        raise InvalidInputError(f"structured entry {key!r} has no text")
    if len(text) > TEXT_MAX:
        raise InvalidInputError(f"structured entry {key!r} is {len(text)} characters; the limit is {TEXT_MAX}")
    for line in text.splitlines():
        if line.lstrip().startswith("## ") or line.strip() == "##":
            raise InvalidInputError(
                f"structured entry {key!r}: a text line starts with '## ', which would begin a new entry"
            )
    return text


class StructuredMemory:
    def __init__(
        self,
        store: WorkspaceStore,
        clock: Clock,
        *,
        max_chars: int = 4000,
        max_entries_per_type: int = 40,
        relevance: Relevance | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.max_chars = max_chars
        self.max_entries_per_type = max_entries_per_type
        self.relevance = relevance
        # Parsed files keyed by path, reused while the text is unchanged: prompts are built far more
        # often than structured files change, and parsing 1,000 entries costs more than reading them.
        self._cache: dict[str, tuple[str, list[Entry]]] = {}
        # The two below are keyed by the agent's (or owner's) folder, `store.agent_key`.
        self._pool_cache: dict[str, tuple[tuple[list[Entry], ...], _Pool]] = {}
        self._cache_lock = threading.Lock()
        self._block_cache: dict[str, tuple[tuple[list[Entry], ...], tuple[int, int], StructuredBlock]] = {}

    @staticmethod
    def rel(type_: str) -> str:
        return f"structured/{check_type(type_)}.md"

    # -- reading -----------------------------------------------------------------------------------

    def entries(self, agent: str, type_: str, *, owner: str | None = None) -> list[Entry]:
        snap = self.store.read(agent, self.rel(type_), owner=owner)
        return self._parse_cached(str(snap.path), snap.text)

    def _parse_cached(self, key: str, text: str) -> list[Entry]:
        with self._cache_lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] == text:
                return hit[1]
        entries = fmt.parse(frontmatter.body(text)).entries
        with self._cache_lock:
            self._cache[key] = (text, entries)
        return entries

    def recall(
        self, agent: str, type_: str | None = None, key: str | None = None, *, owner: str | None = None
    ) -> list[TypedEntry]:
        """Every entry (of one type), or the one whose whole key matches. A missing key is NotFound."""
        types = [check_type(type_)] if type_ else list(TYPES)
        out: list[TypedEntry] = []
        for t in types:
            for e in self.entries(agent, t, owner=owner):
                if key is None or e.norm == fmt.normalise_key(key):
                    out.append(TypedEntry(t, e))
        if key is not None and not out:
            where = f"structured/{type_}.md" if type_ else "any structured file"
            raise NotFoundError(f"no structured entry with key {key!r} in {where}")
        return out

    # -- writing -----------------------------------------------------------------------------------

    def remember(
        self,
        agent: str,
        type_: str,
        key: str,
        text: str,
        *,
        actor: str,
        source: str = "",
        owner: str | None = None,
        pinned: bool | None = None,
    ) -> RememberResult:
        """Add an entry or replace the one with the same whole key (its position is kept).

        Key, text and source are redacted first: whoever calls (a tool, the model through
        extraction, MCP, HTTP), a secret never becomes an entry or its `## key` heading."""
        rel = self.rel(type_)
        key = check_key(redact(key))
        text = check_text(redact(text), key)
        source = redact(source)
        today = f"{self.clock.now():%Y-%m-%d}"
        outcome: dict[str, Any] = {}

        def apply(current: str) -> str | None:
            block, body = frontmatter.split(current) if current else (NEW_FILE, "")
            doc = fmt.parse(body)
            entries = list(doc.entries)
            at = fmt.find(entries, key)
            if at is None:
                entry = Entry(key, text, source or actor, today, bool(pinned))
                entries.append(entry)
                outcome.update(entry=entry, created=True)
            else:
                old = entries[at]
                if old.pinned and actor != PERSON:
                    raise ConflictError(
                        f"structured entry {old.key!r} in {rel} is pinned; only a person may change it"
                    )
                same = old.value == text and (pinned is None or pinned == old.pinned)
                if same:
                    outcome.update(entry=old, created=False)
                    return None
                # The new value replaces the old one; lines a person added under the entry stay.
                full = f"{text}\n{old.tail}" if old.tail and old.tail not in text else text
                entry = old.changed(text=full, tail=old.tail if full != text else "",
                                    source=source or old.source or actor, updated=today,
                                    pinned=old.pinned if pinned is None else pinned)
                entries[at] = entry
                outcome.update(entry=entry, created=False)
            return block + fmt.render(fmt.Document(doc.preamble, entries))

        result = self.store.update(agent, rel, apply, actor=actor, owner=owner, reason=f"remember {key}")
        return RememberResult(type_, outcome["entry"], outcome["created"], result is not None and result.changed,
                              result)

    def forget(self, agent: str, type_: str, key: str, *, actor: str, owner: str | None = None) -> TypedEntry:
        """Remove the entry whose whole key matches. The previous file version stays in history."""
        rel = self.rel(type_)
        removed: list[Entry] = []

        def apply(current: str) -> str | None:
            block, body = frontmatter.split(current)
            doc = fmt.parse(body)
            at = fmt.find(doc.entries, key)
            if at is None:
                raise NotFoundError(f"no structured entry with key {key!r} in {rel}")
            if doc.entries[at].pinned and actor != PERSON:
                raise ConflictError(f"structured entry {doc.entries[at].key!r} in {rel} is pinned; "
                                    "only a person may remove it")
            removed.append(doc.entries[at])
            entries = doc.entries[:at] + doc.entries[at + 1 :]
            return block + fmt.render(fmt.Document(doc.preamble, entries))

        self.store.update(agent, rel, apply, actor=actor, owner=owner, reason=f"forget {key}")
        return TypedEntry(type_, removed[0])

    # -- prompt blocks -----------------------------------------------------------------------------

    def always_on_block(self, agent: str, *, owner: str | None = None) -> StructuredBlock:
        """User and feedback entries within the char and per-type budgets (see the module doc)."""
        by_type = {t: self.entries(agent, t, owner=owner) for t in ALWAYS_ON_TYPES}
        # The parsed lists are reused objects while the files are unchanged, so identity is the key.
        # Keyed by folder: without owner isolation every owner reads the same files.
        ident = self.store.agent_key(agent, owner)
        hit = self._block_cache.get(ident)
        if hit is not None and hit[1] == (self.max_chars, self.max_entries_per_type) and all(
                a is b for a, b in zip(hit[0], by_type.values(), strict=True)):
            return hit[2]
        block = self._build_block(by_type)
        self._block_cache[ident] = (tuple(by_type.values()), (self.max_chars, self.max_entries_per_type), block)
        return block

    def _build_block(self, by_type: dict[str, list[Entry]]) -> StructuredBlock:
        total = sum(len(v) for v in by_type.values())
        if total == 0:
            return StructuredBlock("", {t: 0 for t in ALWAYS_ON_TYPES}, {t: len(v) for t, v in by_type.items()},
                                   self.max_chars)
        lines = {t: [f"- {e.key}: {fmt.one_line(e.text)}\n" for e in entries] for t, entries in by_type.items()}
        headers = {t: f"{_TYPE_LABELS[t]}:\n" for t in ALWAYS_ON_TYPES}
        footer_room = len(_footer(total, self.max_chars, self.max_entries_per_type)) if total else 0
        # 0 = unlimited, as the seed documents it for both keys.
        budget = self.max_chars - len(BLOCK_TITLE) - 1 - footer_room if self.max_chars > 0 else math.inf
        per_type = self.max_entries_per_type if self.max_entries_per_type > 0 else math.inf
        # Newest first across both types; among equal dates the later one in the file is the newer.
        order = sorted(
            ((e.updated, i, t) for t, entries in by_type.items() for i, e in enumerate(entries)),
            key=lambda x: (x[0], x[1]),
            reverse=True,
        )
        admitted: dict[str, set[int]] = {t: set() for t in ALWAYS_ON_TYPES}
        used = 0
        for _, i, t in order:
            if len(admitted[t]) >= per_type:
                continue
            cost = len(lines[t][i]) + (0 if admitted[t] else len(headers[t]))
            if used + cost > budget:
                continue  # a long entry may not fit where a shorter, older one still does
            admitted[t].add(i)
            used += cost
        parts = [BLOCK_TITLE + "\n"]
        for t in ALWAYS_ON_TYPES:
            if admitted[t]:
                parts.append(headers[t])
                parts.extend(lines[t][i] for i in sorted(admitted[t]))
        included = {t: len(admitted[t]) for t in ALWAYS_ON_TYPES}
        omitted = {t: len(by_type[t]) - included[t] for t in ALWAYS_ON_TYPES}
        left_out = sum(omitted.values())
        if left_out:
            parts.append(_footer(left_out, self.max_chars, self.max_entries_per_type))
        if not any(included.values()):
            parts = [BLOCK_TITLE + "\n", _footer(left_out, self.max_chars, self.max_entries_per_type)]
        shown = tuple(TypedEntry(t, by_type[t][i]) for t in ALWAYS_ON_TYPES for i in sorted(admitted[t]))
        return StructuredBlock("".join(parts).rstrip("\n"), included, omitted, self.max_chars, shown)

    def relevant(
        self, agent: str, query: str, *, owner: str | None = None, limit: int = 5, max_chars: int = 2000
    ) -> list[TypedEntry]:
        """Project and reference entries relevant to `query`, best first, within `max_chars`."""
        if not query.strip():
            return []
        pool = self._pool(agent, owner)
        if not pool.candidates:
            return []
        ranked: list[TypedEntry] | None = None
        if self.relevance is not None:
            try:
                ranked = self.relevance(agent, owner, query, pool.candidates, limit)
            except Exception as exc:
                # Relevance is a prefetch: a broken index must not stop the chat. Logged, not hidden.
                log.warning("structured relevance via search failed (%s); using token overlap", exc)
        if ranked is None:
            ranked = pool.rank(query, limit)
        out, used = [], 0
        for item in ranked[:limit]:
            cost = len(item.entry.key) + len(item.entry.text) + 16
            if used + cost > max_chars:
                continue
            out.append(item)
            used += cost
        return out

    def _pool(self, agent: str, owner: str | None) -> _Pool:
        """Project/reference candidates with an inverted index, rebuilt only when a file changed."""
        lists = tuple(self.entries(agent, t, owner=owner) for t in ON_DEMAND_TYPES)
        ident = self.store.agent_key(agent, owner)
        hit = self._pool_cache.get(ident)
        if hit is not None and all(a is b for a, b in zip(hit[0], lists, strict=True)):
            return hit[1]
        pool = _Pool([TypedEntry(t, e) for t, entries in zip(ON_DEMAND_TYPES, lists, strict=True) for e in entries])
        self._pool_cache[ident] = (lists, pool)
        return pool

    @staticmethod
    def render_relevant(items: Sequence[TypedEntry]) -> str:
        if not items:
            return ""
        lines = [RELEVANT_TITLE]
        lines += [f"- [{i.type}] {i.entry.key}: {fmt.one_line(i.entry.text)}" for i in items]
        return "\n".join(lines)


class _Pool:
    """Token-overlap ranking: query tokens shared with an entry (key + text), rarer tokens weighing
    more (an IDF sum), damped for long entries. Same tokenizer as the search index (Latin + CJK)."""

    def __init__(self, candidates: list[TypedEntry]) -> None:
        self.candidates = candidates
        self.postings: dict[str, list[int]] = {}
        self.sizes: list[int] = []
        for i, c in enumerate(candidates):
            toks = {t for t in tokenize(f"{c.entry.key} {c.entry.text}") if t not in STOPWORDS}
            self.sizes.append(len(toks))
            for t in toks:
                self.postings.setdefault(t, []).append(i)

    def rank(self, query: str, limit: int) -> list[TypedEntry]:
        n = len(self.candidates)
        scores: dict[int, float] = {}
        for t in {t for t in tokenize(query) if t not in STOPWORDS}:
            posting = self.postings.get(t)
            if posting:
                idf = math.log(1 + n / len(posting))
                for i in posting:
                    scores[i] = scores.get(i, 0.0) + idf
        sizes = self.sizes
        best = heapq.nsmallest(limit, ((-score / math.sqrt(1 + sizes[i] / 20), i) for i, score in scores.items()))
        return [self.candidates[i] for _, i in best]


def search_relevance(get_search: Callable[[], Any]) -> Relevance:
    """A Relevance over the search index (`index.search.SearchService`, reached lazily so building a
    prompt never opens the index until a query needs it). Structured entries are indexed one chunk
    per `## key`, so a hit maps back to its entry by file and title. Prompt prefetch is not recorded
    as a retrieval (`record=False`): being injected is not evidence that a memory was useful."""

    def rank(agent: str, owner: str | None, query: str, candidates: Sequence[TypedEntry],
             limit: int) -> list[TypedEntry]:
        by_key = {(f"structured/{c.type}.md", c.entry.norm): c for c in candidates}
        result = get_search().search(query, agent=agent, owner=owner, scope="memory", limit=50, record=False)
        out: list[TypedEntry] = []
        for hit in result.hits:
            found = by_key.pop((hit.file, fmt.normalise_key(hit.title)), None)
            if found is not None:
                out.append(found)
                if len(out) >= limit:
                    break
        return out

    return rank


def _footer(left_out: int, max_chars: int, max_per_type: int) -> str:
    noun = "entry" if left_out == 1 else "entries"
    limits = [f"{max_chars}-char" if max_chars > 0 else "", f"{max_per_type}-per-type" if max_per_type > 0 else ""]
    return (f"({left_out} more structured {noun} not shown: over the {' / '.join(x for x in limits if x)} "
            "budget; recall them by key)\n")
