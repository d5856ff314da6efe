"""One search's window on an owner's on-disk index (messages/postings.py): what the ranking reads,
read when it asks, at positions local to the search.

The ranking (messages/ranking.py, candidates.py, scoring.py) works on numpy arrays indexed by
position. Here a position is given to each document the search touches - those holding a query
term, the candidates' neighbours - in the order met, so every array is as long as what the search
read, never the owner's history. The floats are those of the in-memory view the ranking was written
for (tests/support/owner_view.py): the same counts, lengths and statistics, the same operations
(tests/test_aml_disk_index.py compares the two on random histories).

Postings, document segments, rows and speakers read from disk are kept in a `ByteCache`
(messages/view_cache.py), bounded in bytes (`aml.cache-bytes`) and never needed for an answer: the
writer (postings.PostingWriter) tells it which rows it rewrote, and a write by another process (the
owner's version moved) drops the owner's entries.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from mateclaw_mem.index.messages.bm25f import (
    SatKey,
    counts,
    field_norms,
    normalisation,
    saturate_fields,
    saturate_rows,
    stepped_averages,
)
from mateclaw_mem.index.messages.columns import Columns
from mateclaw_mem.index.messages.delta import combine, decode, unpack_rows
from mateclaw_mem.index.messages.disk_docs import CHUNK, Bodies, Docs, FetchedRows, Frequencies, in_list
from mateclaw_mem.index.messages.docfields import TEXT
from mateclaw_mem.index.messages.ordinals import EMPTY_I64, among_small, distinct, kept_of, union, unique
from mateclaw_mem.index.messages.postings import HAS_NUMBER, HAS_TIME, SEG_DOCS
from mateclaw_mem.index.messages.view_cache import (
    BLOCK,
    BLOCK_SEGS,
    ByteCache,
    DocBlock,
    Overlay,
    RowChunk,
    RowStore,
    RowTables,
)
from mateclaw_mem.index.tokenizer import tokenize

_LOOK_AHEAD_DOCS = 8 * SEG_DOCS  # `want_lengths` reads ahead for owners of more documents than this
# (k, fields) -> those fields' lengths of a term's documents from its k-th posting on (`DiskView._saturated`)
_FieldLengths = Callable[[int, list[int] | None], Any]  # (None: all four fields, as one (n, 4) array)
_FIELDS_FROM = 1 << 15  # postings past which `_saturate` goes field by field (an (n, 4) float array > 1 MiB)


# A document's row as `prepare` reads it: plain tuples (sqlite3.Row's lookups by name were a third of
# reading a few hundred candidates).
_FEATURES = ("SELECT d.id, d.speaker, d.conversation_id, d.is_question, p.qshare, p.echo, p.flags, p.names,"
             " p.prev, p.next, p.tprev, p.tnext FROM docs d JOIN pfeat p ON p.id = d.id WHERE d.id IN ({marks})"
             " ORDER BY d.id")
# A hit's text is the log's (docfields.TEXT); one gone from the log (forgotten, deleted) is no hit.
# (Those without text are left out after the read, not by a WHERE on it: SQLite flattens such a
# subquery and looked each hit up in the log twice, once for the filter and once for the value.)
_HITS = ("SELECT d.id, d.conversation_id, d.role, d.speaker, " + TEXT + " AS content, d.ts_ms FROM docs d"
         " WHERE d.id IN ({marks})")


class DiskView:
    """The ranking's view of one owner for one search (read under the index lock)."""

    def __init__(self, conn: sqlite3.Connection, row: sqlite3.Row, cache: ByteCache, *,
                 batch_bodies: bool = False) -> None:
        self.conn, self.cache = conn, cache
        # A body asked for (feedback terms of the top turns) brings those of every candidate read with
        # it: one query, not one per turn - where a query is a round trip (the PostgreSQL store).
        self.batch_bodies = batch_bodies
        self.okey: int = row["okey"]
        # What the cache's entries must be of (`ByteCache.get`): searches run side by side, each in
        # its own snapshot (a writer may have committed the owner's next version meanwhile).
        self.version: tuple[str | None, int] = (row["generation"], row["version"])
        self.agent: str = row["agent"]
        self.owner: str = row["owner"]
        self.n: int = row["n"]
        self.avg = stepped_averages([row["l0"], row["l1"], row["l2"], row["l3"]], self.n)
        self.speakers = self._speakers()
        self._delta = self._read_deltas()
        self.df = Frequencies(self)
        self.by_id = Docs(self)
        self.bodies = Bodies(self)
        self.rows = FetchedRows()  # `_FEATURES` rows read
        self.tables: RowTables | None = None  # the string codes of the rows read (`fetch`)
        self._idf: dict[str, float] = {}
        self._read: dict[str, tuple[Any, Any, int]] = {}  # `_term` results of this search
        self._term_norms: dict[tuple[str, tuple[float, ...], int], Any] = {}  # `_norms`'
        self._pos_key: tuple[list[int], Any, Any] | None = None  # `sat_among`'s last `pos`, sorted
        # `sat_among_all`'s last `pos`: as an array, and what it found there by (term, key)
        self._pos_array: tuple[Any, Any, dict[tuple[str, SatKey], tuple[Any, Any]]] | None = None
        self.cols = Columns(links_set_when_read=True)  # (`prepare` sets them)
        self.size = 0
        self.lens: Any = np.zeros((0, 4))
        self._ords: Any = EMPTY_I64  # per position: its ordinal, -1 for a neighbour known by id only
        self._feat: Any = np.zeros(0, dtype=bool)  # per position: its columns are read
        self._terms: dict[str, tuple[Any, Any]] = {}  # term -> (positions, packed counts)
        self._sat: dict[tuple[str, SatKey], tuple[Any, Any]] = {}
        self._osat: dict[tuple[str, SatKey], tuple[Any, Any]] = {}  # `ord_sat`'s
        self._looked: dict[tuple[str, SatKey], tuple[Any, ...]] = {}  # `_values` found by `want_lengths`
        self._by_id: tuple[Any, Any] | None = None  # (sorted ids, their positions), made when asked
        self._by_ord: tuple[Any, Any] | None = None

    @property
    def ids(self) -> Any:
        return self.cols.ids[: self.size]

    def idf(self, term: str) -> float:
        got = self._idf.get(term)
        if got is None:
            df = self.df.get(term, 0) or 0
            got = self._idf[term] = math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))
        return got

    # -- reading ---------------------------------------------------------------------------------------

    def _speakers(self) -> dict[str, frozenset[str]]:
        key = ("s", self.okey)
        got = self.cache.get(key, self.version)
        if got is None:
            names = [r[0] for r in self.conn.execute("SELECT speaker FROM pspeakers WHERE okey = ? ORDER BY speaker",
                                                     (self.okey,))]
            got = {s: frozenset(tokenize(s)) for s in names}
            self.cache.put(key, got, sum(64 + 2 * len(s) for s in names), self.version)
        return got

    def _read_deltas(self) -> Overlay:
        """The owner's unmerged Adds (messages/delta.py), oldest first, as an `Overlay`: kept beside
        them (a union of a few dozen rows' terms at every search was a millisecond, and each term's
        entries gathered from every row at every search another two); one more row keeps what the
        overlay worked out of the terms it does not hold (`Overlay.extended`)."""
        ids = tuple(r[0] for r in self.conn.execute("SELECT id FROM pdelta WHERE okey = ? ORDER BY id", (self.okey,)))
        key = ("u", self.okey)
        got: Overlay | None = self.cache.get(key, self.version)
        if got is not None and got.ids == ids:
            return got
        have = dict(zip(got.ids, got.deltas, strict=True)) if got is not None else {}
        missing = [i for i in ids if i not in have]
        for k in range(0, len(missing), CHUNK):
            marks, bound = in_list(missing[k : k + CHUNK])
            for r in self.conn.execute("SELECT id, first_new, terms, counts, ords, packed FROM pdelta"
                                       f" WHERE id IN ({marks})", bound):
                have[r[0]] = decode(*tuple(r)[1:])
        deltas = [have[i] for i in ids]
        if got is not None and ids[: len(got.ids)] == got.ids:
            got, touched = got.extended(ids, deltas)
            self.cache.drop_values(self.okey, touched)  # (no search reads them again: their rows moved on)
        else:
            got = Overlay(ids, deltas, set().union(*(d.terms for d in deltas)), {})
        self.cache.put(key, got, got.nbytes, self.version)
        return got

    def _term(self, term: str) -> tuple[Any, Any, int]:
        """(ordinals ascending, packed counts, body df) of a term's postings: its segments', with
        the unmerged Adds' entries over them (read once per search)."""
        got = self._read.get(term)
        if got is None:
            got = self._read[term] = self._combined(term)
        return got

    def _combined(self, term: str, base: tuple[Any, Any, int] | None = None) -> tuple[Any, Any, int]:
        ords, packed, df = base if base is not None else self._base(term)
        extra = self._delta.entries(term)
        if extra is not None:
            ords, packed = combine((ords, packed), [extra[:2]])
            df += extra[2]
        self.df.got[term] = df
        return ords, packed, df

    def read_terms(self, terms: Iterable[str]) -> None:
        """Read the postings of these terms that this search has not, those not cached in one
        statement (a search asks for dozens - its words, their lexicon relatives, the feedback's -
        and most are a few rows or none: a statement each was a third of a small owner's reads)."""
        todo = [t for t in dict.fromkeys(terms) if t not in self._read and self.cache.get(
            ("t", self.okey, t), self.version) is None and self.cache.get(("tp", self.okey, t), self.version) is None]
        for k in range(0, len(todo), CHUNK):
            part = todo[k : k + CHUNK]
            rows: dict[str, list[Any]] = {t: [] for t in part}
            marks, bound = in_list(part)
            for r in self.conn.execute("SELECT term, df, ords, packed FROM postings WHERE okey = ? AND term IN"
                                       f" ({marks}) ORDER BY term, first", (self.okey, *bound)):
                rows[r[0]].append(r[1:])
            for t in part:
                self._read[t] = self._combined(t, self._kept(t, rows[t], None))

    def _base(self, term: str) -> tuple[Any, Any, int]:
        got = self.cache.get(("t", self.okey, term), self.version)
        if got is None:
            # What a merge left of the term (`ByteCache.wrote`): only the segments from its cut on read.
            kept = self.cache.get(("tp", self.okey, term), self.version)
            sql = "SELECT df, ords, packed FROM postings WHERE okey = ? AND term = ?"
            rows = self.conn.execute(sql + " AND first >= ? ORDER BY first", (self.okey, term, kept[2])).fetchall() \
                if kept is not None else []
            if not rows:
                kept, rows = None, self.conn.execute(sql + " ORDER BY first", (self.okey, term)).fetchall()
            got = self._kept(term, rows, kept)
        return got

    def _kept(self, term: str, rows: list[Any], kept: Any) -> tuple[Any, Any, int]:
        """A term's postings from its (df, ords, packed) rows ascending, after `kept`'s (what a merge
        left), put in the cache."""
        segs = unpack_rows(rows)
        if kept is not None:
            segs.insert(0, kept[:2])
        if not rows:
            got = (np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.uint64), 0)
        elif len(segs) == 1:
            got = (*segs[0], rows[-1][0])  # (the last segment's df is the term's)
        else:
            got = (np.concatenate([o for o, _ in segs]), np.concatenate([p for _, p in segs]), rows[-1][0])
        self.cache.put(("t", self.okey, term), got, got[0].nbytes + got[1].nbytes + len(term), self.version)
        return got

    def _resolve(self, ords: Any) -> tuple[Any, Any]:
        """(ids, lengths) of the documents at these ordinals (ascending; `pdocs`), gathered block by
        block (`DocBlock`: a common term's turns span most of a long history's segments)."""
        ids, lens = np.empty(len(ords), dtype=np.int64), np.empty((len(ords), 4))
        for a, e, block, local in self._blocks(ords):
            ids[a:e] = block.ids[local]
            lens[a:e] = block.lens[local]
        return ids, lens

    def _blocks(self, ords: Any) -> Iterator[tuple[int, int, DocBlock, Any]]:
        """(start, end, block, ordinals within it) of each run of these ordinals (ascending) in one
        `DocBlock`."""
        blocks = ords // BLOCK
        starts = distinct(blocks)
        cuts = [*np.searchsorted(blocks, starts).tolist(), len(ords)]
        for j, b in enumerate(starts.tolist()):
            local = ords[cuts[j] : cuts[j + 1]] - b * BLOCK
            yield cuts[j], cuts[j + 1], self._block(b, local), local

    def _block(self, b: int, local: Any) -> DocBlock:
        """Block `b` of the owner's `pdocs`, holding at least the documents at `local` (ordinals
        within it, ascending): the cached one, or a copy of it with the segments it lacks read in."""
        key = ("d", self.okey, b)
        got: DocBlock | None = self.cache.get(key, self.version)
        segs = distinct(local // SEG_DOCS)
        if got is not None:
            segs = segs[~got.have[segs]]
            if not len(segs):
                return got
        want = (segs + b * BLOCK_SEGS).tolist()
        rows: list[tuple[int, bytes, bytes]] = []
        for k in range(0, len(want), CHUNK):
            marks, bound = in_list(want[k : k + CHUNK])
            rows += self.conn.execute(f"SELECT seg, ids, lens FROM pdocs WHERE okey = ? AND seg IN ({marks})",
                                      (self.okey, *bound)).fetchall()
        size = max(len(got.ids) if got is not None else 0, (int(segs[-1]) + 1) * SEG_DOCS)
        ids, lens = np.zeros(size, dtype=np.int64), np.zeros((size, 4), dtype=np.uint32)
        have = np.zeros(BLOCK_SEGS, dtype=bool)
        if got is not None:
            ids[: len(got.ids)], lens[: len(got.ids)], have[:] = got.ids, got.lens, got.have
        for seg, seg_ids, seg_lens in rows:
            at = (seg - b * BLOCK_SEGS) * SEG_DOCS
            got_ids = np.frombuffer(seg_ids, dtype=np.int64)
            ids[at : at + len(got_ids)] = got_ids
            lens[at : at + len(got_ids)] = np.frombuffer(seg_lens, dtype=np.uint32).reshape(-1, 4)
            have[seg - b * BLOCK_SEGS] = True
        block = DocBlock(ids, lens, have)
        self.cache.put(key, block, block.nbytes, self.version)
        return block

    # -- positions -------------------------------------------------------------------------------------

    @staticmethod
    def _lookup(index: tuple[Any, Any], values: Any) -> Any:
        keys, positions = index
        if not len(keys):
            return np.full(len(values), -1, dtype=np.int64)
        j = np.searchsorted(keys, values)
        jj = np.minimum(j, len(keys) - 1)
        return np.where((j < len(keys)) & (keys[jj] == values), positions[jj], -1)

    def _id_index(self) -> tuple[Any, Any]:
        if self._by_id is None:
            order = np.argsort(self.ids, kind="stable")
            self._by_id = (self.ids[order], order)
        return self._by_id

    def _ord_index(self) -> tuple[Any, Any]:
        if self._by_ord is None:
            order = np.argsort(self._ords[: self.size], kind="stable")
            self._by_ord = (self._ords[: self.size][order], order)
        return self._by_ord

    def _register(self, ids: Any, lens: Any | None = None, ords: Any | None = None) -> Any:
        """Positions of these (distinct) documents, new ones appended; with `ords`, their ordinals and
        lengths are stored too (a neighbour known by id only gets them when a term holds it)."""
        if self.size:
            at = self._lookup(self._id_index(), ids)
            new = at < 0
            k = int(new.sum())
        else:
            at, new, k = None, None, len(ids)
        if not k:
            if ords is not None:
                self._ords[at], self.lens[at] = ords, lens
                self._by_ord = None
            return at
        start, end = self.size, self.size + k
        if end > self.cols.cap:
            self.cols.reserve(end)
        if end > len(self.lens):
            cap = max(64, end + end // 4)  # (a first load sizes it: later ones add a few)
            lens_, ords_, feat_ = np.empty((cap, 4)), np.empty(cap, dtype=np.int64), np.zeros(cap, dtype=bool)
            lens_[: self.size], ords_[: self.size], feat_[: self.size] = (
                self.lens[: self.size], self._ords[: self.size], self._feat[: self.size])
            self.lens, self._ords, self._feat = lens_, ords_, feat_
        self.size = end
        self._by_id = None
        if k == len(ids):  # all new: positions start .. end in their order, slices rather than gathers
            self.cols.ids[start:end] = ids
            if ords is None:
                self._ords[start:end], self.lens[start:end] = -1, 0.0
            else:
                self._ords[start:end], self.lens[start:end] = ords, lens
                self._by_ord = None
            return np.arange(start, end)
        assert at is not None and new is not None
        at[new] = np.arange(start, end)
        self.cols.ids[start:end] = ids[new]
        self._ords[start:end], self.lens[start:end] = -1, 0.0
        if ords is not None:
            self._ords[at], self.lens[at] = ords, lens
            self._by_ord = None
        return at

    def load(self, terms: Iterable[str]) -> None:
        """Read the postings of `terms` and give every document holding one a position."""
        new = [t for t in dict.fromkeys(terms) if t not in self._terms]
        if not new:
            return
        read = {t: self._term(t) for t in new}
        every = union([o for o, _, _ in read.values()])
        if every.size and not self.size:  # the first: every document is new, given positions in this order
            pos = self._register(*self._resolve(every), every)
        elif every.size:
            pos = self._lookup(self._ord_index(), every)
            miss = every[pos < 0]
            if miss.size:
                self._register(*self._resolve(miss), miss)
                pos = self._lookup(self._ord_index(), every)
        else:
            pos = EMPTY_I64
        for t, (o, packed, _) in read.items():
            if len(read) == 1:  # `every` is this term's ordinals
                self._terms[t] = (pos if len(o) else EMPTY_I64, packed)
            else:
                self._terms[t] = (pos[np.searchsorted(every, o)] if len(o) else EMPTY_I64, packed)

    def sat_arrays(self, term: str, key: SatKey) -> tuple[Any, Any]:
        """(positions, values > 0) of `term`'s saturated BM25F term frequency under `key` over the
        documents holding it (`OwnerView.sat_arrays`)."""
        got = self._sat.get((term, key))
        if got is None:
            self.load([term])
            idx, packed = self._terms[term]
            if not len(idx):
                got = (EMPTY_I64, np.zeros(0))
            else:
                sat = self._saturated(term, key, packed, lambda k, fields: self.lens[idx[k:]] if fields is None
                                      else [self.lens[idx[k:], f] for f in fields])
                got = (kept_of(idx, sat[0]), sat[1])
            self._sat[(term, key)] = got
        return got

    def ord_sat(self, term: str, key: SatKey) -> tuple[Any, Any]:
        """`sat_arrays` by ordinal, not position: (ordinals, values > 0). The first stage sums these
        over the owner's ordinals (candidates.py) and gives positions to the turns it keeps only -
        not to the tens of thousands holding a common word (resolving and placing them was a
        quarter of a search at 100k messages)."""
        got = self._osat.get((term, key))
        if got is None:
            o, packed, _ = self._term(term)
            if not len(o):
                got = (EMPTY_I64, np.zeros(0))
            else:
                sat = self._saturated(term, key, packed, lambda k, fields: self._field_lengths(o[k:], fields))
                got = (kept_of(o, sat[0]), sat[1])
            self._osat[(term, key)] = got
        return got

    def _saturated(self, term: str, key: SatKey, packed: Any, lens: _FieldLengths) -> tuple[Any, Any]:
        """(a mask of the term's postings scoring > 0, their values) under `key`; `lens(k, fields)`:
        those fields' lengths of the documents of the postings from the k-th on (fresh float64
        arrays), asked for only when not kept."""
        got = self._looked.pop((term, key), None)  # (`want_lengths` looked it up a moment ago)
        ckey, sat, kept, k = got if got is not None else self._values(term, key, packed)
        if sat is None:
            if k:
                assert kept is not None
                tail = self._saturate(term, key, packed[k:], k, lens)
                sat = (np.concatenate((kept[1], tail[0])), np.concatenate((kept[2], tail[1])))
            else:
                sat = self._saturate(term, key, packed, 0, lens)
            self.cache.put(ckey, sat, sat[0].nbytes + sat[1].nbytes + len(term), self.version)
            if ckey[4]:  # what the rows since extended is inside these values now (or no longer valid)
                self.cache.discard(("va", self.okey, term, key, self.avg))
        return sat

    def _values(self, term: str, key: SatKey, packed: Any) -> tuple[tuple[Any, ...], Any, Any, int]:
        """(the cache key of the term's saturated values under `key`, those values kept or None, and
        when None, what a merge or an Add left of them and from which posting on the rest are scored)."""
        # Kept across searches for what they depend on: the term's postings (its segments, the
        # unmerged rows holding it: a grown turn's new lengths come with new entries for each of
        # its terms), the average lengths and the key.
        extra = self._delta.entries(term)
        ckey = ("v", self.okey, term, key, extra[3] if extra is not None else (), self.avg)
        sat = self.cache.get(ckey, self.version)
        if sat is not None:
            return ckey, sat, None, 0
        # The values a merge left (`ByteCache.wrote`: its first `k` postings'), while no unmerged
        # row holds one of those postings: only the rest are scored.
        kept = self.cache.get(("vp", self.okey, term, key, self.avg), self.version)
        k = kept[0] if kept is not None and kept[0] <= len(packed) else 0
        if k and extra is not None and len(extra[0]) and extra[0][0] <= self._term(term)[0][k - 1]:
            k = 0
        if not k and extra is not None:  # or what the unmerged rows since extend (`ByteCache.drop_values`)
            got = self.cache.get(("va", self.okey, term, key, self.avg), self.version)
            if got is not None and self._delta.adds_after(term, got[0], self._term(term)[0], len(got[1])):
                kept, k = (len(got[1]), got[1], got[2]), len(got[1])
        return ckey, None, kept, k

    def want_lengths(self, terms: Iterable[str], key: SatKey) -> None:
        """Read now the document lengths that `ord_sat` of these terms under `key` will gather (of
        the postings whose values are not kept): each block's missing segments in one statement and
        one copy of the block. Read term by term, a cold owner's block was copied (up to 768 KB)
        and a statement run for nearly every term of a search. (Not for an owner of a few
        segments: its first terms read most of them, and looking ahead cost more than it saved.)"""
        if self.n <= _LOOK_AHEAD_DOCS:
            return
        parts = []
        for t in dict.fromkeys(terms):
            if (t, key) in self._osat:
                continue
            o, packed, _ = self._term(t)
            if not len(o):
                continue
            got = self._looked[(t, key)] = self._values(t, key, packed)
            if got[1] is None:
                parts.append(o[k:] if (k := got[3]) else o)
        if not parts:
            return
        # (The terms' ordinals together: a few array operations in all, not a few per term.)
        every = (np.concatenate(parts) if len(parts) > 1 else parts[0]).astype(np.int64) // SEG_DOCS
        every.sort()
        every = distinct(every)
        blocks = every // BLOCK_SEGS
        starts = distinct(blocks)
        cuts = [*np.searchsorted(blocks, starts).tolist(), len(every)]
        for j, b in enumerate(starts.tolist()):
            self._block(b, (every[cuts[j] : cuts[j + 1]] - b * BLOCK_SEGS) * SEG_DOCS)

    def _saturate(self, term: str, key: SatKey, packed: Any, k: int, lens: _FieldLengths) -> tuple[Any, Any]:
        """`saturate_rows` of these postings (the term's from the k-th on), field by field for a
        common word's (`bm25f.saturate_fields`: the same floats, without (n, 4) temporaries past the
        allocator's mmap threshold); a few thousand at once, where fewer array operations count more."""
        if len(packed) > _FIELDS_FROM:
            return saturate_fields(packed, self._norms(term, key[2], k, lens, by_field=True), key)
        return saturate_rows(counts(packed), self._norms(term, key[2], k, lens, by_field=False), key)

    def _norms(self, term: str, b: tuple[float, ...], k: int, lens: _FieldLengths, *, by_field: bool) -> Any:
        """The length normalisation of the documents of a term's postings from the k-th on (by field:
        `bm25f.field_norms`): the same for the head's and the tail's rankings, whose keys differ in
        weights only (a common word's tens of thousands of lengths gathered and normalised once a
        search, not twice)."""
        got = self._term_norms.get((term, b, k))
        if got is None:
            if by_field:
                fields = [f for f in range(4) if b[f] != 0.0]
                cols = dict(zip(fields, lens(k, fields), strict=True))
                got = field_norms(b, cols.__getitem__, self.avg)
            else:
                got = normalisation(b, lens(k, None), self.avg, own=True)
            self._term_norms[(term, b, k)] = got
        return got

    def _field_lengths(self, ords: Any, fields: list[int] | None) -> Any:
        """These fields' lengths (float64, one array each; `fields` None: all four, one (n, 4)
        array) of the documents at these ordinals (ascending), gathered block by block (`_resolve`)."""
        if fields is None:
            lens = np.empty((len(ords), 4))
            for a, e, block, local in self._blocks(ords):
                lens[a:e] = block.lens[local]
            return lens
        outs = [np.empty(len(ords)) for _ in fields]
        for a, e, block, local in self._blocks(ords):
            got = block.lens[local]
            for out, f in zip(outs, fields, strict=True):
                out[a:e] = got[:, f]
        return outs

    def ids_of(self, ords: Any) -> Any:
        """The ids of the documents at these ordinals (ascending)."""
        return self._resolve(ords)[0]

    def place(self, ords: Any) -> Any:
        """Positions of the documents at these ordinals (ascending, distinct), given now to those
        without one."""
        if not len(ords):
            return EMPTY_I64
        if not self.size:
            return self._register(*self._resolve(ords), ords)
        pos = self._lookup(self._ord_index(), ords)
        miss = pos < 0
        if miss.any():
            pos[miss] = self._register(*self._resolve(ords[miss]), ords[miss])
        return pos

    def sat_among(self, term: str, key: SatKey, pos: list[int]) -> tuple[Any, Any]:
        """`sat_arrays(term, key)` for the documents at `pos` only, as (indices into `pos`, values):
        no position is given to the term's other documents."""
        return self.sat_among_all((term,), key, pos)[term]

    def sat_among_all(self, terms: Iterable[str], key: SatKey, pos: Any) -> dict[str, tuple[Any, Any]]:
        """`sat_among` of each of these terms. The terms' postings are read in one statement, and
        the entries found at `pos` scored together: a few array operations for all of them rather
        than a dozen per term (the feedback's twenty terms, up to six times a search)."""
        if self._pos_array is None or self._pos_array[0] is not pos:
            # (The same `pos` for every term of a step, and for the two feedback passes of a ranking,
            # whose terms are mostly the same: what one found, the other takes.)
            self._pos_array = (pos, np.asarray(pos, dtype=np.int64), {})
        p, done = self._pos_array[1], self._pos_array[2]
        out: dict[str, tuple[Any, Any]] = {}
        todo = []
        for t in terms:
            got = done.get((t, key))
            if got is None:
                todo.append(t)
            else:
                out[t] = got
        self.read_terms(todo)
        found: list[tuple[str, Any, Any]] = []  # (term, indices into `pos`, their packed counts)
        mine: Any = None
        as_type: dict[Any, Any] = {}
        small: list[tuple[str, Any, Any]] = []  # terms with few postings: looked up together
        for term in todo:
            if (term, key) in self._sat or term in self._terms:
                out[term] = self._among_loaded(term, key, pos)
                continue
            o, packed, _ = self._term(term)
            if not len(o) or not len(p):
                out[term] = (EMPTY_I64, np.zeros(0))
                continue
            if len(o) <= 4 * len(p):
                small.append((term, o, packed))
                continue
            if mine is None:
                mine = self._ords[p]
                known = mine >= 0
            # In the postings' own type (a neighbour's -1 becomes the largest: never found), so
            # searchsorted does not copy the term's every ordinal to int64 first.
            if o.dtype not in as_type:
                as_type[o.dtype] = mine.astype(o.dtype)
            j = np.searchsorted(o, as_type[o.dtype])
            jj = np.minimum(j, len(o) - 1)
            at = np.flatnonzero((j < len(o)) & (o[jj] == mine) & known)
            found.append((term, at, packed[jj[at]]))
        if small:
            found += among_small(small, self._ords[p])
        if found:
            at = np.concatenate([f[1] for f in found]) if len(found) > 1 else found[0][1]
            packed = np.concatenate([f[2] for f in found]) if len(found) > 1 else found[0][2]
            keep, vals = saturate_rows(counts(packed), normalisation(key[2], self.lens[p[at]], self.avg, own=True),
                                       key)
            # Each term's share of the rows, and of the values (those of the rows kept).
            ends = np.cumsum([len(f[1]) for f in found]).tolist()
            kept = np.concatenate(([0], np.cumsum(keep))) if len(found) > 1 else None
            a = 0
            for (term, t_at, _), e in zip(found, ends, strict=True):
                if kept is None:
                    out[term] = (t_at[keep], vals)
                else:
                    out[term] = (t_at[keep[a:e]], vals[kept[a] : kept[e]])
                a = e
        done.update(((t, key), out[t]) for t in todo)
        return out

    def _among_loaded(self, term: str, key: SatKey, pos: Any) -> tuple[Any, Any]:
        idx, vals = self.sat_arrays(term, key)
        if not len(pos):
            return EMPTY_I64, np.zeros(0)
        if self._pos_key is None or self._pos_key[0] is not pos:
            order = np.argsort(np.asarray(pos, dtype=np.int64), kind="stable")
            self._pos_key = (pos, np.asarray(pos, dtype=np.int64)[order], order)
        slot = self._lookup(self._pos_key[1:], idx)
        hit = slot >= 0
        return slot[hit], vals[hit]

    def prepare(self, pos: Any) -> None:
        """Read the columns of the documents at `pos` (the boosts' inputs and links) and give their
        neighbours positions (in the same conversation: their conversation is known)."""
        todo = unique(pos[~self._feat[pos]]) if len(pos) else pos
        if not len(todo):
            return
        rows = self.fetch(self.cols.ids[todo])
        if rows is None:
            return
        cols = self.cols
        at = self._lookup(self._id_index(), rows.ids)
        cols.conv[at], cols.speaker[at] = rows.conv, rows.speaker
        cols.is_question[at] = rows.is_question
        cols.question_share[at] = rows.qshare
        cols.echo[at] = rows.echo
        cols.has_time[at], cols.has_number[at] = (rows.flags & HAS_TIME) != 0, (rows.flags & HAS_NUMBER) != 0
        cols.names[at] = rows.names
        self._feat[at] = True
        cols.links[at] = -1
        present = rows.links >= 0
        if present.any():
            linked = rows.links[present]
            distinct = unique(linked)
            q = self._register(distinct)[np.searchsorted(distinct, linked)]
            src = np.nonzero(present)
            cols.links[at[src[0]], src[1]] = q
            lone = ~self._feat[q]  # a neighbour's conversation is its turn's
            cols.conv[q[lone]] = rows.conv[src[0][lone]]

    def want_turns(self, ids: Iterable[int]) -> None:
        """These documents' rows read together (`Docs.want`): the padding's hits, then their neighbours."""
        self.by_id.want(ids)

    def want_bodies(self, ids: Iterable[int]) -> None:
        """Read the bodies of these documents, and their terms' frequencies, in two statements (the
        feedback reads the top turns' terms and the idf of each)."""
        self.bodies.want(ids)

    def body_of(self, doc_id: int) -> str | None:
        """A document's body tokens, space-joined (None: no such document)."""
        return self.bodies.get(doc_id)

    def fetch(self, ids: Any) -> RowChunk | None:
        """`_FEATURES` rows of these documents (distinct ids; kept in `rows`), None: none of them is
        stored. Rows read are kept in the owner's `RowStore`, whose string codes this search uses
        throughout (`Columns.speaker_codes`): a store another search put meanwhile with other codes
        is read past."""
        want = np.asarray(ids, dtype=np.int64)
        store: RowStore | None = self.cache.get(("f", self.okey), self.version)
        if self.tables is None:
            self.tables = store.tables if store is not None else RowTables()
            self.cols.speaker_codes = self.cols.conv_codes = self.tables.codes
            self.cols.values = self.tables.values  # (`names` codes too: `prepare`)
        if store is not None and store.tables is not self.tables:
            store = None
        parts, missing = store.find(want) if store is not None else ([], want)
        if len(missing):
            cur = self.conn.cursor()
            cur.row_factory = None
            read: list[tuple[Any, ...]] = []
            todo = missing.tolist()
            for k in range(0, len(todo), CHUNK):
                marks, bound = in_list(todo[k : k + CHUNK])
                read += cur.execute(_FEATURES.format(marks=marks), bound).fetchall()
            if read:
                fresh = RowChunk.build(read, self.tables)
                parts.append(fresh)
                kept = (store or RowStore((), self.tables)).with_chunk(fresh)
                self.cache.put(("f", self.okey), kept, kept.nbytes, self.version)
        if not parts:
            return None
        rows = parts[0] if len(parts) == 1 else RowChunk.concat(parts)
        self.rows.add(rows)
        return rows

    def hit_rows(self, ids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """(id, conversation_id, role, speaker, content, ts_ms) of these documents, by id."""
        out: dict[int, tuple[Any, ...]] = {}
        cur = self.conn.cursor()
        cur.row_factory = None
        for k in range(0, len(ids), CHUNK):
            marks, bound = in_list(ids[k : k + CHUNK])
            out.update((r[0], r) for r in cur.execute(_HITS.format(marks=marks), bound)
                       if r[4] is not None)
        return out

    def contents(self) -> dict[int, str]:
        """Every document's text (the dense side reads them all: only with embeddings configured)."""
        return {i: t for i, t in self.conn.execute(f"SELECT d.id, {TEXT} FROM docs d WHERE d.agent = ? AND d.owner = ?",
                                                   (self.agent, self.owner)) if t is not None}  # (see `_HITS`)


def open_view(conn: sqlite3.Connection, agent: str, owner: str, cache: ByteCache, *,
              batch_bodies: bool = False) -> DiskView | None:
    """The owner's view (None: nothing of it is indexed), its cache entries checked first."""
    row = conn.execute("SELECT o.*, (SELECT value FROM meta WHERE key = 'generation') AS generation FROM powners o"
                       " WHERE agent = ? AND owner = ?", (agent, owner)).fetchone()
    if row is None or not row["n"]:
        return None
    cache.check(row["generation"], row["okey"], row["version"])
    return DiskView(conn, row, cache, batch_bodies=batch_bodies)
