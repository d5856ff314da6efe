"""What searches keep between them (messages/disk_view.py): `ByteCache`, bounded in bytes
(`aml.cache-bytes`) and never needed for an answer, and the entries it holds that are more than a
term's arrays - an owner's document lengths by block (`DocBlock`) and its unmerged Adds term by term
(`Overlay`). An entry is never changed once kept where a search may hold it: a write or a search that
knows more puts a copy (searches on PostgreSQL run side by side, each in its own snapshot).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from mateclaw_mem.index.messages.delta import Delta, combine
from mateclaw_mem.index.messages.ordinals import first_of_each
from mateclaw_mem.index.messages.postings import SEG_DOCS

# Bytes counted per cache entry beyond its arrays' data: its key (a tuple and a term), the value's tuple
# and array objects, the ordered dict's node, the [value, bytes] list, the owner's set slot - measured
# 570-700 (tracemalloc, tests/test_aml_view_memory.py); 96 left the cache ~20% over what it counted.
_ENTRY = 768
BLOCK_SEGS = 64  # `pdocs` segments per `DocBlock` (32,768 documents, 768 KB)
BLOCK = BLOCK_SEGS * SEG_DOCS
_EMPTY_U32, _EMPTY_U64 = np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.uint64)


class DocBlock:
    """`BLOCK_SEGS` segments of an owner's `pdocs` (ids and field lengths by ordinal) in two arrays,
    and which segments they hold: one gather per block, not a cache lookup and a copy per segment
    (a common term's turns span most segments: that was a tenth of a search at 100k messages). Never
    changed once cached: a write makes a copy with its segments marked missing (`ByteCache.wrote`),
    a search a copy with them read in (`DiskView._block`)."""

    __slots__ = ("have", "ids", "lens")

    def __init__(self, ids: Any, lens: Any, have: Any) -> None:
        self.ids, self.lens, self.have = ids, lens, have

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.lens.nbytes + self.have.nbytes)

    def without(self, segs: Iterable[int]) -> DocBlock:
        have = self.have.copy()
        have[list(segs)] = False
        return DocBlock(self.ids, self.lens, have)


class ByteCache:
    """Least recently used entries up to `max_bytes` (their arrays' bytes plus a fixed overhead),
    keyed per owner; thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        # (bytes held) -> the most it may hold now, below max_bytes: the daemon's RSS budget
        # (runtime/malloc.RssBudget) gives it what the rest of the process leaves of the bound.
        # Asked at each store and each write.
        self.limit: Callable[[int], int] | None = None
        # (bytes a write is about to hold beside the cache) -> None, the room made: the budget's
        # (runtime/malloc.RssBudget.make_room). None: nothing to do, as without a budget.
        self.room: Callable[[int], None] | None = None
        self.size = 0
        self._lock = threading.Lock()
        self._d: OrderedDict[tuple[Any, ...], list[Any]] = OrderedDict()  # key -> [value, bytes counted]
        self._owners: dict[int, set[tuple[Any, ...]]] = {}
        # okey -> (generation, version) the entries are of: with the generation, a search still
        # reading a snapshot from before a rebuild (whose owners' versions start again) never keeps
        # what it read as entries of the new index (SQLite's searches run side by side too now).
        self._known: dict[int, tuple[str | None, int]] = {}
        self._generation: str | None = None

    def check(self, generation: str | None, okey: int, version: int) -> None:
        """Before reading an owner: entries of another index generation or owner version go."""
        with self._lock:
            if generation != self._generation:
                self._d.clear()
                self._owners.clear()
                self._known.clear()
                self.size = 0
                self._generation = generation
            if self._known.get(okey) != (generation, version):
                self._purge(okey)
                self._known[okey] = (generation, version)

    def _purge(self, okey: int) -> None:
        for key in self._owners.pop(okey, ()):
            got = self._d.pop(key, None)
            if got is not None:
                self.size -= got[1]

    def get(self, key: tuple[Any, ...], version: tuple[str | None, int] | None = None) -> Any:
        """The entry, or None; with `version`, only while the owner's entries are of that version
        (searches of one process may read different versions at once: the PostgreSQL store's run
        side by side, each in its own snapshot)."""
        with self._lock:
            got = self._d.get(key)
            if got is None or (version is not None and self._known.get(key[1]) != version):
                return None
            self._d.move_to_end(key)
            return got[0]

    def put(self, key: tuple[Any, ...], value: Any, nbytes: int, version: tuple[str | None, int] | None = None) -> None:
        nbytes += _ENTRY
        if nbytes > self.max_bytes // 4:
            return  # one term's postings never push out everything else
        with self._lock:
            if version is not None and self._known.get(key[1]) != version:
                return  # read in an older (or newer) snapshot than the entries kept now
            old = self._d.pop(key, None)
            if old is not None:
                self.size -= old[1]
            self._d[key] = [value, nbytes]
            self._owners.setdefault(key[1], set()).add(key)
            self.size += nbytes
            self._evict()

    def _evict(self) -> None:
        self._evict_to(self.max_bytes if self.limit is None else min(self.max_bytes, self.limit(self.size)))

    def _evict_to(self, cap: int) -> int:
        freed = 0
        while self.size > cap and self._d:
            k, (_, b) = self._d.popitem(last=False)
            self.size -= b
            freed += b
            self._owners.get(k[1], set()).discard(k)
        return freed

    def make_room(self, nbytes: int) -> None:
        """Before a write that holds about `nbytes` beside the cache for a moment (a merge: postings.
        Invalidate): room made for it now (`room`), not found over the bound afterwards."""
        if self.room is not None:
            self.room(nbytes)

    def shrink_to(self, cap: int) -> int:
        """The least recently used entries evicted until it holds at most `cap` bytes; bytes freed."""
        with self._lock:
            return self._evict_to(cap)

    def wrote(self, okey: int, old_version: int, new_version: int, terms: Iterable[str], segs: Iterable[int],
              speakers: bool, docs: Iterable[int], cuts: Mapping[str, int] | None = None) -> None:
        """A writer rewrote these rows of the owner (postings.Invalidate); `cuts`: per term, the
        ordinal below which its postings are as they were (`_keep_prefixes`). Then the cache is held
        to its limit: Adds grow the rest of the process too (the heap, SQLite's caches), and the RSS
        budget looks while they come, not first at the next search's store."""
        with self._lock:
            if self._known.get(okey) == (self._generation, new_version):
                # (Another process's write - the index process's - that a search here found first: what
                # it keeps was read at this version already.)
                return
            if self._known.get(okey) != (self._generation, old_version):
                self._purge(okey)
                self._known.pop(okey, None)
                self._evict()
                return
            terms = list(terms)
            if cuts:
                self._keep_prefixes(okey, terms, cuts)
            keys: list[tuple[Any, ...]] = [("t", okey, t) for t in terms]
            by_block: dict[int, list[int]] = {}
            for seg in segs:
                by_block.setdefault(seg // BLOCK_SEGS, []).append(seg % BLOCK_SEGS)
            for b, local in by_block.items():
                if (got := self._d.get(("d", okey, b))) is not None:
                    got[0] = got[0].without(local)  # (a copy: searches may hold this one)
            if speakers:
                keys.append(("s", okey))
            if any(k[0] == "t" for k in keys):  # a merge: the owner's delta rows are gone
                keys += [k for k in self._owners.get(okey, ()) if k[0] == "u"]
                # Saturated values (`DiskView.sat_arrays`) of the terms written go (what was below
                # their cuts is kept). An Add's own row leaves them: they are kept per term with the
                # unmerged rows holding it (a turn whose lengths grew has a new entry for each of its
                # terms, there and in the segments a merge rewrites: a term it left has no turn whose
                # lengths changed).
                written = set(terms)
                keys += [k for k in self._owners.get(okey, ()) if k[0] in ("v", "va") and k[2] in written]
            for key in keys:
                got = self._d.pop(key, None)
                if got is not None:
                    self.size -= got[1]
                    self._owners.get(okey, set()).discard(key)
            rows = self._d.get(("f", okey))
            if rows is not None:
                rows[0] = rows[0].without(docs)  # (a copy: searches may hold this one)
            self._known[okey] = (self._generation, new_version)
            self._evict()

    def _keep_prefixes(self, okey: int, terms: list[str], cuts: Mapping[str, int]) -> None:
        """What a merge leaves of a term, before its entries go: its segments' postings below the
        cut ("tp": ordinals, packed counts, the cut) and the saturated values of those postings ("vp",
        per key and averages: a mask over them, the values) - a search then reads and scores only
        the rewritten segments (`DiskView._base`, `_saturated`). A value's postings then were the
        segments' and unmerged rows' entries, all of which a merge folds in at or above the cut: the
        first postings below it are the same ones. (Under the lock.)"""
        want = {t: cuts[t] for t in terms if t in cuts}
        prefix: dict[str, int] = {}  # term -> postings below the cut
        for t, cut in want.items():
            whole, part = self._d.get(("t", okey, t)), self._d.get(("tp", okey, t))
            if whole is not None:
                o, p = whole[0][0], whole[0][1]
            elif part is not None:
                o, p, cut = part[0][0], part[0][1], min(cut, part[0][2])
            else:
                continue
            k = int(np.searchsorted(o, cut))
            prefix[t] = k
            self._set(("tp", okey, t), (o[:k].copy(), p[:k].copy(), cut), o[:k].nbytes + p[:k].nbytes + len(t))
        mine = self._owners.get(okey, set())
        valued = {k[2] for k in mine if k[0] == "v" and k[2] in prefix}
        # Kept values made from a term's current ones; an earlier merge's (other averages, perhaps)
        # kept only where no search has scored the term since.
        for key in [k for k in mine if k[0] == "vp" and k[2] in valued]:
            self._pop(okey, key)
        for key in [k for k in mine if k[0] in ("v", "vp") and k[2] in prefix]:
            got = self._d.get(key)
            if got is None:
                continue
            k = prefix[key[2]]
            mask, vals = got[0][1:] if key[0] == "vp" else got[0]
            if len(mask) < k:
                continue  # (an earlier merge's: the fewer postings it holds are as they were)
            m = int(np.count_nonzero(mask[:k]))
            vkey = ("vp", okey, key[2], key[3], key[5] if key[0] == "v" else key[4])
            self._set(vkey, (k, mask[:k].copy(), vals[:m].copy()), k + 8 * m + len(key[2]))
        gone = set(terms) - prefix.keys()
        for key in [k for k in self._owners.get(okey, ()) if k[0] in ("tp", "vp") and k[2] in gone]:
            self._pop(okey, key)
        self._evict()

    def _set(self, key: tuple[Any, ...], value: Any, nbytes: int) -> None:
        """`put` under the lock, with no version check (that of the write's own) and no eviction yet."""
        self._pop(key[1], key)
        nbytes += _ENTRY
        self._d[key] = [value, nbytes]
        self._owners.setdefault(key[1], set()).add(key)
        self.size += nbytes

    def _pop(self, okey: int, key: tuple[Any, ...]) -> None:
        got = self._d.pop(key, None)
        if got is not None:
            self.size -= got[1]
            self._owners.get(okey, set()).discard(key)

    def drop_values(self, okey: int, terms: set[str]) -> None:
        """The saturated values (`DiskView.sat_arrays`) of these terms of the owner, which an Add's
        unmerged rows now extend, kept as what those rows extend ("va": the rows they were of, the
        mask, the values): a search then scores only the new rows' postings (`DiskView._values`), not
        a common word's tens of thousands again after every Add. The same bytes: only the key moves."""
        if not terms:
            return
        with self._lock:
            mine = self._owners.get(okey, set())
            for key in [k for k in mine if k[0] == "v" and k[2] in terms]:
                got = self._d.pop(key, None)
                mine.discard(key)
                if got is None:
                    continue
                self.size -= got[1]
                prefix = ("va", okey, key[2], key[3], key[5])
                have = self._d.get(prefix)
                if have is None or len(have[0][0]) <= len(key[4]):
                    self._set(prefix, (key[4], *got[0]), got[1] - _ENTRY)
            self._evict()

    def discard(self, key: tuple[Any, ...]) -> None:
        """Drop one entry (if kept)."""
        with self._lock:
            self._pop(key[1], key)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self._owners.clear()
            self._known.clear()
            self.size = 0


class Overlay:
    """An owner's unmerged Adds (`deltas`, oldest first, their `pdelta` ids) term by term: a term's
    entries of every row, later ones over earlier ones (`delta.combine`), and the turns new in them
    holding it in their body. Worked out per term when first asked for and kept (`ByteCache` entry
    ("u", okey)): a function of the rows alone, so searches reading the same rows share it, and one
    more row keeps what it does not touch (`extended`)."""

    __slots__ = ("deltas", "ids", "memo", "terms")

    # Bytes counted beyond the rows' own (`Delta.nbytes`), as if every term were worked out: per term
    # a dict slot, a tuple and two arrays (~300), per entry a combined copy (ordinal, packed counts).
    TERM_BYTES, ENTRY_BYTES = 360, 12

    def __init__(self, ids: tuple[int, ...], deltas: list[Delta], terms: set[str],
                 memo: dict[str, tuple[Any, Any, int, tuple[int, ...]]]) -> None:
        self.ids, self.deltas, self.terms, self.memo = ids, deltas, terms, memo

    @property
    def nbytes(self) -> int:
        return self.TERM_BYTES * len(self.terms) + sum(d.nbytes + self.ENTRY_BYTES * len(d.ords) for d in self.deltas)

    def entries(self, term: str) -> tuple[Any, Any, int, tuple[int, ...]] | None:
        """(ordinals ascending, packed counts, turns new in the rows holding it in their body, those
        rows' ids) of the rows' entries of `term`, one per ordinal (the latest); None: no row holds it."""
        got = self.memo.get(term)
        if got is None:
            if term not in self.terms:
                return None
            holding = [(i, d) for i, d in zip(self.ids, self.deltas, strict=True) if term in d.terms]
            parts = [e for _, d in holding if (e := d.entries(term)) is not None]
            o, p = parts[0] if len(parts) == 1 else combine((_EMPTY_U32, _EMPTY_U64), parts)
            got = self.memo[term] = (o, p, sum(d.df_inc(term) for _, d in holding), tuple(i for i, _ in holding))
        return got

    def adds_after(self, term: str, before: tuple[int, ...], ords: Any, k: int) -> bool:
        """Whether the rows holding `term` now are those of `before` and more, whose entries of it
        only add postings after the first `k` of `ords` (its postings now) and replace none: then
        what was scored of those k holds. A turn that grew has an entry under its own ordinal for
        each of its terms (its lengths changed): among them, or a count short."""
        got = self.entries(term)
        now = got[3] if got is not None else ()
        if len(before) >= len(now) or now[: len(before)] != before:
            return False
        by_id = dict(zip(self.ids, self.deltas, strict=True))
        new = [e[0] for i in now[len(before):] if (e := by_id[i].entries(term)) is not None]
        return bool(new) and len(ords) == k + sum(len(o) for o in new) \
            and (not k or min(int(o[0]) for o in new) > int(ords[k - 1]))

    def extended(self, ids: tuple[int, ...], deltas: list[Delta]) -> tuple[Overlay, set[str]]:
        """This overlay with the rows after its own (`ids` starts with `self.ids`), and the terms
        those rows hold."""
        touched = set().union(*(d.terms for d in deltas[len(self.ids) :]))
        return Overlay(ids, deltas, self.terms | touched,
                        {t: v for t, v in self.memo.items() if t not in touched}), touched


class RowTables:
    """The strings of an owner's document rows (speakers, conversation ids, names) as codes: one copy
    of each, shared by every copy of its `RowStore`, appended to only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # (PostgreSQL's searches run side by side)
        self.values: list[str] = []
        self.codes: dict[str, int] = {}
        self.nbytes = 0

    def encode(self, strings: Sequence[str | None]) -> Any:
        """Codes of these strings as an int32 array (-1 for None), new ones added."""
        with self._lock:
            codes, values = self.codes, self.values
            for v in dict.fromkeys(strings):  # new ones coded in the order first met
                if v is not None and v not in codes:
                    codes[v] = len(values)
                    values.append(v)
                    self.nbytes += _STRING + len(v)
            out = [codes.get(v, -1) for v in strings]  # type: ignore[arg-type]  # (None is no key: -1)
        return np.array(out, dtype=np.int32)


_STRING = 120  # bytes counted per string a `RowTables` keeps beyond its characters (the str, a dict slot, a list slot)
_CHUNK_BYTES = 1_200  # bytes counted per `RowChunk` beyond its arrays (eleven array headers and the object)


class RowChunk:
    """Document rows (`disk_view._FEATURES`) as columns, ascending by id: what the ranking's later
    steps read of a candidate. Arrays, not a tuple per row: a cache of tuples (~440 bytes a row in a
    dozen small objects) left Python's allocator holding arenas its freed rows had fragmented, and RSS
    stayed tens of MB over the cache's bound (issue 36). `alive` is False for rows a write made stale."""

    __slots__ = ("alive", "conv", "echo", "flags", "ids", "is_question", "links", "names", "qshare", "speaker")

    def __init__(self, ids: Any, speaker: Any, conv: Any, is_question: Any, qshare: Any, echo: Any, flags: Any,
                 names: Any, links: Any, alive: Any) -> None:
        self.ids, self.speaker, self.conv, self.is_question = ids, speaker, conv, is_question
        self.qshare, self.echo, self.flags, self.names = qshare, echo, flags, names
        self.links, self.alive = links, alive

    def _arrays(self) -> tuple[Any, ...]:
        return (self.ids, self.speaker, self.conv, self.is_question, self.qshare, self.echo, self.flags, self.names,
                self.links, self.alive)

    @classmethod
    def build(cls, rows: list[tuple[Any, ...]], tables: RowTables) -> RowChunk:
        """From `_FEATURES` rows as read: (id, speaker, conversation_id, is_question, qshare, echo,
        flags, names, prev, next, tprev, tnext)."""
        n = len(rows)
        # Column by column from one transpose (a generator per column was most of a cold search's
        # row reading); a link absent is -1.
        cols = list(zip(*rows, strict=True)) if n else [()] * 12
        links = np.array([[-1 if x is None else x for x in c] if None in c else c for c in cols[8:12]],
                         dtype=np.int64).reshape(4, n).T.copy()
        chunk = cls(np.array(cols[0], dtype=np.int64), tables.encode(cols[1]), tables.encode(cols[2]),
                    np.array([bool(x) for x in cols[3]], dtype=bool).reshape(n),
                    np.array(cols[4], dtype=np.float64).reshape(n), np.array(cols[5], dtype=np.float64).reshape(n),
                    np.array(cols[6], dtype=np.int64).reshape(n), tables.encode(cols[7]), links,
                    np.ones(n, dtype=bool))
        if n < 2 or bool((chunk.ids[1:] >= chunk.ids[:-1]).all()):
            return chunk  # (read in id order, as `_FEATURES` asks: no sort and no copy of each column)
        return chunk.take(np.argsort(chunk.ids, kind="stable"))

    def take(self, at: Any) -> RowChunk:
        return RowChunk(*(a[at] for a in self._arrays()))

    @staticmethod
    def concat(chunks: list[RowChunk]) -> RowChunk:
        return RowChunk(*(np.concatenate(col) for col in zip(*(c._arrays() for c in chunks), strict=True)))

    @property
    def nbytes(self) -> int:
        return _CHUNK_BYTES + sum(int(a.nbytes) for a in self._arrays())

    def find(self, ids: Any) -> tuple[Any, Any]:
        """(a mask of `ids` held alive here, their rows here)."""
        if not len(self.ids):
            return np.zeros(len(ids), dtype=bool), _EMPTY_I64
        j = np.searchsorted(self.ids, ids)
        jj = np.minimum(j, len(self.ids) - 1)
        hit = (j < len(self.ids)) & (self.ids[jj] == ids)
        hit[hit] = self.alive[jj[hit]]
        return hit, jj[hit]


_EMPTY_I64 = np.zeros(0, dtype=np.int64)


class RowStore:
    """An owner's document rows kept (`ByteCache` entry ("f", okey)): chunks of rows as read, merged
    two by two as they pile up (each at least twice the next: a few chunks, each row copied a few
    times), with one set of string codes."""

    __slots__ = ("chunks", "tables")

    def __init__(self, chunks: tuple[RowChunk, ...], tables: RowTables) -> None:
        self.chunks, self.tables = chunks, tables

    @property
    def nbytes(self) -> int:
        return self.tables.nbytes + sum(c.nbytes for c in self.chunks)

    def find(self, ids: Any) -> tuple[list[RowChunk], Any]:
        """(the rows of `ids` held here, as chunks; the ids not held, in their order)."""
        found: list[RowChunk] = []
        left = ids
        for chunk in self.chunks:
            if not len(left):
                break
            hit, rows = chunk.find(left)
            if len(rows):
                found.append(chunk.take(rows))
                left = left[~hit]
        return found, left

    def with_chunk(self, chunk: RowChunk) -> RowStore:
        chunks = [*self.chunks, chunk]
        while len(chunks) > 1 and len(chunks[-2].ids) <= 2 * len(chunks[-1].ids):
            merged = RowChunk.concat(chunks[-2:])
            merged = merged.take(np.flatnonzero(merged.alive))
            first = first_of_each(merged.ids)  # (sorted; a row read twice, once)
            chunks[-2:] = [merged.take(first)]
        return RowStore(tuple(chunks), self.tables)

    def without(self, ids: Iterable[int]) -> RowStore:
        """This store with the rows of `ids` stale (a copy: searches may hold this one)."""
        want = np.fromiter(ids, dtype=np.int64)
        if not len(want):
            return self
        chunks = []
        for chunk in self.chunks:
            rows = chunk.find(want)[1]
            if len(rows):
                alive = chunk.alive.copy()
                alive[rows] = False
                chunk = chunk.take(slice(None))  # (views of the same arrays)
                chunk.alive = alive
            chunks.append(chunk)
        return RowStore(tuple(chunks), self.tables)
