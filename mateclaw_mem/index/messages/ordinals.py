"""Array steps over an owner's ordinals (ascending document numbers, messages/postings.py) that one
search's view (messages/disk_view.py) runs on the postings it reads: unions, masks, lookups."""

from __future__ import annotations

from typing import Any

import numpy as np

EMPTY_I64 = np.zeros(0, dtype=np.int64)
_EMPTY_U64 = np.zeros(0, dtype=np.uint64)


def union(sorted_parts: list[Any]) -> Any:
    """The distinct ordinals of these ascending, distinct arrays, ascending, as int64 (one term's
    are already so; several: a sort of the runs, not np.unique's hashing)."""
    if len(sorted_parts) == 1:
        return sorted_parts[0].astype(np.int64)
    c = np.concatenate(sorted_parts).astype(np.int64)
    c.sort(kind="stable")
    return distinct(c)


def kept_of(values: Any, mask: Any) -> Any:
    """`values[mask]`; `values` itself when the mask keeps all, as it nearly always does (a posting
    scores 0 only where every field it is counted in weighs 0): a common word's tens of thousands of
    ordinals were copied at every search."""
    return values if mask.all() else values[mask]


def distinct(ascending: Any) -> Any:
    """An ascending array without its repeats."""
    return ascending[_run_starts(ascending)] if ascending.size else ascending


def _run_starts(ascending: Any) -> Any:
    """A mask of where each value first occurs in an ascending, non-empty array."""
    keep = np.empty(len(ascending), dtype=bool)
    keep[0] = True
    np.not_equal(ascending[1:], ascending[:-1], out=keep[1:])
    return keep


# numpy 2's `np.unique` hashes before it sorts: 67 against 13 us for the ~800 links of a search's
# candidates (cold caches), several times a search. These give its answers by a sort and a look at
# neighbours (tests/test_aml_ordinals.py holds them equal on random arrays).


def unique(values: Any) -> Any:
    """`np.unique(values)`: the distinct values, ascending."""
    return distinct(np.sort(values))


def first_of_each(values: Any) -> Any:
    """`np.unique(values, return_index=True)[1]`: where each distinct value first occurs, in the
    order of the values (a stable sort keeps the first of equals first)."""
    order = np.argsort(values, kind="stable")
    return order[_run_starts(values[order])] if len(order) else order


def unique_inverse(values: Any) -> tuple[Any, Any]:
    """`np.unique(values, return_inverse=True)`: the distinct values ascending, and for each value
    its place among them."""
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    if not len(order):
        return ranked, order
    keep = _run_starts(ranked)
    inverse = np.empty(len(order), dtype=np.intp)
    inverse[order] = np.cumsum(keep) - 1
    return ranked[keep], inverse


def is_one_of(values: Any, few: list[int]) -> Any:
    """`np.isin(values, few)` for a handful of values (the speakers a question names): a comparison
    each, not `np.isin`'s choice of method and its sort."""
    hit = np.zeros(values.shape, dtype=bool)
    for v in few:
        hit |= values == v
    return hit


def among_small(terms: list[tuple[str, Any, Any]], mine: Any) -> list[tuple[str, Any, Any]]:
    """`DiskView.sat_among_all`'s (term, indices into `mine`, their packed counts) for terms of
    few postings (ordinals ascending, packed counts), all of them at once: their ordinals looked
    up among `mine` (the candidates' ordinals, -1 for one without) - a dozen array operations for
    the lot, not a dozen per term. Each term's indices ascending, as the term-by-term lookup finds
    them."""
    known = np.flatnonzero(mine >= 0)
    order = np.argsort(mine[known], kind="stable")
    have, at_of = mine[known][order], known[order]  # the candidates' ordinals ascending, their indices
    if not len(have):
        return [(t, EMPTY_I64, _EMPTY_U64) for t, _, _ in terms]
    every = np.concatenate([o for _, o, _ in terms]) if len(terms) > 1 else terms[0][1]
    j = np.searchsorted(have, every)
    np.minimum(j, len(have) - 1, out=j)
    hit = np.flatnonzero(have[j] == every)
    term = np.searchsorted(np.cumsum([len(o) for _, o, _ in terms]), hit, side="right")
    at = at_of[j[hit]]
    by = np.lexsort((at, term))
    at, term, hit = at[by], term[by], hit[by]
    packed = (np.concatenate([pk for _, _, pk in terms]) if len(terms) > 1 else terms[0][2])[hit]
    cuts = np.searchsorted(term, np.arange(len(terms) + 1)).tolist()
    return [(t, at[cuts[k] : cuts[k + 1]], packed[cuts[k] : cuts[k + 1]]) for k, (t, _, _) in enumerate(terms)]
