"""Keyword search over memory files and the conversation log (and, optionally, dense retrieval).

Query: tokenized like the index (`index/tokenizer.py`), OR-ed - never "every term must match";
English stopwords are dropped when the query has other words.

Ranking, per chunk (FTS5 picks the candidates by its bm25, then we score them in Python):

- BM25 (k1 1.2, b 0.75) with a smoothed IDF `ln(1 + (N - n + 0.5) / (n + 0.5))`, title tokens
  counted twice. Why not FTS5's bm25 as the score: it clamps the IDF of any term in half the chunks
  or more to 1e-6, which on a small workspace (tens of chunks) flattens every score to zero.
- Coverage bonus: `× (1 + COVERAGE_BONUS × c)`, `c` the IDF-weighted share of query terms the chunk
  holds, so covering "周日", "日早" and "早上" beats repeating "早上" five times.
- Phrase bonus: the query text appearing verbatim (case-insensitive): `× PHRASE_BONUS`.
- File weight (`search.file-weights`): looked up by exact path (`MEMORY.md`, `structured/user.md`),
  then by kind (`daily`, `structured`, `archive`, `conversations`), then the built-in default.
- Recency for daily notes (and conversation messages): the weight is lifted by up to half of itself,
  `w + (top - w) × 2^(-age_days / half_life)` with `top = 1.5 w`, age from the note's file date
  (`search.daily-recency-half-life-days`) - but never to the weight of a core file (MEMORY.md,
  PROFILE.md, AGENTS.md, SOUL.md, structured/: `top` is at most the lowest of theirs), so the same
  match ranks in a core file above the daily ledger, as the seed promises, and recency orders the
  notes among themselves. (Today's note ×1.5 put it above MEMORY.md, and every note of the last
  three weeks above AGENTS.md.)

Scopes (which chunks a search may return):

- `all`: every memory file and the conversation log.
- `memory`: what the agent learned - MEMORY.md, daily notes, structured entries, archives
  (memory/archive, memory/dreams), DREAMS.md and any other file except the four below.
- `profile`: PROFILE.md (facts about the person).
- `persona`: AGENTS.md and SOUL.md (how the agent works, who it is).
- `conversations`: the conversation log's messages only.
- `files`: every memory file, no conversation messages.

Owner: `owner=None` searches the agent's shared files; an owner key adds that owner's personal
files (owner isolation on) and their conversations ("" is taken as None). Every search also covers
the workspace's GLOBAL files (`global/`, indexed as agent `global`): every agent sees them.

Dense retrieval (`model.embedding-model` set): the keyword scores and the cosines over the scope's
chunk vectors are fused by weighted scores (`index/dense.py`, `fuse`: (1 - w) x keyword / top
keyword + w x min-max-normalised cosine, w = `search.dense-weight`, the keyword top 3 kept in
place); why not reciprocal-rank fusion is said there. The keyword side is the final keyword score
(file weights and recency applied), so fusion starts from the ranking keyword search shows. A
search whose scope has chunks without vectors says so (`dense`, a warning); if embedding fails the
search returns the keyword hits with a warning (never an error, never silently).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from typing import TYPE_CHECKING

from mateclaw_mem.errors import InvalidInputError, TooLargeError
from mateclaw_mem.index.chunker import CONVERSATION, SCOPES, daily_date
from mateclaw_mem.index.dense import complete_note, fuse
from mateclaw_mem.index.files.index import FileIndex
from mateclaw_mem.index.files.query import Candidate
from mateclaw_mem.index.retrievals import RetrievalHit, RetrievalLog, RetrievalRecord
from mateclaw_mem.index.snippets import make_snippet
from mateclaw_mem.index.sources import SourcedLog
from mateclaw_mem.index.tokenizer import MAX_QUERY_CHARS, STOPWORDS, fts_query, tokenize
from mateclaw_mem.workspace.walk import GLOBAL

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.index.dense import DenseRetriever
    from mateclaw_mem.settings import SearchSettings

log = logging.getLogger(__name__)

__all__ = ["SCOPES", "SearchHit", "SearchResult", "SearchService"]
DEFAULT_LIMIT = 10
MAX_LIMIT = 50
K1, B = 1.2, 0.75
TITLE_TF = 2
COVERAGE_BONUS = 1.0
PHRASE_BONUS = 1.2
# Chunk matches FTS5 may rank per search (see `_candidates`). Ranking costs ~3 µs a match; at 100k
# sections 1500 instead of 3000 cut p95 by a quarter with the same source-section recall. 1200: the
# LoCoMo conversation figures of 1500 (scripts/bench/search_weights.py; 1000 lost R@2k 0.0001) and a
# fifth less time at 50k sections (scripts/bench/vs_basic_memory.py).
CANDIDATE_BUDGET = 1200
# Weights for kinds the settings do not name (settings keys win).
_KIND_KEYS = {"memory": "MEMORY.md", "profile": "PROFILE.md", "agents": "AGENTS.md", "soul": "SOUL.md",
              "dreams": "DREAMS.md", CONVERSATION: "conversations"}
DEFAULT_WEIGHTS = {"DREAMS.md": 0.4, "conversations": 0.5, "other": 0.6}
# The always-on files and the structured entries: what the seed ranks above the daily ledger.
CORE_FILES = (("MEMORY.md", "memory"), ("PROFILE.md", "profile"), ("AGENTS.md", "agents"), ("SOUL.md", "soul"),
              ("structured", "structured"))
RECENCY_LIFT = 1.5  # today's note (or message) weighs up to 1.5 times its file weight


@dataclass(frozen=True)
class SearchHit:
    file: str  # path inside the agent (or `conversations/<id>` for a message)
    line: int  # line of the first highlighted term (0 for a message)
    line_start: int
    line_end: int
    title: str
    snippet: str
    score: float
    kind: str
    agent: str
    owner: str | None = None
    conversation_id: str | None = None
    message_id: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SearchResult:
    query: str
    scope: str
    hits: list[SearchHit]
    mode: str = "keyword"  # "hybrid" when dense retrieval took part
    warnings: list[str] = field(default_factory=list)
    # Hybrid only: {"vectors": chunks in scope with a vector, "chunks": chunks in scope, "complete": bool}
    dense: dict | None = None

    def to_dict(self) -> dict:
        out = {"query": self.query, "scope": self.scope, "mode": self.mode, "warnings": list(self.warnings),
               "hits": [h.to_dict() for h in self.hits]}
        if self.dense is not None:
            out["dense"] = dict(self.dense)
        return out


@dataclass
class _Scored:
    cand: Candidate
    keyword: float = 0.0
    score: float = 0.0
    covered: set[str] = field(default_factory=set)


class SearchService:
    def __init__(
        self,
        index: FileIndex,
        retrievals: RetrievalLog,
        settings: SearchSettings,
        clock: Clock,
        *,
        default_agent: str = "default",
        messages: SourcedLog | None = None,
        dense: DenseRetriever | None = None,
        freshen: Callable[[], None] | None = None,
        logged: Callable[[str, str, str, int], list[Candidate]] | None = None,
    ) -> None:
        self.index = index
        self.retrievals = retrievals
        self.settings = settings
        self.clock = clock
        self.default_agent = default_agent
        self.messages = messages
        self.dense = dense
        # (agent, owner, query, limit) -> candidates of conversation turns the file index holds no
        # copy of (Add/Search's, read from the message index: index/message_hits.py).
        self._logged = logged
        # Called before the first search in this process (a reconcile, when no watcher keeps us fresh).
        self._freshen = freshen

    # -- the search --------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        agent: str | None = None,
        owner: str | None = None,
        scope: str = "all",
        limit: int = DEFAULT_LIMIT,
        record: bool = True,
    ) -> SearchResult:
        agent = agent or self.default_agent
        if scope not in SCOPES:
            raise InvalidInputError(f"unknown search scope {scope!r}: use one of {', '.join(SCOPES)}")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
            raise InvalidInputError(f"search limit {limit!r} is out of range: use 1 to {MAX_LIMIT}")
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError("search query is empty")
        if len(query) > MAX_QUERY_CHARS:
            raise TooLargeError(f"search query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
        if self._freshen is not None:
            freshen, self._freshen = self._freshen, None
            freshen()
        kinds = list(SCOPES[scope])
        filed = self.index.filed_owner(owner)
        owners: list[str | None] = [None] if filed is None else [None, filed]
        if CONVERSATION in kinds and self.messages is not None:
            # Messages may have been logged by another process: catch up (one cheap query if none).
            try:
                self.index.sync_messages(self.messages)
            except Exception as exc:  # the log is optional evidence; files must still be searchable
                log.warning("could not index new conversation messages: %s", exc)
        terms = _query_terms(query)
        warnings: list[str] = []
        if not terms:
            return SearchResult(query, scope, [], warnings=["the query has no searchable words"])
        # Candidates per FTS expression: with near-duplicate notes (50k sections of LoCoMo-like
        # chat) the answer sat below a pool of 30 (Hit@1 0.84 -> 0.98 with the frame words out).
        pool = max(40, limit * 4)
        n_docs, avgdl = self.index.corpus_stats()
        dfs = self.index.doc_freqs(terms)
        cands = self._candidates(_finding_terms(terms), dfs, n_docs, agent=agent, owners=owners, scope=scope,
                                 pool=pool)
        if CONVERSATION in kinds and self._logged is not None and filed is not None:
            try:
                # Only turns holding a query word, as the file index's own match would find: the
                # message index also ranks a turn by its neighbours' words.
                held, words = {c.message_id for c in cands if c.message_id is not None}, set(terms)
                cands += [c for c in self._logged(agent, filed, query, pool)
                          if c.message_id not in held and not words.isdisjoint(c.tokens.split())]
            except Exception as exc:  # the log is optional evidence; files must still be searchable
                warnings.append(f"Add/Search conversations could not be searched ({exc})")
                log.warning("could not search the Add/Search conversations: %s", exc)
        scored = self._keyword_scores(cands, terms, query, dfs, n_docs, avgdl)
        today = self.clock.now().date()
        core = min(self._weight_of(rel, kind) for rel, kind in CORE_FILES)
        for s in scored:  # before fusion: the keyword side fused is the keyword ranking as shown
            s.score *= self._factor(s.cand, today, core)
        mode, dense_state = "keyword", None
        if self.dense is not None and self.settings.dense_weight > 0:
            try:
                # GLOBAL files are every agent's: one ranking over both scopes, the query embedded once.
                ranked = self.dense.rank(query, agent=agent, owners=owners, kinds=kinds,
                                         also=[(GLOBAL, [None])] if agent != GLOBAL else [])
            except Exception as exc:
                warnings.append(f"dense retrieval failed ({exc}); showing keyword results only")
                log.warning("dense retrieval failed, keyword results only: %s", exc)
            else:
                scored = self._fuse(scored, ranked.cosine, terms)
                mode = "hybrid"
                dense_state = {"vectors": len(ranked.cosine), "chunks": ranked.total, "complete": ranked.complete}
                if not ranked.complete:
                    warnings.append(complete_note(len(ranked.cosine), ranked.total))
        scored.sort(key=lambda s: (-s.score, s.cand.rel, s.cand.line_start))
        hits = [self._hit(s, set(terms)) for s in scored[:limit]]
        if record:
            self._record(hits, query)
        return SearchResult(query, scope, hits, mode=mode, warnings=warnings, dense=dense_state)

    def _candidates(
        self, terms: list[str], dfs: dict[str, int], n_docs: int, *, agent: str, owners: list[str], scope: str,
        pool: int,
    ) -> list[Candidate]:
        """Candidate chunks, with the FTS5 work bounded by CANDIDATE_BUDGET matches.

        Ranking every chunk that holds a very common term costs time in proportion to the corpus
        (tens of ms at 100k chunks) and such chunks rank low anyway. So: OR the rarest terms whose
        document frequencies add up to the budget; add the chunks holding *every* term when that
        intersection is expected to be small; the common terms still count when the candidates are
        scored. A query made only of very common terms takes the newest chunks holding all of them
        (then the rarest one) instead of ranking them all."""
        order = sorted(terms, key=lambda t: dfs.get(t, 0))
        rare: list[str] = []
        total = 0
        for t in order:
            df = dfs.get(t, 0)
            if total + df > CANDIDATE_BUDGET:
                break
            rare.append(t)
            total += df
        found: dict[int, Candidate] = {}

        scopes = [(agent, owners), (GLOBAL, [None])] if agent != GLOBAL else [(agent, owners)]

        def add(expr: str, ranked: bool, at_most: int | None = None, at_least: int = 0) -> None:
            for c in self.index.match(expr, scopes=scopes, scope=scope, limit=pool, ranked=ranked,
                                      at_most=at_most, at_least=at_least):
                found.setdefault(c.id, c)

        if any(dfs.get(t, 0) for t in rare):  # the document frequencies bound how many chunks match
            add(fts_query(rare), ranked=True, at_most=total, at_least=max(dfs.get(t, 0) for t in rare))
        present = [t for t in terms if dfs.get(t, 0)]
        if len(present) > 1:  # the chunks holding every word: few, and the best the OR may crowd out
            expected = n_docs * math.prod(dfs[t] / max(n_docs, 1) for t in present)
            add(" AND ".join(_quote(t) for t in present), ranked=expected <= CANDIDATE_BUDGET,
                at_most=min(dfs[t] for t in present))
        if not found and present and not rare:
            add(_quote(order[-len(present)]), ranked=False)
        return list(found.values())

    def _keyword_scores(
        self, cands: list[Candidate], terms: list[str], query: str, dfs: dict[str, int], n_docs: int, avgdl: float
    ) -> list[_Scored]:
        if not cands:
            return []
        n_docs = max(n_docs, 1)
        avgdl = avgdl or 1.0
        idf = {t: math.log(1 + (n_docs - dfs.get(t, 0) + 0.5) / (dfs.get(t, 0) + 0.5)) for t in terms}
        idf_total = sum(idf.values()) or 1.0
        words = query.lower().split()
        # The whole query as it reads, in any spacing: what `phrase in " ".join(text.lower().split())`
        # found, without normalising every candidate's text.
        phrase = re.compile(r"\s+".join(map(re.escape, words))) if len(" ".join(words)) >= 2 else None
        keys = [(t, f" {t} ", idf[t]) for t in terms]
        multiword = len(terms) > 1
        out = []
        for c in cands:
            # The indexed body and title tokens (re-tokenizing every candidate's title cost more than
            # the rest); only the query terms are counted, the length is every token's. A body token
            # is counted in the space-joined string with every space doubled, so that each token is
            # " t " whole even next to itself: no list of a long chunk's tokens per candidate.
            body, title = c.tokens, c.title_tokens.split()
            spaced = "  " + body.replace(" ", "  ") + "  "
            dl = ((body.count(" ") + 1 if body else 0) + TITLE_TF * len(title)) or 1
            verbatim = phrase is not None and phrase.search(c.text.lower()) is not None
            # Length normalisation discounts a word in a long chunk because it is likelier there by
            # chance; a phrase of several query words found verbatim is not, and discounting it sank
            # the long sections of core files below a one-line daily note saying the same. Such a
            # chunk is normalised as the shortest would be: equal in every file, and never below a
            # chunk holding the same words apart.
            norm = K1 * (1 - B) if verbatim and multiword else K1 * (1 - B + B * dl / avgdl)
            rel = 0.0
            covered = set()
            for t, key, weight in keys:
                tf = spaced.count(key) + (TITLE_TF * title.count(t) if title else 0)
                if tf:
                    covered.add(t)
                    rel += weight * tf * (K1 + 1) / (tf + norm)
            coverage = sum(idf[t] for t in covered) / idf_total
            score = rel * (1 + COVERAGE_BONUS * coverage)
            if verbatim:
                score *= PHRASE_BONUS
            out.append(_Scored(c, keyword=score, score=score, covered=covered))
        out.sort(key=lambda s: -s.keyword)
        return out

    def _fuse(self, keyword: list[_Scored], cosine: list[tuple[int, float]], terms: list[str]) -> list[_Scored]:
        by_id = {s.cand.id: s for s in keyword}
        assert self.dense is not None
        lexical = [(s.cand.id, s.score) for s in keyword]
        weight = self.settings.dense_weight
        weight *= self.dense.gate.update(lexical, cosine) if weight < 1 else 1.0  # 1: dense only (benches)
        if weight <= 0:
            return keyword  # the gate is shut: exactly the keyword ranking
        fused = fuse(lexical, cosine, weight, extra=self.dense.extra)
        missing = [cid for cid, _ in fused if cid not in by_id]
        for c in self.index.chunks_by_ids(missing):
            by_id[c.id] = _Scored(c, covered={t for t in terms if t in set(c.tokens.split())})
        out = []
        for cid, value in fused:
            s = by_id.get(cid)
            if s is not None:  # a chunk deleted between the two rankings
                s.score = value
                out.append(s)
        return out

    def _weight_of(self, rel: str, kind: str) -> float:
        weights = self.settings.file_weights
        if rel in weights:
            return weights[rel]
        key = _KIND_KEYS.get(kind, kind)
        if key in weights:
            return weights[key]
        if kind in weights:
            return weights[kind]
        return DEFAULT_WEIGHTS.get(key, DEFAULT_WEIGHTS["other"])

    def _factor(self, c: Candidate, today: date, core: float) -> float:
        """The file weight, lifted by recency for a dated hit (see the module's docstring)."""
        weight = self._weight_of(c.rel, c.kind)
        fresh = self._freshness(c, today)
        if not fresh:
            return weight
        top = RECENCY_LIFT * weight
        if weight < core:  # a person who weighs notes at or above a core file keeps the full lift
            top = min(top, core)
            # Today's note reaches `top` exactly: just below it, so an equal match still ranks the
            # core file first and the float product cannot land a hair above.
            return min(weight + (top - weight) * fresh, math.nextafter(core, 0.0))
        return weight + (top - weight) * fresh

    def _freshness(self, c: Candidate, today: date) -> float:
        """1 for today, halving every `daily-recency-half-life-days`; 0 for an undated hit."""
        if c.kind == "daily":
            day = daily_date(c.rel)
        elif c.kind == CONVERSATION and c.ts_ms:
            day = datetime.fromtimestamp(c.ts_ms / 1000, self.clock.tz).date()
        else:
            return 0.0
        if day is None:
            return 0.0
        age = max(0, (today - day).days)
        return 2 ** (-age / self.settings.daily_recency_half_life_days)

    def _hit(self, s: _Scored, terms: set[str]) -> SearchHit:
        c = s.cand
        snip = make_snippet(c.text, terms)
        line = c.line_start
        if snip.offset > 0 and c.kind != CONVERSATION:
            line += c.text.count("\n", 0, snip.offset)
        return SearchHit(
            file=c.rel, line=line, line_start=c.line_start, line_end=c.line_end, title=c.title,
            snippet=snip.text, score=round(s.score, 6), kind=c.kind, agent=c.agent, owner=c.owner,
            conversation_id=c.conversation_id, message_id=c.message_id,
        )

    def _record(self, hits: list[SearchHit], query: str) -> None:
        # Conversation messages are not memory sections: Dreaming scores files, so only file hits count.
        records = [
            RetrievalRecord(h.agent, h.owner, h.file, h.title, h.line_start, h.line_end)
            for h in hits
            if h.kind != CONVERSATION
        ]
        try:
            self.retrievals.record(records, query, self.clock.now())
        except Exception as exc:  # a search answer must not fail because its bookkeeping did
            log.warning("could not record retrievals: %s", exc)

    # -- evidence for Dreaming ---------------------------------------------------------------------

    def retrieval_hits(self, agent: str, *, owner: str | None = None, since: datetime) -> list[RetrievalHit]:
        """How often each section was returned by a search since `since` (most retrieved first).

        `owner=None` covers the agent's shared files; an owner key covers that owner's personal files
        (with owner isolation off every file is shared, so the owner key is ignored)."""
        return self.retrievals.hits(agent, self.index.filed_owner(owner), since)


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


# The frame of a question about what was said ("what did Mira say about ...", "when did I mention
# ..."): the notes hold what was said, rarely the verb, so as a search word it only pulls in every
# note that happens to use it (and, in the AND of all the words, keeps the answer out).
_FRAMING = frozenset(tokenize("say said says tell told talk talked mention mentioned"))


def _query_terms(query: str) -> list[str]:
    tokens = list(dict.fromkeys(tokenize(query)))
    content = [t for t in tokens if t not in STOPWORDS]
    return content or tokens


def _finding_terms(terms: list[str]) -> list[str]:
    """The terms that choose candidates: without a question's frame (`_FRAMING`), which still
    counts when the candidates are scored."""
    return [t for t in terms if t not in _FRAMING] or terms
