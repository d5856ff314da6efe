"""Ranking the turns of one owner's view for a query: functions of an `OwnerView` and a query.

BM25F computed in Python rather than FTS5's built-in bm25(), which has fixed k1/b and computes IDF
over all owners together. See `Ranking` (rank_types.py) for the knobs and why each exists; `index.lexicon` bridges
category words and their members ("pets" ~ "turtle").
"""

from __future__ import annotations

import heapq
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from functools import lru_cache
from typing import Any

from mateclaw_mem.index.lexicon import related
from mateclaw_mem.index.messages.rank_types import Boosts, Query, Ranking, View
from mateclaw_mem.index.tokenizer import MAX_QUERY_TERMS, STOPWORDS, tokenize

_COUNT_RE = re.compile(r"\bhow (?:many|much|old|often|far)\b", re.IGNORECASE)
_WHO_RE = re.compile(r"\b(?:who|whom|whose|where)\b", re.IGNORECASE)
_WHEN_RE = re.compile(
    r"\b(when|how long|what (?:year|month|day|date|time)|which (?:year|month|day))\b", re.IGNORECASE
)


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


def load() -> None:
    """Import now what a first ranking would (`_rank`'s numpy steps, and `numpy.ma`, which numpy
    loads on the first `np.unique`): ~10-20 ms that a daemon's first search paid (issue 36.4)."""
    import numpy.ma  # noqa: F401

    from mateclaw_mem.index.messages import candidates, scoring  # noqa: F401


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
    best = [i for _, i in ranked[: r.pad_neighbours]]
    view.want_turns(best)  # the best hits (some only inherited a score), then their neighbours
    view.want_turns(j for i in best for j in (view.by_id[i].prev, view.by_id[i].next) if j is not None)
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
    view.want_bodies(i for _, i in top)  # (the on-disk view: two statements, not one per turn and term)
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
    view.want_bodies(i for _, i in top)  # (the on-disk view: two statements, not one per turn and term)
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
