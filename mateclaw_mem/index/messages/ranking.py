"""Ranking the turns of one owner's view for a query: functions of an `OwnerView` and a query.

BM25F computed in Python rather than FTS5's built-in bm25(), which has fixed k1/b and computes IDF
over all owners together. See `Ranking` for the knobs and why each exists; `index.lexicon` bridges
category words and their members ("pets" ~ "turtle").
"""

from __future__ import annotations

import heapq
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Protocol

from mateclaw_mem.index.lexicon import related
from mateclaw_mem.index.messages.bm25f import SatKey
from mateclaw_mem.index.messages.fields import FIELDS
from mateclaw_mem.index.tokenizer import MAX_QUERY_TERMS, STOPWORDS, tokenize

_COUNT_RE = re.compile(r"\bhow (?:many|much|old|often|far)\b", re.IGNORECASE)
_WHO_RE = re.compile(r"\b(?:who|whom|whose|where)\b", re.IGNORECASE)
_WHEN_RE = re.compile(
    r"\b(when|how long|what (?:year|month|day|date|time)|which (?:year|month|day))\b", re.IGNORECASE
)


class View(Protocol):
    """What the ranking reads of an owner's turns: the on-disk index (disk_view.DiskView, one per
    search) or the in-memory view it replaced (tests/support/owner_view.OwnerView, the reference).
    Positions index `cols` and `ids`; `load` and `prepare` read what the next step needs."""

    speakers: dict[str, frozenset[str]]
    df: Any  # term -> body document frequency (`get`)
    cols: Any  # columns.Columns over positions
    by_id: Any  # turn id -> its `content`, `names`, `body`, `prev`, `next`, ...

    @property
    def ids(self) -> Any: ...
    def idf(self, term: str) -> float: ...
    def load(self, terms: Iterable[str]) -> None: ...
    def prepare(self, pos: Any) -> None: ...
    def sat_arrays(self, term: str, key: SatKey) -> tuple[Any, Any]: ...
    def sat_among(self, term: str, key: SatKey, pos: list[int]) -> tuple[Any, Any] | None: ...


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
    # Down-weighting by `Doc.echo` (score x (1 - echo_penalty x echo)). LoCoMo dev: Hit@1 +4/+2
    # and MRR up on both halves, Hit@10 -2 on the tune half and +6 on the confirm half.
    echo_penalty: float = 0.4
    # "share": the penalty scales with how much of the turn is asking ("Oscar, my guinea pig. How
    # are yours?" is mostly an answer); "last": all or nothing on whether the turn ends with '?'.
    question_mode: str = "share"
    speaker_boost: float = 1.2  # the question names who said it
    # With two speakers named, only those named as subjects (not as "X's") get the speaker boost.
    possessive_rule: bool = True
    drop_speaker_names: bool = True  # speaker names are not search terms (see `_rank`)
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
    # First slot: a second feedback pass, each top turn's terms weighted by its share of the top
    # turns' scores and each term by `first_prf_weight` x its gain relative to the strongest one,
    # chooses only the turn in position 1 (the rest keep their order). LoCoMo dev: Hit@1 and MRR
    # up on both halves; applied to the whole head the same feedback costs Hit@10. Only a turn
    # already in the head moves. 0 = off.
    first_prf_weight: float = 0.25
    first_prf_docs: int = 5
    first_prf_terms: int = 10
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
    # Turns kept after word matching (see `_rank`); 0 = all. LoCoMo dev gives the same figures at
    # 200, 300, 400 and 1,000 (its conversations rarely match more); 30,000 turns of one user take
    # a third of the time at 300 as at 1,000 (scripts/bench/aml_scale.py).
    max_candidates: int = 300
    pad_neighbours: int = 30  # when fewer turns match than asked for, add the surroundings of this many...
    pad_distance: int = 2  # ...up to this many turns either side

    def sat_key(self) -> SatKey:
        return self.k1, tuple(self.weights[f] for f in FIELDS), tuple(self.b[f] for f in FIELDS)


def rank(view: View, query: str, options: Iterable[str], r: Ranking, *, limit: int) -> list[tuple[float, int]]:
    """(score, turn id) of the view's turns best matching `query`, best first, at most `limit`."""
    options = list(options)
    with_tail = bool(r.tail_overrides) and limit > r.tail_start
    ranked = _rank(view, query, options, r, need=r.tail_start if with_tail else limit, first_slot=True)
    if with_tail and ranked:
        # Two objectives: the head is read first and must be precise; the tail is read under a
        # token budget and should recall. The tail keeps the head's turns out and takes the
        # order of a recall-minded ranking (wider expansion), its scores kept below the head's.
        tail_r = replace(r, **r.tail_overrides, tail_overrides={})
        recall = _rank(view, query, options, tail_r, need=limit + r.tail_start)
        head = ranked[: r.tail_start]
        seen = {i for _, i in head}
        rest = [x for x in recall if x[1] not in seen]
        if rest:
            scale = head[-1][0] / rest[0][0] * 0.999 if rest[0][0] > 0 else 1.0
            ranked = head + [(sc * scale, i) for sc, i in rest]
    if r.pad_neighbours and len(ranked) < limit:
        ranked += _padding(view, ranked, limit - len(ranked), r)
    return ranked[:limit]


@dataclass(frozen=True)
class Boosts:
    """What a query asks of a turn beyond its words (see `Ranking` for each knob)."""

    named: frozenset[str]  # speakers the question is about
    when: bool  # a when/how-long question: turns that mention time
    count: bool  # a how-many question: turns with a number
    known_names: frozenset[str] | None  # a who/where question: names the answer must not merely repeat


@dataclass(frozen=True)
class Query:
    """What `_rank` reads of a query: its weighted terms, their lexicon groups and the boosts."""

    qweights: dict[str, float]
    groups: tuple[dict[str, float], ...]
    boosts: Boosts


# A query names a few people. More "speakers" than this matched means the "Name: text" reading of
# the turns took line openings for names (a desktop chat's "Day 5: …", "Update: …"): the possessive
# rule is then skipped - it compiled one pattern per matched speaker, 1,000 of them per search on a
# history of "Day N:" notes (170 ms a prompt).
_MAX_NAMED = 8


@lru_cache(maxsize=1024)
def _not_possessive(speaker: str) -> re.Pattern[str]:
    return re.compile(rf"\b{re.escape(speaker)}\b(?![\'\u2019]s\b)", re.I)


def analyse(view: View, query: str, options: list[str], r: Ranking) -> Query | None:
    """The query's terms (None: no term to search by) and what it asks of a turn."""
    qtoks = tokenize(query)
    named = {s for s, toks in view.speakers.items() if not toks.isdisjoint(qtoks)}
    boosted = named
    if r.possessive_rule and 1 < len(named) <= _MAX_NAMED:
        # "What does Melanie think of Caroline's plan?" is about what Melanie said: a speaker
        # named only as an owner ("Caroline's") is not the one the question asks about.
        subjects = {sp for sp in named if _not_possessive(sp).search(query)}
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
        return None
    if len(qweights) > MAX_QUERY_TERMS:
        # Each term walks its postings: a bounded number of them bounds the work. The question's
        # words before the options' (the question leads: many long options once left none of it),
        # then the rarest that occur at all (a common word adds little but costs the most; a word
        # this owner never used costs nothing and finds nothing).
        keep = heapq.nlargest(MAX_QUERY_TERMS, qweights,
                              key=lambda t: (qweights[t], view.idf(t) if view.df.get(t) else -1.0))
        qweights = {t: qweights[t] for t in keep}
        content_toks = [t for t in content_toks if t in qweights]
    # Names the answer must not merely repeat: the speakers and whatever the question names.
    known_names = (frozenset(qtoks).union(*view.speakers.values()) if _WHO_RE.search(query) else None)
    # Each question word also matches its related words (the category lexicon, `index.lexicon`:
    # "pets" ~ "turtle"), counted once per turn through its best related term, so a turn listing
    # many members of a category does not outweigh one using the question's own word.
    groups = tuple(related(content_toks, down=r.lexicon_down, up=r.lexicon_up).values()) \
        if r.lexicon_down or r.lexicon_up else ()
    return Query(qweights, groups, Boosts(frozenset(boosted), bool(_WHEN_RE.search(query)),
                                          bool(_COUNT_RE.search(query)), known_names))


def _rank(
    view: View, query: str, options: list[str], r: Ranking, *, need: int, first_slot: bool = False
) -> list[tuple[float, int]]:
    """(score, turn id) for the best `need` turns that score, best first; with `first_slot`, the
    turn in position 1 is chosen by the weighted feedback (`Ranking.first_prf_weight`)."""
    # numpy here, not at the top: a command that never searches messages does not import it.
    import numpy as np

    from mateclaw_mem.index.messages import scoring
    from mateclaw_mem.index.messages.candidates import candidates

    q = analyse(view, query, options, r)
    if q is None:
        return []
    key = r.sat_key()
    # Every turn holding a query word or a related one, and of those, in a long history, the best
    # `max_candidates` by that raw score: common words match thousands of turns, the steps below
    # multiply by bounded boosts, so a turn far down the word-match order does not reach the top,
    # and search time stays flat as the history grows. In numpy (messages/candidates.py), as is
    # every later step (messages/scoring.py): these are positions in the view, not turn ids.
    pos, raw = candidates(view, q.qweights, q.groups, key, r.max_candidates)
    fs = scoring.factors(view, pos, q.boosts, r)
    by_pos, by_val = scoring.boosted(pos, raw, fs)
    if not by_pos.size:
        return []

    def expanded(extra: dict[str, float]) -> tuple[Any, Any]:
        """The final scores with the query expanded by `extra`. Scores are sums over terms times
        per-turn boosts, so the expanded score is the first one plus the new terms' part: no second
        pass over the old terms. Without re-query the new terms only reorder the turns found."""
        at, scores, f = pos, raw, fs
        if extra and r.prf_requery:
            more = scoring.everywhere(view, extra, key)
            found = more != 0
            found[pos] = False
            new = np.flatnonzero(found)
            at = np.concatenate((pos, new))
            scores = np.concatenate((raw + more[pos], more[new]))
            f = scoring.factors(view, at, q.boosts, r)
        elif extra:
            scores = raw + scoring.among(view, extra, key, pos)
        return scoring.settle(view, *scoring.boosted(at, scores, f), r)

    top_ids = scoring.best(view, by_pos, by_val, max(r.prf_docs, r.first_prf_docs))
    flat = _feedback(view, top_ids[: r.prf_docs], q.qweights, r) if r.prf_docs and r.prf_terms and r.prf_weight \
        else {}
    final = expanded(flat) if flat else scoring.settle(view, by_pos, by_val, r)
    ranked = scoring.best(view, *final, need)
    if first_slot and ranked and r.first_prf_weight and r.first_prf_docs and r.first_prf_terms:
        weighted = _weighted_feedback(view, top_ids[: r.first_prf_docs], q.qweights, r)
        if weighted:
            ranked = first_slot_to(ranked, scoring.top_one(view, *expanded(weighted)))
    return ranked


def first_slot_to(ranked: list[tuple[float, int]], best: int) -> list[tuple[float, int]]:
    """`ranked` with turn `best` moved to position 1 and every other turn in its order. Only a turn
    already in `ranked` moves, so the set of turns (what Hit@10 and the token budget see) never
    changes. Its score is set just above the old first's (beyond the 6 digits a Hit shows), so a
    client sorting by score sees the same order."""
    if ranked[0][1] == best or all(i != best for _, i in ranked):
        return ranked
    top = ranked[0][0]
    return [(top + max(top * 1e-3, 1e-6), best), *(x for x in ranked if x[1] != best)]


def _padding(view: View, ranked: list[tuple[float, int]], room: int, r: Ranking) -> list[tuple[float, int]]:
    """Turns around the best hits that matched nothing, after every matching turn.

    When a question matches few turns, the rest of the reader's budget is better spent on the
    surroundings of the best ones (the answer is often a few turns on, in other words) than
    left empty. Their scores stay below every real match.
    """
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


def _feedback(
    view: View, top: list[tuple[float, int]], qweights: dict[str, float], r: Ranking
) -> dict[str, float]:
    """The strongest body terms of the top turns, (score, id) best first (RM3-like, idf-weighted)
    -> their weight."""
    gain: Counter[str] = Counter()
    for _, i in top:
        for t in view.by_id[i].body:
            if t not in qweights and t not in STOPWORDS:
                gain[t] += view.idf(t) / len(top)
    return {t: r.prf_weight for t, _ in gain.most_common(r.prf_terms)}


def _weighted_feedback(
    view: View, top: list[tuple[float, int]], qweights: dict[str, float], r: Ranking
) -> dict[str, float]:
    """Like `_feedback`, but a top turn counts by its share of the top turns' scores (a clear
    first match says more than the fifth) and a term by its gain relative to the strongest."""
    total = sum(sc for sc, _ in top)
    if total <= 0:
        return {}
    gain: Counter[str] = Counter()
    for sc, i in top:
        share = sc / total
        for t in view.by_id[i].body:
            if t not in qweights and t not in STOPWORDS:
                gain[t] += share * view.idf(t)
    strongest = gain.most_common(r.first_prf_terms)
    if not strongest or strongest[0][1] <= 0:
        return {}
    peak = strongest[0][1]
    return {t: r.first_prf_weight * g / peak for t, g in strongest}
