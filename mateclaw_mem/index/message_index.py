"""Per-message search over the conversation log, in `workspace/.mateclaw/messages.db`.

Derived data: everything here is rebuilt from `log.db` by `rebuild(log)`, and `sync(log)` catches
up on whatever the log holds beyond the stored watermark (so a crash between the log commit and
indexing loses nothing - the next sync indexes it). Its own file so it never contends with the
workspace file index in `index.db`.

Each message is one document with fields (all tokenized by `index.tokenizer`):

- `body`: the message's own text (without its "Speaker:" prefix).
- `ctx`:  the turn just before it, when that turn is another speaker's question - an answer such
  as "Luna and Oliver!" shares no words with "What are your cats called?".
- `nb`:   the neighbouring turns (previous and next), low weight, for recall.
- `dt`:   month, year and weekday of the message time, so "in May 2023" can match.

FTS5 stores the field tokens; search itself runs on a per-owner in-memory view (term postings,
statistics, parsed turns) kept up to date incrementally: the candidates are the postings of the
query terms, and the ranking is BM25F computed in Python, because FTS5's built-in bm25() has fixed
k1/b and computes IDF over all owners together. See `Ranking` for the knobs and why each exists;
`index.lexicon` bridges category words and their members ("pets" ~ "turtle").
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import math
import re
import sqlite3
import threading
import uuid
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from mateclaw_mem.db import connect, immediate, migrated, run_once
from mateclaw_mem.index.lexicon import related
from mateclaw_mem.index.sources import FactSource, LoggedMessage, MessageSource, StoredFact
from mateclaw_mem.index.tokenizer import MAX_QUERY_TERMS, STOPWORDS, TOKENIZER_VERSION, tokenize
from mateclaw_mem.redaction import redact

_META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"


def _tables(s: str = "") -> str:
    """The derived tables; `s` is a suffix for a copy built aside (see `MessageIndex.rebuild`)."""
    return f"""
CREATE TABLE IF NOT EXISTS docs{s} (
    id INTEGER PRIMARY KEY,            -- the log's message id
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    role TEXT NOT NULL,
    speaker TEXT,                      -- parsed "Name:" prefix, NULL when there was none
    content TEXT NOT NULL,             -- the message exactly as stored in the log
    ts_ms INTEGER NOT NULL,
    is_question INTEGER NOT NULL,
    body_len INTEGER NOT NULL,
    ctx_len INTEGER NOT NULL,
    nb_len INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS docs_by_owner{s} ON docs{s} (agent, owner, id);
CREATE INDEX IF NOT EXISTS docs_by_conversation{s} ON docs{s} (agent, owner, conversation_id, id);
CREATE VIRTUAL TABLE IF NOT EXISTS fts{s} USING fts5(okey, body, ctx, nb, dt, tokenize='unicode61');
"""


_SCHEMA = _META + _tables()
_REDACTED = "redacted:messages.db"  # `meta` marker (and count) of the one-time redaction in place

_FIELDS = ("body", "ctx", "nb", "dt")
# "Caroline: text" - a short name before a colon. Up to four words and no sentence punctuation,
# so "Note: buy milk" is a false positive we accept (it only changes how the line is displayed).
_SPEAKER_RE = re.compile(r"^([^\s:?!.,][^:?!\n]{0,39}?):\s+(?=\S)")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
           "october", "november", "december")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def split_speaker(content: str) -> tuple[str | None, str]:
    """("Caroline", "hi") for "Caroline: hi"; (None, content) when there is no speaker prefix."""
    m = _SPEAKER_RE.match(content)
    if m and len(m.group(1).split()) <= 4:
        return m.group(1).strip(), content[m.end() :]
    return None, content


def _is_question(text: str) -> bool:
    # Image captions are appended as "[shares image: ...]"; the turn is a question when its
    # spoken part ends with a question mark.
    spoken = re.sub(r"\[shares image:[^\]]*\]\s*$", "", text).rstrip()
    return spoken.endswith("?")


def _saturate(
    c: tuple[int, int, int, int], lens: tuple[int, int, int, int], w: tuple[float, ...], b: tuple[float, ...],
    k1: float, avg: tuple[float, ...],
) -> float:
    """BM25F: field-weighted, length-normalised term frequency, saturated."""
    tf = sum(w[f] * c[f] / (1.0 - b[f] + b[f] * lens[f] / avg[f]) for f in range(4) if c[f])
    return tf / (k1 + tf) if tf > 0 else 0.0


_AVG_STEP = 1.01  # average field lengths are used in 1% steps (see `_OwnerView.apply`)

# Facts (model mode) live in the same documents table with ids from here on, so one view, one
# set of statistics and one ranking cover both; log message ids never get near 2**40.
FACT_BASE = 1 << 40


def _date_tokens(ts_ms: int) -> list[str]:
    d = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    return tokenize(f"{d.day} {_MONTHS[d.month - 1]} {d.year} {_WEEKDAYS[d.weekday()]}")


def owner_key(agent: str, owner: str) -> str:
    """One FTS token per (agent, owner): exact, so owners sharing a prefix never match each other."""
    return "k" + hashlib.sha256(f"{agent}\x00{owner}".encode()).hexdigest()[:32]


# Words that place an event in time. A "when" question's answer usually sits in a turn that says
# "yesterday", "last week" or "in May" - relative to the message date the answer model sees.
_TEMPORAL = frozenset(
    tokenize(
        "yesterday today tomorrow tonight ago last next week weekend weeks month months year years day days"
        " morning evening night recently soon earlier later since before after until"
        " " + " ".join(_MONTHS) + " " + " ".join(_WEEKDAYS)
    )
) - STOPWORDS
_NUMBER_RE = re.compile(
    r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty"
    r"|forty|fifty|hundred|thousand|million|dozen|couple|several|once|twice)\b",
    re.IGNORECASE,
)
_COUNT_RE = re.compile(r"\bhow (?:many|much|old|often|far)\b", re.IGNORECASE)
_WHO_RE = re.compile(r"\b(?:who|whom|whose|where)\b", re.IGNORECASE)
_CAPITAL_RE = re.compile(r"\b[A-Z][a-z]+(?:'s)?\b")


def _question_share(text: str) -> float:
    """How much of a turn is asking: "Oscar, my guinea pig. How are yours?" is mostly an answer."""
    spoken = re.sub(r"\[shares image:[^\]]*\]", "", text)
    asked = total = 0
    for sentence in re.findall(r"[^.!?]+[.!?]*", spoken):
        n = len(sentence.split())
        total += n
        if sentence.rstrip().endswith("?"):
            asked += n
    return asked / total if total else 0.0


def _proper_names(text: str) -> frozenset[str]:
    """Capitalised words not at a sentence start ("we met Matt at the Chicago show"): a cheap
    stand-in for named entities, which is what who/where questions ask for."""
    spoken = re.sub(r"\[shares image:[^\]]*\]", "", text)
    out: set[str] = set()
    for m in _CAPITAL_RE.finditer(spoken):
        before = spoken[: m.start()].rstrip()
        if not before or before[-1] in ".!?:;\"'(-\u2013\u2014":
            continue  # a sentence start says nothing about the word
        out.update(tokenize(m.group(0)))
    return frozenset(out)


_WHEN_RE = re.compile(
    r"\b(when|how long|what (?:year|month|day|date|time)|which (?:year|month|day))\b", re.IGNORECASE
)


@dataclass(frozen=True)
class Ranking:
    """Ranking knobs. Defaults were chosen on LoCoMo dev as whole features, not per question, and
    kept only when they helped on both halves of a conversation split (tune conv-26/30/41, confirm
    conv-42/43); `scripts/bench/aml_inprocess.py --set name=value` measures a change in seconds."""

    k1: float = 1.2
    # Per-field length normalisation. Short chat turns: a 6-word "Thanks, that's sweet!" must not
    # outrank an informative 40-word turn just for being short, so b is well below the usual 0.75.
    # (body 0.3 before the echo penalty took over part of that job; 0.35-0.5 is now a plateau.)
    b: dict[str, float] = field(default_factory=lambda: {"body": 0.4, "ctx": 0.3, "nb": 0.3, "dt": 0.0})
    # ctx (the question this turn answers) counts as much as the turn itself; neighbours only a
    # little (they add recall but blur which turn of an exchange is the answer).
    weights: dict[str, float] = field(default_factory=lambda: {"body": 1.0, "ctx": 1.0, "nb": 0.1, "dt": 0.5})
    question_penalty: float = 0.6  # a turn that only asks rarely holds the answer
    # Down-weighting by `_Doc.echo` (score x (1 - echo_penalty x echo)). LoCoMo dev: Hit@1 +4/+2
    # and MRR up on both halves, Hit@10 -2 on the tune half and +6 on the confirm half.
    echo_penalty: float = 0.4
    # "share": the penalty scales with how much of the turn is asking ("Oscar, my guinea pig. How
    # are yours?" is mostly an answer); "last": all or nothing on whether the turn ends with '?'.
    question_mode: str = "share"
    speaker_boost: float = 1.2  # the question names who said it
    # With two speakers named, only those named as subjects (not as "X's") get the speaker boost.
    possessive_rule: bool = True
    drop_speaker_names: bool = True  # speaker names are not search terms (see `search`)
    when_boost: float = 1.5  # a "when"/"how long" question and a turn that mentions time
    # Answer types: "how many" wants a number, "who"/"where" a name (other than the speakers').
    count_boost: float = 1.2
    name_boost: float = 1.2
    option_weight: float = 0.3  # multiple-choice texts: hints, not the question
    session_weight: float = 0.3  # boost for turns of the sessions that match best overall
    neighbour_weight: float = 0.3  # share of the best neighbouring turn's score a turn inherits
    # Share a turn inherits from the same speaker's turn two steps away - the speaker's own thread
    # across the other's reaction ("I opened my studio!" / "How do you feel?" / "Excited!"). Such a
    # turn never overtakes the one it inherits from. LoCoMo dev: Hit@10 +8 on the tune half, +1 on
    # the confirm half, MRR up on both.
    thread_weight: float = 0.4
    prf_docs: int = 5  # pseudo-relevance feedback: expand from the top N turns...
    prf_terms: int = 10  # ...with this many of their strongest terms...
    prf_weight: float = 0.15  # ...each weighted this much relative to a query term
    prf_requery: bool = False  # expansion terms also fetch new candidates (not only reorder)
    # Category lexicon (`index.lexicon`): "pets" also matches "turtle" (down), "violin" also
    # matches "instrument" (up). Low weights: a related word is weaker evidence than the word itself.
    lexicon_down: float = 0.1
    lexicon_up: float = 0.0
    # Below the first `tail_start` results the order comes from this ranking with these overrides
    # ({} = one ranking for all). The head is read first and must be precise; the tail is read
    # under a token budget and should recall: wider lexicon expansion both ways, neighbouring turns
    # as text rather than as inherited score, a stronger pull to the named speaker's own turns.
    tail_start: int = 10
    tail_overrides: dict[str, object] = field(default_factory=lambda: {
        "weights": {"body": 1.0, "ctx": 1.0, "nb": 0.3, "dt": 0.5},
        "lexicon_down": 0.3, "lexicon_up": 0.15, "speaker_boost": 1.5,
        "neighbour_weight": 0.0,  # the heavier nb field already carries the neighbours
        "session_weight": 0.0,  # recall reaches into every session, not only the best-matching ones
    })
    max_candidates: int = 1000  # turns kept after word matching (see `_rank`); 0 = all
    pad_neighbours: int = 30  # when fewer turns match than asked for, add the surroundings of this many...
    pad_distance: int = 2  # ...up to this many turns either side


@dataclass(frozen=True)
class _Turn:
    """A stored turn fed back through `_add_batch` (fits `LoggedMessage`)."""

    id: int
    agent: str
    owner: str
    conversation_id: str
    role: str
    content: str
    ts_ms: int
    memoryless: bool = False


@dataclass(frozen=True)
class Hit:
    id: int
    agent: str
    owner: str
    conversation_id: str
    role: str
    speaker: str | None
    content: str
    ts_ms: int
    score: float


@dataclass
class _Pending:
    """A row being indexed in this batch (its `nb` may still grow when the next turn arrives)."""

    msg: LoggedMessage
    speaker: str | None
    body: list[str]
    ctx: list[str]
    nb: list[str]
    is_question: bool


@dataclass
class _Doc:
    id: int
    speaker: str | None
    is_question: bool
    has_time: bool
    question_share: float  # share of the spoken words that are in sentences ending with '?'
    has_number: bool  # digits or a number word: what "how many" questions want
    names: frozenset[str]  # capitalised words inside sentences (tokenized): who/where answers
    tf: dict[str, tuple[int, int, int, int]]  # term -> count in (body, ctx, nb, dt)
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


def _echo(d: _Doc, prev: _Doc) -> float:
    # Repeating a *question's* words is how an answer starts ("How's the store?" / "The store's
    # doing great"): only a statement's words make a reaction.
    if prev.speaker == d.speaker or prev.question_share >= 0.5:
        return 0.0
    mine = [t for t, c in d.tf.items() if c[0] and t not in STOPWORDS]
    if not mine:
        return 0.0
    return sum(1 for t in mine if t in prev.tf and prev.tf[t][0]) / len(mine)


class _OwnerView:
    """One owner's parsed documents and statistics, cached in memory and kept up to date in place.

    Parsing field text into term counts is what made pure-SQL ranking slow (10+ ms per search).
    After an Add only the new rows (and the previous tail turn of each touched conversation, whose
    `nb` field grew) are parsed and folded into the statistics, so interleaved Add/Search on a large
    owner costs O(new messages), not O(owner's messages). Mutated only with the index lock held.
    """

    def __init__(self) -> None:
        self.last_id = 0  # last message id (facts are counted apart: their ids start at FACT_BASE)
        self.last_fact = FACT_BASE
        self.by_id: dict[int, _Doc] = {}
        self.n = 0
        self.len_sum = [0, 0, 0, 0]
        self.avg: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)
        self.df: Counter[str] = Counter()  # body document frequency
        self.speakers: dict[str, frozenset[str]] = {}  # speaker -> the tokens of their name
        self.tail: dict[str, int] = {}  # conversation -> its last doc id
        # term -> the docs holding it in any field: scoring walks the query terms' postings
        # instead of every candidate x every query term.
        self.postings: dict[str, dict[int, _Doc]] = {}
        # term -> ranking knobs -> {doc id: saturated BM25F term frequency}, filled lazily per query
        # term. An Add drops only the terms of the turns it touched, unless the (1%-stepped) average
        # field lengths moved: then everything. A long history's search after an Add stays warm.
        self.sat: dict[str, dict[tuple[object, ...], dict[int, float]]] = {}
        self.stamp: tuple[int, int] | None = None  # (data_version, own writes) when last checked
        self.generation: str | None = None  # the index build it was parsed from (meta 'generation')

    def _remove_stats(self, d: _Doc) -> None:
        self.n -= 1
        for i in range(4):
            self.len_sum[i] -= d.lens[i]
        self.df.subtract(t for t, c in d.tf.items() if c[0])
        for t in d.tf:
            docs = self.postings[t]
            del docs[d.id]
            if not docs:
                del self.postings[t]

    def _add_stats(self, d: _Doc) -> None:
        self.n += 1
        for i in range(4):
            self.len_sum[i] += d.lens[i]
        self.df.update(t for t, c in d.tf.items() if c[0])
        for t in d.tf:
            self.postings.setdefault(t, {})[d.id] = d

    def apply(self, docs: list[_Doc]) -> None:
        """Fold parsed docs in: ids already known replace their old parse, new ids are appended."""
        dropped: dict[int, _Doc] = {}  # replaced parses: their terms may need their entries dropped
        for d in sorted(docs, key=lambda d: d.id):
            old = self.by_id.get(d.id)
            if old is not None:
                dropped[d.id] = old
                self._remove_stats(old)
                d.prev, d.next = old.prev, old.next
            elif d.id >= FACT_BASE:
                self.last_fact = d.id  # a fact is no turn: no neighbours
            else:
                # New ids are always above every known id (the index appends in log order).
                prev = self.tail.get(d.conversation_id)
                if prev is not None:
                    self.by_id[prev].next = d.id
                    d.prev = prev
                self.tail[d.conversation_id] = d.id
                self.last_id = d.id
            self.by_id[d.id] = d
            if d.prev is not None:
                d.echo = _echo(d, self.by_id[d.prev])
            self._add_stats(d)
            if d.speaker and d.speaker not in self.speakers:
                self.speakers[d.speaker] = frozenset(tokenize(d.speaker))
        relink: set[int] = set()
        for d in docs:
            relink.add(d.id)
            if d.prev is not None:
                relink.add(d.prev)
                pp = self.by_id[d.prev].prev
                if pp is not None:
                    relink.add(pp)
        for i in relink:
            self._relink(self.by_id[i])
        # Stepped so that a single Add rarely moves it (which would drop every cached term); a
        # fresh view over the same turns computes the same steps, so scores stay exact.
        avg = tuple(_AVG_STEP ** round(math.log(max(self.len_sum[i] / max(self.n, 1), 1.0), _AVG_STEP))
                    for i in range(4))
        if avg != self.avg:
            self.avg = avg
            self.sat.clear()
            return
        # Each entry depends only on its own turn: refresh the entries of the turns just parsed.
        for d in docs:
            old_terms = dropped[d.id].tf.keys() - d.tf.keys() if d.id in dropped else ()
            for t in itertools.chain(d.tf, old_terms):
                per_ranking = self.sat.get(t)
                if per_ranking is None:
                    continue
                c = d.tf.get(t)
                for (k1, w, b), got in per_ranking.items():
                    v = _saturate(c, d.lens, w, b, k1, avg) if c else 0.0
                    if v > 0:
                        got[d.id] = v
                    else:
                        got.pop(d.id, None)

    def _relink(self, x: _Doc) -> None:
        docs = self.by_id
        x.around = tuple(j for j in (x.prev, x.next) if j is not None)
        two = (docs[x.prev].prev if x.prev is not None else None, docs[x.next].next if x.next is not None else None)
        x.thread = tuple(k for k in two if k is not None and docs[k].speaker == x.speaker)

    def saturated(self, term: str, ranking: Ranking) -> dict[int, float]:
        """{doc id: tf / (k1 + tf)} for `term`, tf being the field-weighted, length-normalised BM25F
        count. Cached until the statistics change; `ranking` is the index's (fixed) ranking."""
        k1, avg = ranking.k1, self.avg
        w = tuple(ranking.weights[f] for f in _FIELDS)
        b = tuple(ranking.b[f] for f in _FIELDS)
        key = (k1, w, b)
        per_ranking = self.sat.setdefault(term, {})
        got = per_ranking.get(key)
        if got is None:
            got = {}
            for i, d in self.postings.get(term, {}).items():
                v = _saturate(d.tf[term], d.lens, w, b, k1, avg)
                if v > 0:
                    got[i] = v
            per_ranking[key] = got
        return got

    def idf(self, term: str) -> float:
        df = self.df.get(term, 0)
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))


class MessageIndex:
    """Thread-safe (one connection behind a lock); `sync` is idempotent and crash-safe."""

    _MAX_VIEWS = 64  # owners kept parsed in memory (least recently used evicted)

    def __init__(self, db_path: Path, ranking: Ranking | None = None) -> None:
        self.path = db_path
        self.ranking = ranking or Ranking()
        self._lock = threading.RLock()
        self._conn = connect(db_path)
        self._views: OrderedDict[tuple[str, str], _OwnerView] = OrderedDict()
        self._writes = 0  # commits through this connection (data_version only counts others')
        with self._lock:
            self._conn.executescript(_SCHEMA)
            if self._conn.execute("SELECT 1 FROM docs LIMIT 1").fetchone() is None:
                self._set_tokenizer()
        run_once(self._conn, self._lock, _REDACTED, self._redact_stored)

    def _redact_stored(self, conn: sqlite3.Connection) -> int:
        """Redact, in place, what an older version indexed raw (the log holds the same turns and is
        redacted by its own migration). A turn's words also sit in its neighbours' `ctx`/`nb`
        fields, so each conversation holding a secret is indexed again whole; a fact stands alone
        (its row is rewritten the way `_add_facts` writes one).
        Returns how many documents held one."""
        dirty = [(r["id"], r["agent"], r["owner"], r["conversation_id"])
                 for r in conn.execute("SELECT id, agent, owner, conversation_id, content FROM docs")
                 if redact(r["content"]) != r["content"]]
        for doc_id, *_ in (d for d in dirty if d[0] >= FACT_BASE):
            text = redact(conn.execute("SELECT content FROM docs WHERE id = ?", (doc_id,)).fetchone()[0])
            body = tokenize(text)
            conn.execute("UPDATE docs SET content = ?, body_len = ? WHERE id = ?", (text, len(body), doc_id))
            conn.execute("UPDATE fts SET body = ?, ctx = '', nb = '' WHERE rowid = ?", (" ".join(body), doc_id))
        for key in dict.fromkeys(tuple(d[1:]) for d in dirty if d[0] < FACT_BASE):
            where = "agent = ? AND owner = ? AND conversation_id = ? AND id < ?"
            turns = [_Turn(r["id"], r["agent"], r["owner"], r["conversation_id"], r["role"], redact(r["content"]),
                           r["ts_ms"])
                     for r in conn.execute(f"SELECT * FROM docs WHERE {where} ORDER BY id", (*key, FACT_BASE))]
            conn.executemany("DELETE FROM fts WHERE rowid = ?", [(t.id,) for t in turns])
            conn.execute(f"DELETE FROM docs WHERE {where}", (*key, FACT_BASE))
            self._add_batch(turns)
        if dirty:
            # Deleted tokens stay in FTS5's segments until they are merged: merge them now. A new
            # generation makes other processes parse their cached views (old text) afresh.
            conn.execute("INSERT INTO fts (fts) VALUES ('optimize')")
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('generation', ?)", (uuid.uuid4().hex,))
        return len(dirty)

    def redacted_on_migration(self) -> int | None:
        """Documents the one-time migration redacted in place (for `status`); None: not run."""
        with self._lock:
            return migrated(self._conn, _REDACTED).get("")

    # ------------------------------------------------------------------ indexing

    def _set_tokenizer(self) -> None:
        with self._conn:
            self._conn.execute(
                "INSERT INTO meta (key, value) VALUES ('tokenizer', ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (TOKENIZER_VERSION,),
            )

    def stale_tokenizer(self) -> str | None:
        """The tokenizer this index was built with when it is not the current one (its tokens
        would silently miss the current query tokens: rebuild), else None."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'tokenizer'").fetchone()
            if row is not None and row["value"] == TOKENIZER_VERSION:
                return None
            if self._conn.execute("SELECT 1 FROM docs LIMIT 1").fetchone() is None:
                return None
            return row["value"] if row is not None else "unversioned"

    def watermark(self) -> int:
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
        return int(row["value"]) if row else 0

    def sync(self, log: MessageSource, *, batch: int = 1000) -> int:
        """Index every log message after the watermark; returns how many were indexed."""
        done = 0
        with self._lock:
            while True:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    # Read the watermark inside the write transaction: another process may have
                    # indexed since we last looked.
                    row = self._conn.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
                    msgs = log.since(int(row["value"]) if row else 0, limit=batch)
                    if msgs:
                        self._add_batch(msgs)
                        self._conn.execute(
                            "INSERT INTO meta (key, value) VALUES ('watermark', ?)"
                            " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                            (str(msgs[-1].id),),
                        )
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
                self._writes += bool(msgs)
                done += len(msgs)
                if len(msgs) < batch:
                    return done

    def rebuild(self, log: MessageSource, facts: FactSource | None = None, *, batch: int = 1000) -> int:
        """Index the whole log (and the facts, when given) again, into tables built aside and swapped
        in by one transaction: until then every search - here, or in another process sharing the
        file - reads the complete old index, never a half-built one. Returns what was indexed."""
        s = "_new"
        with self._lock:
            self._conn.executescript(f"DROP TABLE IF EXISTS docs{s}; DROP TABLE IF EXISTS fts{s};" + _tables(s))
        last, last_fact, done = 0, 0, 0
        while True:  # the bulk, in batches, releasing the lock so searches and Adds go on meanwhile
            with immediate(self._conn, self._lock):
                msgs = log.since(last, limit=batch)
                self._add_batch(msgs, s)
            if msgs:
                last, done = msgs[-1].id, done + len(msgs)
            if len(msgs) < batch:
                break
        with self._lock:
            with immediate(self._conn, self._lock):
                # Whatever was logged (and facts extracted) since the last batch, then the swap.
                while msgs := log.since(last, limit=batch):
                    self._add_batch(msgs, s)
                    last, done = msgs[-1].id, done + len(msgs)
                while facts is not None and (found := facts.facts_since(last_fact, limit=batch)):
                    self._add_facts(found, s)
                    last_fact, done = found[-1].id, done + len(found)
                conn = self._conn
                for t in ("fts", "docs"):
                    conn.execute(f"DROP TABLE IF EXISTS {t}")
                for name in ("docs_by_owner", "docs_by_conversation"):
                    conn.execute(f"DROP INDEX IF EXISTS {name}{s}")
                conn.execute(f"ALTER TABLE docs{s} RENAME TO docs")
                conn.execute(f"ALTER TABLE fts{s} RENAME TO fts")
                for statement in _tables().split(";"):
                    if "CREATE INDEX" in statement:
                        conn.execute(statement)
                conn.execute("DELETE FROM meta WHERE key NOT LIKE 'redacted:%'")  # migrations stay done
                conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                                 [("watermark", str(last)), ("fact_watermark", str(last_fact)),
                                  ("tokenizer", TOKENIZER_VERSION), ("generation", uuid.uuid4().hex)])
            self._views.clear()
            self._writes += 1
        return done

    def sync_facts(self, facts: FactSource, *, batch: int = 1000) -> int:
        """Index every stored fact after the fact watermark; returns how many were indexed.

        A fact is a document like a turn (body = its text, dt = its source time) with id
        FACT_BASE + fact id; its speaker is the speaker of its first source turn, so the speaker
        boost applies to it too. Call after `sync`: the source turns must be indexed.
        """
        done = 0
        with self._lock:
            while True:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    row = self._conn.execute("SELECT value FROM meta WHERE key = 'fact_watermark'").fetchone()
                    batch_facts = facts.facts_since(int(row["value"]) if row else 0, limit=batch)
                    self._add_facts(batch_facts)
                    if batch_facts:
                        self._conn.execute(
                            "INSERT INTO meta (key, value) VALUES ('fact_watermark', ?)"
                            " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                            (str(batch_facts[-1].id),),
                        )
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
                self._writes += bool(batch_facts)
                done += len(batch_facts)
                if len(batch_facts) < batch:
                    return done

    def _add_facts(self, found: Sequence[StoredFact], s: str = "") -> None:
        for f in found:
            src = self._conn.execute(
                f"SELECT speaker FROM docs{s} WHERE id = ?", (f.source_ids[0],)
            ).fetchone() if f.source_ids else None
            body = tokenize(f.text)
            self._conn.execute(
                f"INSERT INTO docs{s} (id, agent, owner, conversation_id, role, speaker, content, ts_ms,"
                " is_question, body_len, ctx_len, nb_len) VALUES (?, ?, ?, ?, 'fact', ?, ?, ?, 0, ?, 0, 0)",
                (FACT_BASE + f.id, f.agent, f.owner, f.conversation_id, src["speaker"] if src else None,
                 f.text, f.ts_ms, len(body)),
            )
            self._conn.execute(
                f"INSERT INTO fts{s} (rowid, okey, body, ctx, nb, dt) VALUES (?, ?, ?, '', '', ?)",
                (FACT_BASE + f.id, owner_key(f.agent, f.owner), " ".join(body), " ".join(_date_tokens(f.ts_ms))),
            )

    def _add_batch(self, msgs: Sequence[LoggedMessage], s: str = "") -> None:
        """Index `msgs` into docs{s}/fts{s}; the caller holds the lock and a write transaction."""
        conn = self._conn
        last: dict[tuple[str, str, str], _Pending | sqlite3.Row | None] = {}
        pending: list[_Pending] = []
        grown: dict[int, list[str]] = {}  # already indexed turns whose next neighbour arrived now
        for m in msgs:
            key = (m.agent, m.owner, m.conversation_id)
            if key not in last:
                last[key] = conn.execute(
                    f"SELECT d.id, d.speaker, d.content, d.is_question, f.nb FROM docs{s} d JOIN fts{s} f"
                    " ON f.rowid = d.id"
                    " WHERE d.agent = ? AND d.owner = ? AND d.conversation_id = ? AND d.id < ?"
                    " ORDER BY d.id DESC LIMIT 1",
                    (*key, FACT_BASE),
                ).fetchone()
            prev = last[key]
            speaker, text = split_speaker(m.content)
            doc = _Pending(m, speaker, tokenize(text), [], [], _is_question(text))
            if isinstance(prev, _Pending):
                prev_body, prev_speaker, prev_q = prev.body, prev.speaker, prev.is_question
                prev.nb.extend(doc.body)
            elif prev is not None:
                prev_body = tokenize(split_speaker(prev["content"])[1])
                prev_speaker, prev_q = prev["speaker"], bool(prev["is_question"])
                grown.setdefault(prev["id"], prev["nb"].split()).extend(doc.body)
            else:
                prev_body, prev_speaker, prev_q = [], None, False
            doc.nb.extend(prev_body)
            if prev_q and prev_speaker != speaker:
                doc.ctx = prev_body
            last[key] = doc
            pending.append(doc)
        for doc_id, nb in grown.items():
            conn.execute(f"UPDATE fts{s} SET nb = ? WHERE rowid = ?", (" ".join(nb), doc_id))
            conn.execute(f"UPDATE docs{s} SET nb_len = ? WHERE id = ?", (len(nb), doc_id))
        conn.executemany(
            f"INSERT INTO docs{s} (id, agent, owner, conversation_id, role, speaker, content, ts_ms,"
            " is_question, body_len, ctx_len, nb_len) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (p.msg.id, p.msg.agent, p.msg.owner, p.msg.conversation_id, p.msg.role, p.speaker,
                 p.msg.content, p.msg.ts_ms, int(p.is_question), len(p.body), len(p.ctx), len(p.nb))
                for p in pending
            ],
        )
        conn.executemany(
            f"INSERT INTO fts{s} (rowid, okey, body, ctx, nb, dt) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (p.msg.id, owner_key(p.msg.agent, p.msg.owner), " ".join(p.body), " ".join(p.ctx),
                 " ".join(p.nb), " ".join(_date_tokens(p.msg.ts_ms)))
                for p in pending
            ],
        )

    # ------------------------------------------------------------------ search

    def _view(self, agent: str, owner: str) -> _OwnerView | None:
        """The owner's parsed documents, brought up to date. Call with the lock held."""
        key = (agent, owner)
        view = self._views.get(key)
        # Nothing committed since the view was last checked (by us: `_writes`; by any other
        # connection: data_version): skip the per-owner count query, most searches take this path.
        stamp = (self._conn.execute("PRAGMA data_version").fetchone()[0], self._writes)
        if view is not None and view.stamp == stamp:
            self._views.move_to_end(key)
            return view
        row = self._conn.execute(
            "SELECT COUNT(*) AS n, COALESCE(MAX(CASE WHEN id < ? THEN id END), 0) AS last,"
            " COALESCE(MAX(CASE WHEN id >= ? THEN id END), ?) AS last_fact,"
            " (SELECT value FROM meta WHERE key = 'generation') AS generation"
            " FROM docs WHERE agent = ? AND owner = ?",
            (FACT_BASE, FACT_BASE, FACT_BASE, agent, owner),
        ).fetchone()
        if not row["n"]:
            return None
        if view is not None and view.generation != row["generation"]:
            view = None  # rebuilt (by another process, perhaps with other tokens): parse afresh
        if view is not None and (view.last_id, view.last_fact, view.n) == (row["last"], row["last_fact"], row["n"]):
            view.stamp = stamp
            self._views.move_to_end(key)
            return view
        if view is not None:
            # Incremental: the rows after the view's last ids, plus each touched conversation's
            # previous tail turn (its `nb` field grew when the next turn arrived).
            new = self._parse_docs(
                "((d.id > ? AND d.id < ?) OR d.id > ?)", (agent, owner, view.last_id, FACT_BASE, view.last_fact)
            )
            if view.n + len(new) == row["n"] and new:
                tails = {view.tail[c] for c in {d.conversation_id for d in new if d.id < FACT_BASE}
                         if c in view.tail}
                marks = ",".join("?" * len(tails))
                grown = self._parse_docs(f"d.id IN ({marks})", (agent, owner, *tails)) if tails else []
                view.apply(grown + new)
                view.stamp = stamp
                self._views.move_to_end(key)
                return view
            # Counts disagree (a rebuild under us, another process's odd history): start over.
        view = _OwnerView()
        view.generation = row["generation"]
        view.apply(self._parse_docs("1", (agent, owner)))
        view.stamp = stamp
        self._views[key] = view
        while len(self._views) > self._MAX_VIEWS:
            self._views.popitem(last=False)
        return view

    def _parse_docs(self, where: str, params: tuple[object, ...]) -> list[_Doc]:
        docs = []
        for r in self._conn.execute(
            "SELECT d.id, d.speaker, d.is_question, d.conversation_id, d.role, d.content, d.ts_ms,"
            " f.body, f.ctx, f.nb, f.dt FROM docs d"
            f" JOIN fts f ON f.rowid = d.id WHERE d.agent = ? AND d.owner = ? AND {where} ORDER BY d.id",
            params,
        ):
            counts = [Counter(r[f].split()) for f in _FIELDS]
            tf: dict[str, tuple[int, int, int, int]] = {}
            # First-seen order (not set order, which varies with hash seeds): ties in feedback
            # term selection then break the same way in every process.
            for t in dict.fromkeys(itertools.chain(*counts)):
                tf[t] = (counts[0][t], counts[1][t], counts[2][t], counts[3][t])
            lens = (sum(counts[0].values()), sum(counts[1].values()), sum(counts[2].values()),
                    sum(counts[3].values()))
            text = split_speaker(r["content"])[1]
            docs.append(_Doc(r["id"], r["speaker"], bool(r["is_question"]), not _TEMPORAL.isdisjoint(counts[0]),
                             _question_share(text), bool(_NUMBER_RE.search(text)), _proper_names(text),
                             tf, lens, r["conversation_id"], r["role"], r["content"],  # type: ignore[arg-type]
                             r["ts_ms"]))
        return docs

    def search(
        self,
        agent: str,
        owner: str,
        query: str,
        *,
        limit: int,
        options: Iterable[str] = (),
    ) -> list[Hit]:
        """The owner's messages best matching `query`, best first, at most `limit`."""
        if limit <= 0:
            return []
        # The whole search holds the lock: the view is updated in place by the next search after
        # an Add, and ranking is pure Python (GIL-bound), so there is no parallelism to lose.
        with self._lock:
            return self._search(agent, owner, query, limit=limit, options=options)

    def _search(self, agent: str, owner: str, query: str, *, limit: int, options: Iterable[str]) -> list[Hit]:
        r = self.ranking
        view = self._view(agent, owner)
        if view is None:
            return []
        options = list(options)
        with_tail = bool(r.tail_overrides) and limit > r.tail_start
        ranked = self._rank(view, query, options, r, need=r.tail_start if with_tail else limit)
        if with_tail and ranked:
            # Two objectives: the head is read first and must be precise; the tail is read under a
            # token budget and should recall. The tail keeps the head's turns out and takes the
            # order of a recall-minded ranking (wider expansion), its scores kept below the head's.
            tail_r = replace(r, **r.tail_overrides, tail_overrides={})
            recall = self._rank(view, query, options, tail_r, need=limit + r.tail_start)
            head = ranked[: r.tail_start]
            seen = {i for _, i in head}
            rest = [x for x in recall if x[1] not in seen]
            if rest:
                scale = head[-1][0] / rest[0][0] * 0.999 if rest[0][0] > 0 else 1.0
                ranked = head + [(sc * scale, i) for sc, i in rest]
        if r.pad_neighbours and len(ranked) < limit:
            ranked += self._padding(view, ranked, limit - len(ranked))
        return self._hits(view, agent, owner, ranked[:limit])

    def _rank(
        self, view: _OwnerView, query: str, options: list[str], r: Ranking, *, need: int
    ) -> list[tuple[float, int]]:
        """(score, turn id) for the best `need` turns that score, best first."""
        qtoks = tokenize(query)
        named = {s for s, toks in view.speakers.items() if not toks.isdisjoint(qtoks)}
        boosted = named
        if r.possessive_rule and len(named) > 1:
            # "What does Melanie think of Caroline's plan?" is about what Melanie said: a speaker
            # named only as an owner ("Caroline's") is not the one the question asks about.
            subjects = {sp for sp in named if re.search(rf"\b{re.escape(sp)}\b(?![\'\u2019]s\b)", query, re.I)}
            boosted = subjects or named
        # In a chat, a speaker's name in other turns is mostly a vocative ("Thanks, Melanie!"), so
        # as a search term it pulls up the *other* speaker's turns. Names count through the
        # speaker boost instead - unless the query is nothing but names.
        name_toks = {t for s in named for t in view.speakers[s]} if r.drop_speaker_names else set()
        content_toks = [t for t in qtoks if t not in STOPWORDS and t not in name_toks]
        content_toks = content_toks or [t for t in qtoks if t not in STOPWORDS] or qtoks
        qweights: dict[str, float] = dict.fromkeys(content_toks, 1.0)
        for opt in options:
            for t in tokenize(opt):
                if t not in STOPWORDS and t not in qweights:
                    qweights[t] = r.option_weight
        if not qweights:
            return []
        if len(qweights) > MAX_QUERY_TERMS:
            # Each term walks its postings: a bounded number of them bounds the work. The rarest
            # that occur at all carry the query (a common word adds little but costs the most; a
            # word this owner never used costs nothing and finds nothing).
            keep = heapq.nlargest(MAX_QUERY_TERMS, qweights,
                                  key=lambda t: view.idf(t) if view.df.get(t) else -1.0)
            qweights = {t: qweights[t] for t in keep}
            content_toks = [t for t in content_toks if t in qweights]
        when = bool(_WHEN_RE.search(query))
        count = bool(_COUNT_RE.search(query))
        # Names the answer must not merely repeat: the speakers and whatever the question names.
        known_names = (set(qtoks).union(*view.speakers.values()) if _WHO_RE.search(query) else None)
        raw = self._raw(view, qweights, r)
        if r.lexicon_down or r.lexicon_up:
            # Category words <-> their members ("pets" ~ "turtle"). Each question word counts once
            # per turn through its best related term, so a turn listing many members of a
            # category does not outweigh one that uses the question's own word.
            for group in related(content_toks, down=r.lexicon_down, up=r.lexicon_up).values():
                best: dict[int, float] = {}
                for t, rel in group.items():
                    if t in qweights:
                        continue  # already a query term in its own right
                    for i, v in self._raw(view, {t: rel}, r).items():
                        if best.get(i, 0.0) < v:
                            best[i] = v
                for i, v in best.items():
                    raw[i] = raw.get(i, 0.0) + v
        if r.max_candidates and len(raw) > r.max_candidates:
            # A long history: common words match thousands of turns. The steps below multiply by
            # bounded boosts, so a turn far down the word-match order does not reach the top, and
            # scoring only the best keeps search time flat as the history grows.
            raw = dict(heapq.nlargest(r.max_candidates, raw.items(), key=lambda kv: kv[1]))
        by_id = self._boosted(view, raw, boosted, when, count, known_names, r)
        if r.prf_docs and r.prf_terms and r.prf_weight and by_id:
            extra = self._feedback(view, by_id, qweights, r)
            if extra:
                # Scores are sums over terms times per-turn boosts, so the expanded query's score
                # is the first score plus the new terms' part: no second pass over the old terms.
                # Without re-query the new terms only reorder the turns already found.
                more = self._raw(view, extra, r, within=None if r.prf_requery else raw.keys())
                for i, v in more.items():
                    raw[i] = raw.get(i, 0.0) + v
                by_id = self._boosted(view, raw, boosted, when, count, known_names, r)
        if r.neighbour_weight or r.thread_weight:
            by_id = self._inherit(view, by_id, r)
        if r.session_weight and by_id:
            # A session that talks about the topic at length is where the answer most likely is.
            per_session: dict[str, list[float]] = {}
            for i, sc in by_id.items():
                per_session.setdefault(view.by_id[i].conversation_id, []).append(sc)
            strength = {c: sum(sorted(v, reverse=True)[:3]) for c, v in per_session.items()}
            top = max(strength.values()) or 1.0
            by_id = {i: sc * (1.0 + r.session_weight * strength[view.by_id[i].conversation_id] / top)
                     for i, sc in by_id.items()}
        # Best first, ties by lower id; only the `need` that the caller will use.
        top = heapq.nlargest(need, ((sc, -i) for i, sc in by_id.items() if sc > 0))
        return [(sc, -neg) for sc, neg in top]

    @staticmethod
    def _inherit(view: _OwnerView, by_id: dict[int, float], r: Ranking) -> dict[int, float]:
        """Scores passed along the conversation: conversations answer across turns."""
        docs = view.by_id
        inherited: dict[int, float] = {}  # from the turn just before or after
        thread: dict[int, float] = {}  # from the same speaker's turn two steps away
        with_thread = bool(r.thread_weight)
        inherited_get, thread_get = inherited.get, thread.get
        for i, sc in by_id.items():
            d = docs[i]
            for j in d.around:
                if inherited_get(j, 0.0) < sc:
                    inherited[j] = sc
            if with_thread:
                for k in d.thread:
                    if thread_get(k, 0.0) < sc:
                        thread[k] = sc
        out = dict(by_id)
        nw = r.neighbour_weight
        get = out.get
        for j, sc in inherited.items():
            out[j] = get(j, 0.0) + nw * sc
        tw = r.thread_weight
        for k, sc in thread.items():
            own = get(k, 0.0)
            v, cap = own + tw * sc, sc * 0.999  # never above its source, never below its own score
            out[k] = v if v <= cap else (cap if cap > own else own)
        return out

    def _padding(self, view: _OwnerView, ranked: list[tuple[float, int]], room: int) -> list[tuple[float, int]]:
        """Turns around the best hits that matched nothing, after every matching turn.

        When a question matches few turns, the rest of the reader's budget is better spent on the
        surroundings of the best ones (the answer is often a few turns on, in other words) than
        left empty. Their scores stay below every real match.
        """
        r = self.ranking
        have = {i for _, i in ranked}
        floor = ranked[-1][0] if ranked else 1.0
        out: list[tuple[float, int]] = []
        for _, i in ranked[: r.pad_neighbours]:
            for step in ("prev", "next"):
                j: int | None = i
                for _ in range(r.pad_distance):
                    j = getattr(view.by_id[j], step)
                    if j is None:
                        break
                    if j not in have:
                        have.add(j)
                        out.append((0.0, j))
            if len(out) >= room:
                break
        out = out[:room]
        # Below the last real match, in the order found (best hit's surroundings first).
        return [(floor * 0.5 * (1.0 - k / (len(out) + 1)), j) for k, (_, j) in enumerate(out)]

    def _raw(
        self, view: _OwnerView, qweights: dict[str, float], r: Ranking, *, within: Iterable[int] | None = None
    ) -> dict[int, float]:
        """{turn id: sum over query terms of weight x idf x saturated tf}, for the turns holding any
        of the terms in any field. The view holds exactly this owner's turns: that is the isolation
        (and the candidate set - FTS5 is not consulted at search time)."""
        keep = within if within is None or isinstance(within, set | frozenset) else set(within)
        acc: dict[int, float] = {}
        get = acc.get
        for t, qw in qweights.items():
            sat = view.saturated(t, r)
            if not sat:
                continue
            f = qw * view.idf(t)
            if keep is None:
                for i, v in sat.items():
                    acc[i] = get(i, 0.0) + f * v
            elif len(keep) < len(sat):
                for i in keep:
                    v = sat.get(i)
                    if v is not None:
                        acc[i] = get(i, 0.0) + f * v
            else:
                for i, v in sat.items():
                    if i in keep:
                        acc[i] = get(i, 0.0) + f * v
        return acc

    def _boosted(
        self, view: _OwnerView, raw: dict[int, float], named: set[str], when: bool, count: bool,
        known_names: set[str] | None, r: Ranking,
    ) -> dict[int, float]:
        out = {}
        for i, s in raw.items():
            d = view.by_id[i]
            if r.question_mode == "share":
                s *= 1.0 - (1.0 - r.question_penalty) * d.question_share
            elif d.is_question:
                s *= r.question_penalty
            if d.echo:
                s *= 1.0 - r.echo_penalty * d.echo
            if d.speaker in named:
                s *= r.speaker_boost
            if when and d.has_time:
                s *= r.when_boost
            if count and d.has_number:
                s *= r.count_boost
            if known_names is not None and not d.names <= known_names:
                s *= r.name_boost
            if s > 0:
                out[i] = s
        return out

    def _feedback(
        self, view: _OwnerView, scores: dict[int, float], qweights: dict[str, float], r: Ranking
    ) -> dict[str, float]:
        """The strongest body terms of the top turns (RM3-like, idf-weighted) -> their weight."""
        top = [-neg for _, neg in heapq.nlargest(r.prf_docs, ((sc, -i) for i, sc in scores.items()))]
        gain: Counter[str] = Counter()
        for i in top:
            for t, c in view.by_id[i].tf.items():
                if c[0] and t not in qweights and t not in STOPWORDS:
                    gain[t] += view.idf(t) / len(top)
        return {t: r.prf_weight for t, _ in gain.most_common(r.prf_terms)}

    def _hits(self, view: _OwnerView, agent: str, owner: str, top: list[tuple[float, int]]) -> list[Hit]:
        out = []
        for s, i in top:
            d = view.by_id[i]
            out.append(Hit(id=i, agent=agent, owner=owner, conversation_id=d.conversation_id, role=d.role,
                           speaker=d.speaker, content=d.content, ts_ms=d.ts_ms, score=round(s, 6)))
        return out

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def rebuild(log: MessageSource, db_path: Path) -> int:
    """Rebuild `messages.db` at `db_path` from the log; returns the number of messages indexed."""
    index = MessageIndex(db_path)
    try:
        return index.rebuild(log)
    finally:
        index.close()
