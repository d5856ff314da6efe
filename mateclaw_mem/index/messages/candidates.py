"""The first stage of a message search, in numpy: which turns are worth ranking at all.

Summing every query term's BM25F score over every turn that holds it, then keeping the best
`Ranking.max_candidates`, is the one part of a search that grows with the owner's history: a
common word in 30,000 turns of one user is 30,000 dict updates, and the search took 29 ms
(scripts/bench/aml_scale.py). Here each term's saturated scores are two arrays (the turns'
positions in the view, their values), cached in the view, so the sums and the cut are a few vector
operations; the later steps work on the same positions (messages/scoring.py).

The sums are the very floats the dict loop made - the same products, added in the same term order -
so the turns kept, and every later step of the ranking, are unchanged (tests/test_aml_candidates.py
compares the two on random histories).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from mateclaw_mem.index.messages.bm25f import SatKey

if TYPE_CHECKING:
    from mateclaw_mem.index.messages.rank_types import View


def candidates(view: View, qweights: dict[str, float], groups: Iterable[dict[str, float]], key: SatKey,
               limit: int) -> tuple[Any, Any]:
    """(positions, raw scores) of the best `limit` turns (0 = all) holding any query term or any
    related term of a lexicon group. Raw score: the sum over query terms of weight x idf x
    saturated tf, plus, per group, the best of its related terms (each question word counts once
    per turn through its best related term). Ties at the cut go to the lower turn id."""
    import numpy as np

    groups = list(groups)
    disk: Any = view
    by_ordinal = hasattr(disk, "ord_sat")  # the on-disk view: sums over ordinals, positions for the kept only
    if by_ordinal:
        n = disk.n
        sat = disk.ord_sat
        disk.read_terms([*qweights, *(t for g in groups for t in g)])
    else:
        # Every term read (and its turns given positions) before the arrays over positions are sized.
        view.load([*qweights, *(t for g in groups for t in g if t not in qweights)])
        n = len(view.ids)
        sat = view.sat_arrays
    acc = np.zeros(n)
    hit = np.zeros(n, dtype=bool)
    for t, qw in qweights.items():
        idx, vals = sat(t, key)
        if idx.size:
            acc[idx] += (qw * view.idf(t)) * vals
            hit[idx] = True
    for group in groups:
        best: np.ndarray | None = None
        for t, rel in group.items():
            if t in qweights:
                continue  # already a query term in its own right
            idx, vals = sat(t, key)
            if not idx.size:
                continue
            if best is None:
                best = np.zeros(n)
            best[idx] = np.maximum(best[idx], (rel * view.idf(t)) * vals)
        if best is not None:
            acc += best  # + 0.0 leaves every other turn's sum as it was
            hit |= best > 0
    chosen = np.flatnonzero(hit)
    if limit and chosen.size > limit:
        scores = acc[chosen]
        cut = chosen.size - limit
        theta = np.partition(scores, cut)[cut]  # the limit-th best score
        above = chosen[scores > theta]
        tied = chosen[scores == theta]
        tied_ids = disk.ids_of(tied) if by_ordinal else view.cols.ids[tied]
        tied = tied[np.argsort(tied_ids, kind="stable")]  # a tie goes to the lower id
        chosen = np.concatenate((above, tied[: limit - above.size]))
    if by_ordinal:
        chosen.sort()
        return disk.place(chosen), acc[chosen]
    return chosen, acc[chosen]
