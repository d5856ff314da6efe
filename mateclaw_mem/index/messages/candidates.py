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

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from mateclaw_mem.index.messages.bm25f import SatKey

if TYPE_CHECKING:
    from mateclaw_mem.index.messages.rank_types import View


# Bytes of dense arrays kept between searches (`_Dense`): at 100,000 messages of one user, the two
# arrays of a search (sums, and a group's best) take 1.6 MB. Never more than a sixteenth of the
# view's byte cache bound (`aml.cache-bytes`: 4 MiB of the default 64; none with 0), which the
# daemon's RSS is held to.
KEEP_BYTES = 4 << 20


class _Dense:
    """Zeroed float arrays over an owner's documents, lent to one search at a time and kept between
    searches, up to `KEEP_BYTES` in all (less under a small cache bound: `keep`).

    A fresh `np.zeros` over 100,000 documents comes from pages the allocator was given back (the RSS
    budget trims the heap when the daemon nears `aml.cache-bytes`: at 100,000 messages of one user,
    before 40 of 100 searches): touching them faulted each page in again, ~0.3 ms an array, two to
    four arrays a search. A kept array stays resident, and counts as the rest of the daemon in that
    budget. Zeroed when lent (`fill`: ~30 us for 800 KB), unless its borrower gave it back zeroed."""

    def __init__(self) -> None:
        # (array, how many of its first entries may not be 0: past those it is all zeros)
        self._free: list[tuple[Any, int]] = []
        self._lock = threading.Lock()

    @contextmanager
    def lent(self, n: int, *, keep: int = KEEP_BYTES, given_back_zeroed: bool = False) -> Iterator[Any]:
        """An array of `n` zeros; `keep`: the bytes the pool may keep once it is given back;
        `given_back_zeroed`: the borrower zeroes what it wrote before it returns (not when it raises)."""
        import numpy as np

        got = None
        with self._lock:
            for k, (b, _) in enumerate(self._free):
                if len(b) >= n:
                    got = self._free.pop(k)
                    break
        if got is None:
            buf, dirty = np.zeros(n), 0
        else:
            buf, dirty = got
            buf[: min(n, dirty)].fill(0.0)
        clean = False
        try:
            yield buf[:n]
            clean = given_back_zeroed
        finally:
            dirty = (dirty if dirty > n else 0) if clean else max(dirty, n)
            with self._lock:
                # The largest kept first (an owner's array serves every smaller one).
                kept = sorted([*self._free, (buf, dirty)], key=lambda e: len(e[0]), reverse=True)
                total, self._free = 0, []
                for e in kept:
                    if total + e[0].nbytes <= keep:
                        self._free.append(e)
                        total += e[0].nbytes


_DENSE = _Dense()


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
        terms = [*qweights, *(t for g in groups for t in g)]
        disk.read_terms(terms)
        disk.want_lengths(terms, key)  # (each block's missing lengths in one read, not one per term)
    else:
        # Every term read (and its turns given positions) before the arrays over positions are sized.
        view.load([*qweights, *(t for g in groups for t in g if t not in qweights)])
        n = len(view.ids)
        sat = view.sat_arrays
    bound = getattr(getattr(view, "cache", None), "max_bytes", None)  # (the on-disk view's byte cache)
    keep = KEEP_BYTES if bound is None else min(KEEP_BYTES, bound // 16)
    # (Both from `_DENSE`: arrays kept resident between searches. `scratch` is given back zeroed.)
    with _DENSE.lent(n, keep=keep) as acc, _DENSE.lent(n, keep=keep, given_back_zeroed=True) as scratch:
        # Which turns hold a term: where `acc` > 0, while every term's factor is > 0 (its values are);
        # a dense mask is kept only from a factor <= 0 on (a scatter per term over tens of thousands).
        hit: Any = None
        sample: Any = None  # the turns of the query term with the fewest of them, at least `limit` (the cut's)
        for t, qw in qweights.items():
            idx, vals = sat(t, key)
            if idx.size:
                idx = idx.astype(np.intp, copy=False)  # (once: numpy converts other index types at each use)
                c = qw * view.idf(t)
                if hit is None and not c > 0:
                    hit = acc > 0
                acc[idx] += c * vals
                if hit is not None:
                    hit[idx] = True
                if limit and idx.size >= limit and (sample is None or idx.size < sample.size):
                    sample = idx
        # Per group, the best of its terms per turn, added once: each term's best is gathered where it
        # occurs and zeroed once added (a later term's + 0.0 changes no sum), rather than a dense array
        # over the owner's every turn per group, added whole. A group adds >= 0, so `acc` > 0 still
        # says which turns hold a term.
        for group in groups:
            parts = []
            for t, rel in group.items():
                if t in qweights:
                    continue  # already a query term in its own right
                idx, vals = sat(t, key)
                if idx.size:
                    c = rel * view.idf(t)
                    w = c * vals if c > 0 else np.maximum(c * vals, 0.0)  # (the best starts at 0.0)
                    parts.append((idx.astype(np.intp, copy=False), w))
            if len(parts) > 1:
                for at, v in parts:
                    scratch[at] = np.maximum(scratch[at], v)
                for at, _ in parts:
                    best = scratch[at]
                    acc[at] += best
                    if hit is not None:
                        hit[at[best > 0]] = True
                    scratch[at] = 0.0
            elif parts:
                at, best = parts[0]
                acc[at] += best
                if hit is not None:
                    hit[at[best > 0]] = True
        if hit is None and sample is not None:
            # The `limit`-th best score of some turns is at most the `limit`-th best of all: every
            # turn at or above that is taken, the cut below finds the same turns among a few hundred
            # or thousand rather than every turn holding a word (tens of thousands at 100,000 messages:
            # their scores gathered and partitioned, twice a search). One term's turns: no repeats.
            some = acc[sample]
            floor = np.partition(some, len(some) - limit)[len(some) - limit]
            chosen = np.flatnonzero(acc >= floor) if floor > 0 else np.flatnonzero(acc > 0)
        else:
            chosen = np.flatnonzero(hit if hit is not None else acc > 0)  # (a float array's nonzero is ~6x a mask's)
        if limit and chosen.size > limit:
            scores = acc[chosen]
            cut = chosen.size - limit
            theta = np.partition(scores, cut)[cut]  # the limit-th best score
            above = chosen[scores > theta]
            tied = chosen[scores == theta]
            if not by_ordinal or len(tied) > limit - above.size:  # (all kept, as nearly always: sorted below)
                tied_ids = disk.ids_of(tied) if by_ordinal else view.cols.ids[tied]
                tied = tied[np.argsort(tied_ids, kind="stable")]  # a tie goes to the lower id
            chosen = np.concatenate((above, tied[: limit - above.size]))
        if by_ordinal:
            chosen.sort()
            return disk.place(chosen), acc[chosen]
        return chosen, acc[chosen]
