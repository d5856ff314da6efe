"""One owner's messages parsed into memory: documents, term postings and BM25F statistics.

Parsing field text into term counts is what made pure-SQL ranking slow (10+ ms per search), so
search runs on this view and the view is kept up to date in place (see `OwnerView`).
"""

from __future__ import annotations

import itertools
import math
import re
import sqlite3
from collections import Counter
from dataclasses import dataclass
from typing import Any

from mateclaw_mem.index.messages.storage import FACT_BASE, FIELDS, MONTHS, WEEKDAYS, split_speaker
from mateclaw_mem.index.tokenizer import STOPWORDS, tokenize

_AVG_STEP = 1.01  # average field lengths are used in 1% steps (see `OwnerView.apply`)

# Words that place an event in time. A "when" question's answer usually sits in a turn that says
# "yesterday", "last week" or "in May" - relative to the message date the answer model sees.
_TEMPORAL = frozenset(
    tokenize(
        "yesterday today tomorrow tonight ago last next week weekend weeks month months year years day days"
        " morning evening night recently soon earlier later since before after until"
        " " + " ".join(MONTHS) + " " + " ".join(WEEKDAYS)
    )
) - STOPWORDS
_NUMBER_RE = re.compile(
    r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty"
    r"|forty|fifty|hundred|thousand|million|dozen|couple|several|once|twice)\b",
    re.IGNORECASE,
)
_CAPITAL_RE = re.compile(r"\b[A-Z][a-z]+(?:'s)?\b")

# (k1, per-field weights, per-field b): what a saturated term frequency depends on.
SatKey = tuple[float, tuple[float, ...], tuple[float, ...]]


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


def _saturate(
    c: tuple[int, int, int, int], lens: tuple[int, int, int, int], w: tuple[float, ...], b: tuple[float, ...],
    k1: float, avg: tuple[float, ...],
) -> float:
    """BM25F: field-weighted, length-normalised term frequency, saturated."""
    tf = sum(w[f] * c[f] / (1.0 - b[f] + b[f] * lens[f] / avg[f]) for f in range(4) if c[f])
    return tf / (k1 + tf) if tf > 0 else 0.0


def _saturate_all(view: OwnerView, docs: dict[int, tuple[int, int, int, int]],
                  keys: list[SatKey]) -> list[tuple[Any, Any]]:
    """`_saturate` of every doc in `docs` (id -> counts) at once, in numpy, for each of `keys`:
    (positions, values) per key, values > 0 only. The same operations in the same order, so the
    same floats (a field a doc lacks adds 0.0, which changes no sum). A term's first search in a
    long history computes this over every turn holding it; one turn at a time it was most of that
    search. The counts are read into an array once for all the keys (that read is most of it)."""
    import numpy as np

    n = len(docs)
    idx = np.fromiter(map(view.pos.__getitem__, docs), dtype=np.intp, count=n)
    if not n:
        return [(idx, np.zeros(0)) for _ in keys]
    c = np.fromiter(itertools.chain.from_iterable(docs.values()), dtype=np.float64, count=4 * n).reshape(n, 4)
    lens = view.lens[idx]
    avg = np.array(view.avg, dtype=np.float64)
    out = []
    for k1, w, b in keys:
        wb = np.array(w, dtype=np.float64)
        bb = np.array(b, dtype=np.float64)
        x = (wb * c) / ((1.0 - bb) + (bb * lens) / avg)
        tf = ((x[:, 0] + x[:, 1]) + x[:, 2]) + x[:, 3]
        keep = tf > 0
        tf = tf[keep]
        out.append((idx[keep], tf / (k1 + tf)))
    return out


@dataclass
class Doc:
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


def parse_doc(r: sqlite3.Row) -> Doc:
    """A stored document (a `MessageStorage.doc_rows` row) parsed for ranking."""
    counts = [Counter(r[f].split()) for f in FIELDS]
    tf: dict[str, tuple[int, int, int, int]] = {}
    # First-seen order (not set order, which varies with hash seeds): ties in feedback
    # term selection then break the same way in every process.
    for t in dict.fromkeys(itertools.chain(*counts)):
        tf[t] = (counts[0][t], counts[1][t], counts[2][t], counts[3][t])
    lens = (sum(counts[0].values()), sum(counts[1].values()), sum(counts[2].values()), sum(counts[3].values()))
    text = split_speaker(r["content"])[1]
    return Doc(r["id"], r["speaker"], bool(r["is_question"]), not _TEMPORAL.isdisjoint(counts[0]),
               _question_share(text), bool(_NUMBER_RE.search(text)), _proper_names(text),
               tf, lens, r["conversation_id"], r["role"], r["content"], r["ts_ms"])


def _echo(d: Doc, prev: Doc) -> float:
    # Repeating a *question's* words is how an answer starts ("How's the store?" / "The store's
    # doing great"): only a statement's words make a reaction.
    if prev.speaker == d.speaker or prev.question_share >= 0.5:
        return 0.0
    mine = [t for t, c in d.tf.items() if c[0] and t not in STOPWORDS]
    if not mine:
        return 0.0
    return sum(1 for t in mine if t in prev.tf and prev.tf[t][0]) / len(mine)


class OwnerView:
    """One owner's parsed documents and statistics, cached in memory and kept up to date in place.

    After an Add only the new rows (and the previous tail turn of each touched conversation, whose
    `nb` field grew) are parsed and folded into the statistics, so interleaved Add/Search on a large
    owner costs O(new messages), not O(owner's messages). Mutated only with the index lock held.
    """

    def __init__(self) -> None:
        self.last_id = 0  # last message id (facts are counted apart: their ids start at FACT_BASE)
        self.last_fact = FACT_BASE
        self.by_id: dict[int, Doc] = {}
        self.n = 0
        self.len_sum = [0, 0, 0, 0]
        self.avg: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)
        self.df: Counter[str] = Counter()  # body document frequency
        self.speakers: dict[str, frozenset[str]] = {}  # speaker -> the tokens of their name
        self.tail: dict[str, int] = {}  # conversation -> its last doc id
        # term -> the docs holding it in any field: scoring walks the query terms' postings
        # instead of every candidate x every query term.
        # (Each entry is the doc's counts of the term: a whole term's scores are computed from
        # these and `lens` in one vector operation.)
        self.postings: dict[str, dict[int, tuple[int, int, int, int]]] = {}
        # term -> ranking knobs -> {doc id: saturated BM25F term frequency}, filled lazily per query
        # term. An Add drops only the terms of the turns it touched, unless the (1%-stepped) average
        # field lengths moved: then everything. A long history's search after an Add stays warm.
        self.sat: dict[str, dict[SatKey, dict[int, float]]] = {}
        # Every doc's position (in the order first seen), its field lengths by position (a numpy
        # array, grown by doubling), and per term and ranking its scores as numpy arrays over those
        # positions (messages/candidates.py), dropped whenever `sat`'s would be.
        self.ids: list[int] = []
        self.pos: dict[int, int] = {}
        self.lens: Any = None
        self.arrays: dict[str, dict[SatKey, tuple[Any, Any]]] = {}
        # term -> docs whose entry changed since its arrays were made: merged into them at the next
        # use (scoring a whole common term again after every Add was most of an agent's search).
        self.patches: dict[str, set[int]] = {}
        self.keys: dict[SatKey, None] = {}  # the rankings searched with, in order (`sat_arrays`)
        self.stamp: tuple[int, int] | None = None  # (data_version, own writes) when last checked
        self.generation: str | None = None  # the index build it was parsed from (meta 'generation')

    def _remove_stats(self, d: Doc) -> None:
        self.n -= 1
        for i in range(4):
            self.len_sum[i] -= d.lens[i]
        self.df.subtract(t for t, c in d.tf.items() if c[0])
        for t in d.tf:
            docs = self.postings[t]
            del docs[d.id]
            if not docs:
                del self.postings[t]

    def _add_stats(self, d: Doc) -> None:
        self.n += 1
        for i in range(4):
            self.len_sum[i] += d.lens[i]
        self.df.update(t for t, c in d.tf.items() if c[0])
        for t, c in d.tf.items():
            self.postings.setdefault(t, {})[d.id] = c

    def apply(self, docs: list[Doc]) -> None:
        """Fold parsed docs in: ids already known replace their old parse, new ids are appended."""
        dropped: dict[int, Doc] = {}  # replaced parses: their terms may need their entries dropped
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
            self._place(d)
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
            self.arrays.clear()
            self.patches.clear()
            return
        # Each entry depends only on its own turn: refresh the entries of the turns just parsed.
        for d in docs:
            old_terms = dropped[d.id].tf.keys() - d.tf.keys() if d.id in dropped else ()
            for t in itertools.chain(d.tf, old_terms):
                if t in self.arrays:
                    self.patches.setdefault(t, set()).add(d.id)
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

    def _relink(self, x: Doc) -> None:
        docs = self.by_id
        x.around = tuple(j for j in (x.prev, x.next) if j is not None)
        two = (docs[x.prev].prev if x.prev is not None else None, docs[x.next].next if x.next is not None else None)
        x.thread = tuple(k for k in two if k is not None and docs[k].speaker == x.speaker)

    def _place(self, d: Doc) -> None:
        """Give `d` a position (once) and store its field lengths there."""
        import numpy as np  # here, not at the top: a command that never searches messages skips it

        p = self.pos.get(d.id)
        if p is None:
            p = self.pos[d.id] = len(self.ids)
            self.ids.append(d.id)
        if self.lens is None or p >= len(self.lens):
            grown = np.zeros((max(64, 2 * p), 4))
            if self.lens is not None:
                grown[: len(self.lens)] = self.lens
            self.lens = grown
        self.lens[p] = d.lens

    def sat_arrays(self, term: str, key: SatKey) -> tuple[Any, Any]:
        """(positions, values) of `saturated(term, key)` as numpy arrays, cached the same way."""
        per_key = self.arrays.setdefault(term, {})
        if term in self.patches:
            self._merge_patches(term, per_key)
        got = per_key.get(key)
        if got is None:
            # Every ranking seen so far at once (a search uses two): the term's counts are read once.
            self.keys[key] = None
            missing = [key, *(k for k in self.keys if k != key and k not in per_key)][:4]
            for k, arrays in zip(missing, _saturate_all(self, self.postings.get(term, {}), missing), strict=True):
                per_key[k] = arrays
            got = per_key[key]
        return got

    def _merge_patches(self, term: str, per_key: dict[SatKey, tuple[Any, Any]]) -> None:
        """The changed docs' entries of `term` scored afresh (one at a time: `_saturate`, the same
        floats) and put in place of their old ones, in every ranking's arrays of the term."""
        import numpy as np

        changed = self.patches.pop(term)
        docs = self.postings.get(term, {})
        where = np.fromiter((self.pos[i] for i in changed), dtype=np.intp, count=len(changed))
        for key, (idx, vals) in list(per_key.items()):
            k1, w, b = key
            fresh = [(self.pos[i], v) for i in changed if (c := docs.get(i)) is not None
                     and (v := _saturate(c, self.by_id[i].lens, w, b, k1, self.avg)) > 0]
            keep = ~np.isin(idx, where)
            per_key[key] = (np.concatenate((idx[keep], np.array([p for p, _ in fresh], dtype=np.intp))),
                            np.concatenate((vals[keep], np.array([v for _, v in fresh], dtype=np.float64))))

    def saturated(self, term: str, key: SatKey) -> dict[int, float]:
        """{doc id: tf / (k1 + tf)} for `term`, tf being the field-weighted, length-normalised BM25F
        count under `key` = (k1, field weights, field b). Cached until the statistics change."""
        per_ranking = self.sat.setdefault(term, {})
        got = per_ranking.get(key)
        if got is None:
            idx, values = self.sat_arrays(term, key)
            ids = self.ids
            got = per_ranking[key] = dict(zip(map(ids.__getitem__, idx.tolist()), values.tolist(), strict=True))
        return got

    def saturated_among(self, term: str, key: SatKey, ids: set[int] | frozenset[int]) -> dict[int, float]:
        """`saturated(term, key)` for at least the turns in `ids` (it may hold more): the whole term
        when it is cached or holds few turns, else read for those turns only from the term's arrays
        (feedback terms are scored within a few hundred candidates: a dict of all 10,000 turns
        holding a word, to read 300 of them, was most of a cold search in a long history; scoring
        the 300 one at a time in Python was still a tenth of a search at 30,000 turns). The same
        values either way."""
        cached = self.sat.get(term, {}).get(key)
        if cached is not None:
            return cached  # the whole term: the caller reads the ids it wants (copying was slower)
        docs = self.postings.get(term)
        if not docs:
            return {}
        if len(docs) <= 8 * len(ids):  # not many more turns than asked for: score (and keep) the whole term
            return self.saturated(term, key)
        import numpy as np

        idx, vals = self.sat_arrays(term, key)  # numpy, kept like the first stage's (candidates.py)
        dense = np.zeros(len(self.ids))
        dense[idx] = vals
        asked = list(ids)
        got = dense[np.fromiter(map(self.pos.__getitem__, asked), dtype=np.intp, count=len(asked))]
        keep = np.flatnonzero(got > 0)
        return dict(zip([asked[k] for k in keep.tolist()], got[keep].tolist(), strict=True))

    def idf(self, term: str) -> float:
        df = self.df.get(term, 0)
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))
