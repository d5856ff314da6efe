"""The in-memory view the message ranking was first written for, kept as the reference the on-disk
index is held to (tests/test_aml_disk_index.py): one owner's turns parsed into memory - documents,
term postings and BM25F statistics - and kept up to date in place as turns are added.

Production searches read the same values from disk (mateclaw_mem/index/messages/postings.py,
disk_view.py); this view computes them from the parsed turns the simplest way.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from mateclaw_mem.index.messages.bm25f import SatKey, counts, normalisation, saturate, saturate_rows, stepped_averages
from mateclaw_mem.index.messages.columns import Columns
from mateclaw_mem.index.messages.fields import FACT_BASE
from mateclaw_mem.index.messages.turns import Doc, echo_of, unpack
from mateclaw_mem.index.tokenizer import tokenize

_saturate = saturate
_normalisation = normalisation


def _saturate_all(view: OwnerView, idx: Any, packed: Any, keys: list[SatKey]) -> list[tuple[Any, Any]]:
    """`_saturate` of the docs at positions `idx` with a term's `packed` counts (`unpack`), at once
    in numpy, for each of `keys`: (a mask of the docs scoring > 0, their values) per key."""
    import numpy as np

    if not len(idx):  # a word no turn holds (and nothing to normalise by in a view without turns)
        return [(np.zeros(0, dtype=bool), np.zeros(0)) for _ in keys]
    c = counts(packed)
    return [saturate_rows(c, view.norms_of(key)[idx], key) for key in keys]


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
        # term -> the docs holding it in any field, by position -> the doc's four counts of the
        # term packed in one int (`unpack`): a whole term's scores are computed from these and
        # `lens` in one vector operation (`_saturate_all`).
        self.postings: dict[str, dict[int, int]] = {}
        # Every doc's position (in the order first seen), its field lengths by position (a numpy
        # array, grown by doubling), what the ranking reads of it by position (`cols`), and per
        # term and ranking the term's saturated BM25F scores as numpy arrays over those positions
        # (messages/candidates.py), filled lazily per query term. An Add patches only the terms of
        # the turns it touched, unless the (1%-stepped) average field lengths moved: then every
        # term is dropped. A long history's search after an Add stays warm.
        self.ids: list[int] = []
        self.pos: dict[int, int] = {}
        self.lens: Any = None
        self.cols = Columns()
        self.arrays: dict[str, dict[SatKey, tuple[Any, Any]]] = {}
        # term -> docs whose entry changed since its arrays were made: merged into them at the next
        # use (scoring a whole common term again after every Add was most of an agent's search).
        self.patches: dict[str, set[int]] = {}
        self.norms: dict[SatKey, Any] = {}  # `norms_of`
        self.partial_reads: set[str] = set()  # big terms `sat_among` read without making their arrays
        self.keys: dict[SatKey, None] = {}  # the rankings searched with, in order (`sat_arrays`)
        self.stamp: tuple[int, int] | None = None  # (data_version, own writes) when last checked
        self.generation: str | None = None  # the index build it was parsed from (meta 'generation')

    def _remove_stats(self, d: Doc) -> None:
        self.n -= 1
        for i in range(4):
            self.len_sum[i] -= d.lens[i]
        self.df.subtract(d.body)
        p = self.pos[d.id]
        for t in d.terms:
            docs = self.postings[t]
            del docs[p]
            if not docs:
                del self.postings[t]

    def _add_stats(self, d: Doc) -> None:
        self.n += 1
        for i in range(4):
            self.len_sum[i] += d.lens[i]
        self.df.update(d.body)  # a sequence, not a mapping: Counter counts it in C
        p = self.pos[d.id]
        postings = self.postings
        assert d.counts is not None, "a doc is folded in once"
        for t, packed in d.counts.items():
            got = postings.get(t)
            if got is None:
                postings[t] = {p: packed}
            else:
                got[p] = packed
        d.counts = None  # the postings hold them now (`tf` reads them back)

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
                d.echo = echo_of(d, self.by_id[d.prev])
                self.cols.put_echo(self.pos[d.id], d.echo)
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
        avg = stepped_averages(self.len_sum, self.n)
        if avg != self.avg:
            self.avg = avg
            self.norms.clear()
            self.arrays.clear()
            self.patches.clear()
            return
        # Each entry depends only on its own turn: the terms of the turns just parsed are patched.
        for d in docs:
            old_terms = set(dropped[d.id].terms).difference(d.terms) if d.id in dropped else ()
            for t in itertools.chain(d.terms, old_terms):
                if t in self.arrays:
                    self.patches.setdefault(t, set()).add(d.id)

    def _relink(self, x: Doc) -> None:
        docs, pos = self.by_id, self.pos
        x.around = tuple(j for j in (x.prev, x.next) if j is not None)
        two = (docs[x.prev].prev if x.prev is not None else None, docs[x.next].next if x.next is not None else None)
        same = [k if k is not None and docs[k].speaker == x.speaker else None for k in two]
        x.thread = tuple(k for k in same if k is not None)
        self.cols.put_links(pos[x.id], *(-1 if j is None else pos[j] for j in (x.prev, x.next, *same)))

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
            self.norms.clear()
        self.lens[p] = d.lens
        for (_, _, b), norms in self.norms.items():
            norms[p] = _normalisation(b, self.lens[p], self.avg)
        self.cols.put(p, d)

    def load(self, terms: Iterable[str]) -> None:
        """(Every term's postings are in memory already: see disk_view.DiskView.load.)"""

    def prepare(self, pos: Any) -> None:
        """(Every turn's columns are in memory already: see disk_view.DiskView.prepare.)"""

    def norms_of(self, key: SatKey) -> Any:
        """Every position's BM25F length normalisation per field under `key`, 1 - b + b x len / avg
        (what each term's scores divide by), kept until the averages move."""
        got = self.norms.get(key)
        if got is None:
            got = self.norms[key] = _normalisation(key[2], self.lens, self.avg)
        return got

    def sat_arrays(self, term: str, key: SatKey) -> tuple[Any, Any]:
        """(positions, values > 0) of `term`'s saturated BM25F term frequency, tf / (k1 + tf), tf
        being the field-weighted, length-normalised count under `key` = (k1, field weights, field b),
        over the docs holding it in any field. Cached until the statistics change."""
        per_key = self.arrays.setdefault(term, {})
        if term in self.patches:
            self._merge_patches(term, per_key)
        got = per_key.get(key)
        if got is None:
            # Every ranking seen so far at once (a search uses two): the term's counts are read once.
            self.keys[key] = None
            missing = [key, *(k for k in self.keys if k != key and k not in per_key)][:4]
            import numpy as np

            docs = self.postings.get(term, {})
            idx = np.fromiter(docs, dtype=np.intp, count=len(docs))
            packed = np.fromiter(docs.values(), dtype=np.uint64, count=len(docs))
            for k, (keep, vals) in zip(missing, _saturate_all(self, idx, packed, missing), strict=True):
                per_key[k] = (idx[keep], vals)
            got = per_key[key]
        return got

    def sat_among_all(self, terms: Iterable[str], key: SatKey, pos: Any) -> dict[str, tuple[Any, Any] | None]:
        """`sat_among` term by term (everything is in memory: nothing to read together)."""
        listed = pos.tolist()
        return {t: self.sat_among(t, key, listed) for t in terms}

    def want_turns(self, ids: Iterable[int]) -> None:
        """(Every turn is in memory already: see disk_view.DiskView.want_turns.)"""

    def want_bodies(self, ids: Iterable[int]) -> None:
        """(Every body is in memory already: see disk_view.DiskView.want_bodies.)"""

    def sat_among(self, term: str, key: SatKey, pos: list[int]) -> tuple[Any, Any] | None:
        """`sat_arrays(term, key)` read for the docs at `pos` only, as (indices into `pos`, values),
        when the term's arrays are not cached and it holds many more docs than asked for (feedback
        terms are scored within a few hundred candidates: making the arrays of a word in 20,000
        turns, to read 300 of them, was a third of a search's first pass in a long history). A term
        read this way a second time gets its arrays made (and cached): it is a common feedback word.
        None: read `sat_arrays`. The same values either way."""
        docs = self.postings.get(term)
        if docs is None or len(docs) <= 8 * len(pos) or key in self.arrays.get(term, ()):
            return None
        if term in self.partial_reads:
            self.partial_reads.discard(term)
            return None
        self.partial_reads.add(term)
        import numpy as np

        found = [(k, p, c) for k, p in enumerate(pos) if (c := docs.get(p)) is not None]
        at = np.array([k for k, _, _ in found], dtype=np.intp)
        idx = np.array([p for _, p, _ in found], dtype=np.intp)
        packed = np.array([c for _, _, c in found], dtype=np.uint64)
        keep, vals = _saturate_all(self, idx, packed, [key])[0]
        return at[keep], vals

    def _merge_patches(self, term: str, per_key: dict[SatKey, tuple[Any, Any]]) -> None:
        """The changed docs' entries of `term` scored afresh (one at a time: `_saturate`, the same
        floats) and put in place of their old ones, in every ranking's arrays of the term."""
        import numpy as np

        changed = self.patches.pop(term)
        docs = self.postings.get(term, {})
        where = np.fromiter((self.pos[i] for i in changed), dtype=np.intp, count=len(changed))
        for key, (idx, vals) in list(per_key.items()):
            k1, w, b = key
            fresh = [(p, v) for p in where.tolist() if (c := docs.get(p)) is not None
                     and (v := _saturate(unpack(c), self.by_id[self.ids[p]].lens, w, b, k1, self.avg)) > 0]
            keep = ~np.isin(idx, where)
            per_key[key] = (np.concatenate((idx[keep], np.array([p for p, _ in fresh], dtype=np.intp))),
                            np.concatenate((vals[keep], np.array([v for _, v in fresh], dtype=np.float64))))

    def tf(self, doc_id: int) -> dict[str, tuple[int, int, int, int]]:
        """A doc's term -> (body, ctx, nb, dt) counts, read back from the postings (for readers and
        tests; the ranking reads the postings)."""
        p = self.pos[doc_id]
        return {t: unpack(self.postings[t][p]) for t in self.by_id[doc_id].terms}

    def idf(self, term: str) -> float:
        df = self.df.get(term, 0)
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))
