"""An Add's postings as one row (`pdelta`), until enough of them are folded into the per-term
segments (messages/postings.py).

Writing each touched term's last segment at every Add dirtied one page per term - a few hundred
pages, over a megabyte of WAL for an Add of 20 turns, where the floor's FTS5 writes a few. So an Add
writes its postings once, as one row sorted by term, and a search reads the owner's few unmerged
rows beside the segments; past `DELTA_MAX` entries the writer folds them into the segments.

Later entries of the same (term, ordinal) replace earlier ones: a turn whose neighbour field grew
(the next turn arrived) gets a new entry for each of its terms. Entries at ordinals from `first_new`
on are turns new in that Add: their body counts are what moves a term's document frequency.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from mateclaw_mem.index.messages.ordinals import first_of_each

DELTA_MAX = 12_000  # entries an owner's unmerged rows may hold (a few hundred turns) before a merge
# Merges run beside the Adds (storage.MessageStorage's merger); an Add that finds its owner's rows
# past this many times `DELTA_MAX` (the merger fell behind) merges them itself, so a search never
# reads an unbounded delta.
DELTA_HARD = 4


# A segment's packed counts as stored (`postings.packed`): four 8-bit counts in one uint32 when every
# count of the segment fits, which is nearly always (a term said 256 times in one field of one turn is
# rare), else the uint64s as they are - 4 bytes an entry instead of 8, a quarter of messages.db. The
# blob's length tells which (entries: the `ords` blob's length / 4).
_BYTE_FIELDS = np.uint64(0x00FF_00FF_00FF_00FF)


def narrow(packed: Any) -> bytes:
    """Packed uint64 counts (an `array("Q")` or numpy) as stored (see `_BYTE_FIELDS`)."""
    p = np.frombuffer(packed, dtype=np.uint64)
    if (p & ~_BYTE_FIELDS).any():
        return p.tobytes()
    n = np.uint64
    return ((p & n(0xFF)) | ((p >> n(8)) & n(0xFF00)) | ((p >> n(16)) & n(0xFF_0000))
            | ((p >> n(24)) & n(0xFF00_0000))).astype(np.uint32).tobytes()


def widen(blob: bytes, entries: int) -> Any:
    """A stored segment's packed counts as uint64 (`narrow` undone)."""
    if len(blob) == 8 * entries:
        return np.frombuffer(blob, dtype=np.uint64)
    x, n = np.frombuffer(blob, dtype=np.uint32).astype(np.uint64), np.uint64
    return (x & n(0xFF)) | ((x & n(0xFF00)) << n(8)) | ((x & n(0xFF_0000)) << n(16)) | ((x & n(0xFF00_0000)) << n(24))


# A segment as stored since (`pack_segment`): one blob in `postings.ords`, `postings.packed` empty -
# the first ordinal (uint32), the gaps to each next one as the narrowest unsigned integer every gap
# of the segment fits (a term said in most turns: one byte each), then the four counts of each entry
# at 2, 4, 8 or 16 bits a field, as few as the segment's largest count allows (most turns hold a term
# once or twice: one byte an entry). 8 bytes an entry became 2.6 (aml_scale, 10k turns: 420 -> 140 B
# a message). The first byte says the widths: gap width code in bits 0-1, count width code in 2-3.
_GAPS = (np.uint8, np.uint16, np.uint32)
_COUNTS = (np.uint8, np.uint16, np.uint32, np.uint64)
_HEAD = 5  # the width byte and the first ordinal
_SIZE = (1, 2, 4, 8)  # bytes of a width code's values


def _lookup(bits: int) -> Any:
    """Per byte value, the packed uint64 of the two (bits 4) or four (bits 2) fields it holds."""
    b = np.arange(256, dtype=np.uint64)
    m, n = np.uint64((1 << bits) - 1), np.uint64
    out = np.zeros(256, dtype=np.uint64)
    for k in range(8 // bits):
        out |= ((b >> n(k * bits)) & m) << n(16 * k)
    return out


_BYTE_OF_2, _BYTE_OF_4 = _lookup(2), _lookup(4)


def _narrowing(bits: int) -> tuple[Any, ...]:
    """`pack_segment`'s mask and (shift, mask) of the 2nd to 4th field for counts of `bits` bits, as
    numpy scalars made once (a merge packs ~800 segments: making them at each call was a fifth of it)."""
    n, m = np.uint64, (1 << bits) - 1
    return (n(m), n(16 - bits), n(m << bits), n(32 - 2 * bits), n(m << 2 * bits), n(48 - 3 * bits), n(m << 3 * bits))


_NARROWING = tuple(_narrowing(bits) for bits in (2, 4, 8))


def pack_segment(ords: Any, packed: Any) -> bytes:
    """A segment's ascending ordinals (uint32) and packed counts (uint64) as stored (see `_GAPS`)."""
    o = np.frombuffer(ords, dtype=np.uint32)
    p = np.frombuffer(packed, dtype=np.uint64)
    gaps = o[1:] - o[:-1]
    top = int(gaps.max()) if len(gaps) else 0
    gw = 0 if top < 1 << 8 else 1 if top < 1 << 16 else 2
    most = int(p.view(np.uint16).max()) if len(p) else 0  # (the largest of the four fields, any byte order)
    cw = 0 if most < 4 else 1 if most < 16 else 2 if most < 256 else 3
    if cw == 3:
        counts = p
    else:
        m, s1, m1, s2, m2, s3, m3 = _NARROWING[cw]
        counts = ((p & m) | ((p >> s1) & m1) | ((p >> s2) & m2) | ((p >> s3) & m3)).astype(_COUNTS[cw])
    return bytes((gw | cw << 2,)) + o[:1].tobytes() + gaps.astype(_GAPS[gw]).tobytes() + counts.tobytes()


def unpack_segment(ords: bytes, packed: bytes) -> tuple[Any, Any]:
    """A stored segment's (ordinals uint32, packed counts uint64): `pack_segment` undone, or an
    older row's (ordinals as uint32, `packed` non-empty: `narrow`ed or wide)."""
    if packed:
        return np.frombuffer(ords, dtype=np.uint32), widen(packed, len(ords) // 4)
    gw, cw = ords[0] & 3, ords[0] >> 2 & 3
    gsz, csz = 1 << gw, 1 << cw
    n = (len(ords) - _HEAD + gsz) // (gsz + csz)
    out = np.empty(n, dtype=np.uint32)
    out[0] = int.from_bytes(ords[1:_HEAD], "little" if np.little_endian else "big")
    np.cumsum(np.frombuffer(ords, dtype=_GAPS[gw], count=n - 1, offset=_HEAD), dtype=np.uint32, out=out[1:])
    out[1:] += out[0]
    return out, _counts_wide(np.frombuffer(ords, dtype=_COUNTS[cw], count=n, offset=_HEAD + (n - 1) * gsz), cw)


def _counts_wide(c: Any, cw: int) -> Any:
    """Stored counts of width code `cw` (`pack_segment`'s narrowing) as packed uint64."""
    if cw == 0:
        return _BYTE_OF_2[c]
    if cw == 1:
        return _BYTE_OF_4[c & np.uint16(0xFF)] | (_BYTE_OF_4[c >> np.uint16(8)] << np.uint64(32))
    if cw == 2:
        return widen(c.tobytes(), len(c))
    return c


def _runs(starts: Any, lengths: Any) -> Any:
    """The positions starts[i] .. starts[i] + lengths[i] - 1 of every run, in order (lengths > 0)."""
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]), dtype=np.int64)


def unpack_segments(blobs: Sequence[bytes]) -> tuple[Any, Any]:
    """Consecutive stored segments of one term (`pack_segment`'s blobs, ascending) as one (ordinals
    uint32, packed counts uint64): `unpack_segment` of each, concatenated, in a few array operations
    for all of them. A common word at 100k messages is a few hundred segments, and a cold search
    decoded ~100 one by one (a dozen numpy calls each: ~0.7 ms a search)."""
    k = len(blobs)
    gws, cws, ns, firsts = [0] * k, [0] * k, [0] * k, [0] * k
    order: Literal["little", "big"] = "little" if np.little_endian else "big"
    gap_parts: tuple[list[bytes], ...] = ([], [], [])
    count_parts: tuple[list[bytes], ...] = ([], [], [], [])
    gap_of: tuple[list[int], ...] = ([], [], [])
    count_of: tuple[list[int], ...] = ([], [], [], [])
    for i, b in enumerate(blobs):
        gw, cw = b[0] & 3, b[0] >> 2 & 3
        gsz = _SIZE[gw]
        n = (len(b) - _HEAD + gsz) // (gsz + _SIZE[cw])
        gws[i], cws[i], ns[i], firsts[i] = gw, cw, n, int.from_bytes(b[1:_HEAD], order)
        cut = _HEAD + (n - 1) * gsz
        if n > 1:
            gap_parts[gw].append(b[_HEAD:cut])
            gap_of[gw].append(i)
        count_parts[cw].append(b[cut:])
        count_of[cw].append(i)
    n_arr = np.array(ns, dtype=np.int64)
    starts = np.cumsum(n_arr) - n_arr
    total = int(n_arr.sum())
    d = np.zeros(total, dtype=np.uint32)  # a segment's first entry 0, then its gaps
    for g in range(3):
        if gap_of[g]:
            vals = np.frombuffer(b"".join(gap_parts[g]), dtype=_GAPS[g])
            segs = np.array(gap_of[g], dtype=np.int64)
            if len(gap_of[g]) == k and len(vals) == total - k:  # (every segment, each with gaps)
                mask = np.ones(total, dtype=bool)
                mask[starts] = False
                d[mask] = vals
            else:
                d[_runs(starts[segs] + 1, n_arr[segs] - 1)] = vals
    first = np.array(firsts, dtype=np.int64)
    last = first + np.add.reduceat(d, starts, dtype=np.int64)
    # Each segment's first entry as its step from the one before's last: one cumsum for them all,
    # every partial sum an ordinal (so never past uint32).
    d[starts[1:]] = first[1:] - last[:-1]
    d[0] = firsts[0]
    np.cumsum(d, dtype=np.uint32, out=d)
    if len(count_of[cws[0]]) == k:  # (one width for every segment: the usual case)
        return d, _counts_wide(np.frombuffer(b"".join(count_parts[cws[0]]), dtype=_COUNTS[cws[0]]), cws[0])
    packed = np.empty(total, dtype=np.uint64)
    for c in range(4):
        if count_of[c]:
            segs = np.array(count_of[c], dtype=np.int64)
            vals = _counts_wide(np.frombuffer(b"".join(count_parts[c]), dtype=_COUNTS[c]), c)
            packed[_runs(starts[segs], n_arr[segs])] = vals
    return d, packed


def unpack_rows(rows: Sequence[Sequence[Any]]) -> list[tuple[Any, Any]]:
    """Stored `postings` rows' (..., ords, packed) segments, ascending, decoded: from a few rows on
    together (`unpack_segments`: its set-up costs less than a decode each there), else, and for rows
    an older version wrote, one by one."""
    if len(rows) >= 4 and not any(r[-1] for r in rows):
        return [unpack_segments([r[-2] for r in rows])]
    return [unpack_segment(r[-2], r[-1]) for r in rows]


def _tail_ends(tails: Sequence[tuple[int, int, bytes] | None]) -> tuple[Any, ...]:
    """Per stored segment (first, df, blob as `pack_segment` wrote it; None: none): whether there is
    one, its entries, gap and count width codes, first and last ordinal and df (int64 numpy). The last
    is the first plus the sum of the gaps, summed per gap width over all segments at once."""
    size = len(tails)
    gw, cw, ns, firsts, dfs = [0] * size, [0] * size, [0] * size, [0] * size, [0] * size
    parts: tuple[list[bytes], ...] = ([], [], [])
    at: tuple[list[int], ...] = ([], [], [])
    counts: tuple[list[int], ...] = ([], [], [])
    for i, tail in enumerate(tails):
        if tail is None:
            continue
        firsts[i], dfs[i], b = tail
        gw[i] = g = b[0] & 3
        cw[i] = b[0] >> 2 & 3
        gsz = _SIZE[g]
        ns[i] = k = (len(b) - _HEAD + gsz) // (gsz + _SIZE[cw[i]])
        if k > 1:
            parts[g].append(b[_HEAD : _HEAD + (k - 1) * gsz])
            at[g].append(i)
            counts[g].append(k - 1)
    has = np.array([tail is not None for tail in tails], dtype=bool)
    first = np.array(firsts, dtype=np.int64)
    last = first.copy()
    for g in range(3):
        if at[g]:
            gaps = np.frombuffer(b"".join(parts[g]), dtype=_GAPS[g])
            runs = np.array(counts[g], dtype=np.int64)
            starts = np.cumsum(runs) - runs  # (every segment here has a gap: no empty run)
            last[at[g]] += np.add.reduceat(gaps, starts, dtype=np.int64)  # (a cumsum to int64: 7x slower)
    return (has, np.array(ns, dtype=np.int64), np.array(gw, dtype=np.int64), np.array(cw, dtype=np.int64), first,
            last, np.array(dfs, dtype=np.int64))


def _counts_as(packed: Any, cw: int) -> bytes:
    """Packed counts at count width code `cw` (`pack_segment`'s narrowing; counts too wide for it
    come out wrong and must not be used)."""
    if cw == 3:
        return bytes(packed.tobytes())
    m, s1, m1, s2, m2, s3, m3 = _NARROWING[cw]
    p = packed
    return bytes(((p & m) | ((p >> s1) & m1) | ((p >> s2) & m2) | ((p >> s3) & m3)).astype(_COUNTS[cw]).tobytes())


def extend(tails: Sequence[tuple[int, int, bytes] | None], new: tuple[Any, Any, Any], old: tuple[Any, Any, Any],
           limit: int, slow: Any) -> tuple[list[tuple[int, bool, int, int, bytes]], Any]:
    """A merge's entries (`gather_flat`'s new and other ones, by term index) put at the end of each
    term's last stored segment (`tails`: (first, df, blob as `pack_segment` wrote it), or None) as
    the segment-by-segment writer (postings.PostingWriter) would, without decoding the segments.

    The stored widths are the least the stored entries need, so while the new gaps and counts fit
    them, `pack_segment` of the whole segment is its head, old gaps, new gaps, old counts, new
    counts: spliced as bytes. Else the segment is decoded and packed whole (a wider width). New
    entries past `limit` start new segments of `limit` each, as that writer's `_append_many` does.

    Returns (term index, stored: the row at its `first` is updated, first, df, blob) per segment
    written, and per term whether it is left to the writer (`slow` on entry: an older row's format,
    or loaded already; and the terms with an entry below the stored segment's first ordinal, and
    those with other entries whose new ones overflow a segment: that writer puts them in after
    splitting the new ones)."""
    nt, no, npk = new
    ot, oo, opk = old
    size = len(tails)
    slow = slow.copy()
    has, n, gw, cw, first, last, df_stored = _tail_ends(tails)
    k_new = np.bincount(nt, minlength=size)
    with_old = np.zeros(size, dtype=bool)
    with_old[ot] = True
    slow |= with_old & ((has & (k_new > 0) & (n + k_new > limit)) | (~has & (k_new > limit)))
    inside = np.zeros(size, dtype=bool)  # other entries among the stored ones: the segment packed whole
    if len(ot):
        o64 = oo.astype(np.int64)
        within = has[ot] & (o64 <= last[ot])
        inside[ot[within]] = True
        slow[ot[within & (o64 < first[ot])]] = True  # (in an earlier segment)
    inc = np.bincount(nt, weights=(npk & np.uint64(0xFFFF)) != 0, minlength=size).astype(np.int64)
    keep = ~slow[nt]
    tid, ords, packed = nt[keep], no[keep].astype(np.int64), npk[keep]
    keep_old = ~slow[ot]
    if keep_old.any():
        # The others are written after every new entry (a turn grows once the next one arrives):
        # the latest of each (term, ordinal) replaces a new entry's counts, or goes in among them.
        key = tid << 32 | ords
        ko, po = ot[keep_old] << 32 | oo[keep_old].astype(np.int64), opk[keep_old]
        order = np.argsort(ko, kind="stable")
        ko, po = ko[order], po[order]
        latest = np.append(ko[1:] != ko[:-1], True)
        ko, po = ko[latest], po[latest]
        j = np.searchsorted(key, ko)
        same = (j < len(key)) & (key[np.minimum(j, max(len(key) - 1, 0))] == ko) if len(key) else j < 0
        packed = packed.copy()
        packed[j[same]] = po[same]
        key = np.insert(key, j[~same], ko[~same])
        packed = np.insert(packed, j[~same], po[~same])
        tid, ords = key >> 32, key & 0xFFFF_FFFF
    if not len(tid):
        return [], slow
    # The segment each entry goes to: 0 the stored one, 1, 2, ... new ones. A term with other
    # entries (not overflowing: the rest are slow) puts them all in one.
    first_of_term = np.searchsorted(tid, tid)
    at = np.arange(len(tid)) - first_of_term
    room = np.where(has, np.maximum(limit - n, 0), 0)[tid]
    seg = np.where(at < room, 0, 1 + (at - room) // limit)
    seg = np.where(with_old[tid], np.where(has[tid], 0, 1), seg)
    cut = np.flatnonzero((tid[1:] != tid[:-1]) | (seg[1:] != seg[:-1])) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut, [len(tid)]))
    gt, gs = tid[starts], seg[starts]
    stored = gs == 0
    last_of_term = np.append(gt[1:] != gt[:-1], True)
    dfs = np.where(has[gt], df_stored[gt], 0) + np.where(last_of_term, inc[gt], 0)
    prev = np.empty_like(ords)
    prev[1:] = ords[:-1]
    prev[starts] = np.where(stored, last[gt], ords[starts])  # (a new segment's first entry has no gap)
    gaps = ords - prev
    gmax = np.maximum.reduceat(gaps, starts)
    cmax = np.maximum.reduceat(packed.view(np.uint16).reshape(-1, 4).max(axis=1), starts).astype(np.int64)
    need_g = (gmax >= 1 << 8).astype(np.int64) + (gmax >= 1 << 16)
    need_c = (cmax >= 4).astype(np.int64) + (cmax >= 16) + (cmax >= 256)
    fits = ~stored | ((need_g <= gw[gt]) & (need_c <= cw[gt]) & ~inside[gt])
    use_g = np.where(stored, gw[gt], need_g)
    use_c = np.where(stored, cw[gt], need_c)
    gap_views = {g: memoryview(gaps.astype(_GAPS[g]).tobytes()) for g in set(use_g[fits].tolist())}
    count_views = {c: memoryview(_counts_as(packed, c)) for c in set(use_c[fits].tolist())}
    out: list[tuple[int, bool, int, int, bytes]] = []
    join = b"".join
    firsts, stored_n, stored_inside = ords[starts].tolist(), n.tolist(), inside.tolist()
    for t, a, b, kept, fit, g, c, f, df in zip(gt.tolist(), starts.tolist(), ends.tolist(), stored.tolist(),
                                               fits.tolist(), use_g.tolist(), use_c.tolist(), firsts, dfs.tolist(),
                                               strict=True):
        gsz, csz = _SIZE[g], _SIZE[c]
        if not kept:
            out.append((t, False, f, df, join((bytes((g | c << 2,)), f.to_bytes(4, sys.byteorder),
                                               gap_views[g][(a + 1) * gsz : b * gsz],
                                               count_views[c][a * csz : b * csz]))))
            continue
        f, _, old_blob = tails[t]
        if fit:
            h = len(old_blob) - stored_n[t] * csz  # (where the stored counts start)
            blob = join((old_blob[:h], gap_views[g][a * gsz : b * gsz], old_blob[h:],
                         count_views[c][a * csz : b * csz]))
        else:
            so, sp = unpack_segment(old_blob, b"")
            o_all = np.concatenate((so, ords[a:b].astype(np.uint32)))
            p_all = np.concatenate((sp.astype(np.uint64), packed[a:b]))
            if stored_inside[t]:  # (the merge's entry of an ordinal stored replaces it)
                order = np.argsort(o_all, kind="stable")
                o_all, p_all = o_all[order], p_all[order]
                latest = np.append(o_all[1:] != o_all[:-1], True)
                o_all, p_all = o_all[latest], p_all[latest]
            blob = pack_segment(o_all, p_all)
        out.append((t, True, f, df, blob))
    return out, slow


def encode(entries: dict[tuple[str, int], int]) -> tuple[str, bytes, bytes, bytes]:
    """(terms space-joined, per term its entry count as uint32, ordinals uint32, packed uint64),
    sorted by term and ordinal."""
    return _encoded([t for t, _ in entries], [o for _, o in entries], list(entries.values()))


def encode_docs(docs: Sequence[tuple[int, Mapping[str, int]]]) -> tuple[str, bytes, bytes, bytes]:
    """`encode` of documents' postings: (ordinal, term -> packed counts) each (a later one at the same
    ordinal and term replaces the earlier)."""
    if len({o for o, _ in docs}) < len(docs):
        by: dict[int, dict[str, int]] = {}
        for o, c in docs:
            by.setdefault(o, {}).update(c)
        docs = list(by.items())
    terms = list(itertools.chain.from_iterable(c.keys() for _, c in docs))
    ords = np.repeat(np.array([o for o, _ in docs], dtype=np.uint32), [len(c) for _, c in docs])
    packed = np.fromiter(itertools.chain.from_iterable(c.values() for _, c in docs), dtype=np.uint64,
                         count=len(terms))
    return _encoded(terms, ords, packed)


def _encoded(terms: list[str], ords: Any, packed: Any) -> tuple[str, bytes, bytes, bytes]:
    """`encode` of parallel entries (no (term, ordinal) twice): terms ranked in Python (their order is
    str order, as SQL's and a search's), the ~1,000 entries of an Add ordered by numpy on the ranks,
    not by sorting a tuple each."""
    names = sorted(set(terms))
    rank = dict(zip(names, range(len(names)), strict=True))
    r = np.fromiter(map(rank.__getitem__, terms), dtype=np.int64, count=len(terms))
    o = np.asarray(ords, dtype=np.uint32)
    order = np.lexsort((o, r))
    return (" ".join(names), np.bincount(r, minlength=len(names)).astype(np.uint32).tobytes(),
            o[order].tobytes(), np.asarray(packed, dtype=np.uint64)[order].tobytes())


@dataclass(frozen=True)
class Delta:
    first_new: int
    terms: dict[str, int]  # term -> its index
    starts: Any  # per term index, where its entries start (one more: the end)
    ords: Any
    packed: Any
    new_in_body: Any  # per term index: turns new in this Add holding it in their body

    @property
    def nbytes(self) -> int:
        return int(self.starts.nbytes + self.ords.nbytes + self.packed.nbytes + self.new_in_body.nbytes) \
            + 120 * len(self.terms)  # (a dict entry and its str)

    def entries(self, term: str) -> tuple[Any, Any] | None:
        i = self.terms.get(term)
        if i is None:
            return None
        a, b = self.starts[i], self.starts[i + 1]
        return self.ords[a:b], self.packed[a:b]

    def df_inc(self, term: str) -> int:
        """Turns new in this Add holding `term` in their body."""
        i = self.terms.get(term)
        return 0 if i is None else int(self.new_in_body[i])

    def items(self) -> list[tuple[str, int, int]]:
        """(term, ordinal, packed) in term and ordinal order."""
        names = list(self.terms)
        out = []
        for i, t in enumerate(names):
            for k in range(int(self.starts[i]), int(self.starts[i + 1])):
                out.append((t, int(self.ords[k]), int(self.packed[k])))
        return out


def decode(first_new: int, terms: str, counts: bytes, ords: bytes, packed: bytes) -> Delta:
    names = terms.split(" ") if terms else []
    c = np.frombuffer(counts, dtype=np.uint32)
    starts = np.zeros(len(c) + 1, dtype=np.int64)
    np.cumsum(c, out=starts[1:])
    o, p = np.frombuffer(ords, dtype=np.uint32), np.frombuffer(packed, dtype=np.uint64)
    new = ((o >= first_new) & ((p & np.uint64(0xFFFF)) > 0)).astype(np.int64)
    per_term = np.add.reduceat(new, starts[:-1]) if len(o) else np.zeros(0, dtype=np.int64)
    return Delta(first_new, {t: i for i, t in enumerate(names)}, starts, o, p, per_term)


def gather_flat(rows: Sequence[tuple[int, str, bytes, bytes, bytes]]) -> tuple[list[str], tuple[Any, Any, Any],
                                                                             tuple[Any, Any, Any]]:
    """An owner's unmerged rows, oldest first ((first_new, terms, counts, ords, packed) as stored:
    `encode`'s), as a merge folds them in: the terms, in the order they first appear; the entries of
    turns new in their row as (term index int64, ordinals uint32, packed uint64) grouped by term,
    each term's in the order written (ordinals ascending); and the others (turns whose neighbour
    field grew) in the order written. Grouped in numpy, not entry by entry: a merge folds ~12,000
    entries, and a tuple for each was a fifth of its CPU."""
    ids: dict[str, int] = {}
    tids, ords, packs, new = [], [], [], []
    for first_new, terms, counts, o, p in rows:
        local = terms.split(" ") if terms else []
        at = np.frombuffer(o, dtype=np.uint32)
        per_term = np.frombuffer(counts, dtype=np.uint32)
        # (a term new here gets the next index: `len(ids)` is read before `setdefault` adds it)
        tids.append(np.repeat(np.fromiter([ids.setdefault(t, len(ids)) for t in local], dtype=np.int64,
                                          count=len(local)), per_term))
        ords.append(at)
        packs.append(np.frombuffer(p, dtype=np.uint64))
        new.append(at >= first_new)
    names = list(ids)
    if not names:
        empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.uint64))
        return [], empty, empty
    tid, o_all, p_all, is_new = (np.concatenate(x) for x in (tids, ords, packs, new))
    at_new = np.flatnonzero(is_new)
    order = at_new[np.argsort(tid[at_new], kind="stable")]  # by term, each term's in the order written
    at_old = np.flatnonzero(np.logical_not(is_new))
    return names, (tid[order], o_all[order], p_all[order]), (tid[at_old], o_all[at_old], p_all[at_old])


def gather(rows: Sequence[tuple[int, str, bytes, bytes, bytes]]) -> tuple[list[tuple[str, Any, Any]],
                                                                        list[tuple[str, int, int]]]:
    """`gather_flat` as per term groups of new entries (term, ordinals, packed) and (term, ordinal,
    packed) of the others."""
    names, (tid, o_new, p_new), (tid_old, o_old, p_old) = gather_flat(rows)
    cuts = (np.flatnonzero(tid[1:] != tid[:-1]) + 1).tolist()
    grouped = [(names[int(tid[a])], o_new[a:b], p_new[a:b])
               for a, b in zip([0, *cuts], [*cuts, len(tid)], strict=True) if b > a]
    others = [(names[t], k, v) for t, k, v in zip(tid_old.tolist(), o_old.tolist(), p_old.tolist(), strict=True)]
    return grouped, others


def combine(base: tuple[Any, Any], parts: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    """A term's segments' (ordinals, packed) with its delta entries, oldest first, over them: one
    entry per ordinal (the latest), ascending. Most delta entries are new turns past the segments'
    end: then this is a concatenation, not a sort of the term's every posting."""
    if not parts:
        return base
    do = np.concatenate([p[0] for p in parts])
    dp = np.concatenate([p[1] for p in parts])
    if len(do) > 1 and not bool(np.all(do[1:] > do[:-1])):
        last = len(do) - 1 - first_of_each(do[::-1])  # the latest of each, ascending
        do, dp = do[last], dp[last]
    bo, bp = base
    if not len(bo) or do[0] > bo[-1]:
        return np.concatenate((bo, do)), np.concatenate((bp, dp))
    j = np.searchsorted(bo, do)
    jj = np.minimum(j, len(bo) - 1)
    same = (j < len(bo)) & (bo[jj] == do)
    bp = bp.copy()
    bp[j[same]] = dp[same]  # turns whose counts changed (a neighbour field grew)
    if bool(same.all()):
        return bo, bp
    ords = np.concatenate((bo, do[~same]))
    order = np.argsort(ords, kind="stable")
    return ords[order], np.concatenate((bp, dp[~same]))[order]
