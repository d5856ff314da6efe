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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

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
    c: Any = np.frombuffer(ords, dtype=_COUNTS[cw], count=n, offset=_HEAD + (n - 1) * gsz)
    if cw == 0:
        return out, _BYTE_OF_2[c]
    if cw == 1:
        return out, _BYTE_OF_4[c & np.uint16(0xFF)] | (_BYTE_OF_4[c >> np.uint16(8)] << np.uint64(32))
    if cw == 2:
        return out, widen(c.tobytes(), n)
    return out, c


def encode(entries: dict[tuple[str, int], int]) -> tuple[str, bytes, bytes, bytes]:
    """(terms space-joined, per term its entry count as uint32, ordinals uint32, packed uint64),
    sorted by term and ordinal."""
    order = sorted(entries)
    terms: list[str] = []
    counts: list[int] = []
    for t, _ in order:
        if terms and terms[-1] == t:
            counts[-1] += 1
        else:
            terms.append(t)
            counts.append(1)
    return (" ".join(terms), np.array(counts, dtype=np.uint32).tobytes(),
            np.array([o for _, o in order], dtype=np.uint32).tobytes(),
            np.array([entries[k] for k in order], dtype=np.uint64).tobytes())


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


def gather(rows: Sequence[tuple[int, str, bytes, bytes, bytes]]) -> tuple[list[tuple[str, Any, Any]],
                                                                        list[tuple[str, int, int]]]:
    """An owner's unmerged rows, oldest first ((first_new, terms, counts, ords, packed) as stored:
    `encode`'s), as a merge folds them in: per term, the entries of turns new in their row (ordinals
    ascending and packed counts, numpy), terms in the order they first appear; and the others (turns
    whose neighbour field grew) as (term, ordinal, packed) in the order written. Grouped in numpy, not
    entry by entry: a merge folds ~12,000 entries, and a tuple for each was a fifth of its CPU."""
    ids: dict[str, int] = {}
    names: list[str] = []
    tids, ords, packs, new = [], [], [], []
    for first_new, terms, counts, o, p in rows:
        local = terms.split(" ") if terms else []
        for t in local:
            if t not in ids:
                ids[t] = len(names)
                names.append(t)
        at = np.frombuffer(o, dtype=np.uint32)
        per_term = np.frombuffer(counts, dtype=np.uint32)
        tids.append(np.repeat(np.array([ids[t] for t in local], dtype=np.int64), per_term))
        ords.append(at)
        packs.append(np.frombuffer(p, dtype=np.uint64))
        new.append(at >= first_new)
    if not names:
        return [], []
    tid, o_all, p_all, is_new = (np.concatenate(x) for x in (tids, ords, packs, new))
    at_new = np.flatnonzero(is_new)
    order = at_new[np.argsort(tid[at_new], kind="stable")]  # by term, each term's in the order written
    t_sorted = tid[order]
    cuts = (np.flatnonzero(t_sorted[1:] != t_sorted[:-1]) + 1).tolist()
    o_new, p_new = o_all[order], p_all[order]
    grouped = [(names[int(t_sorted[a])], o_new[a:b], p_new[a:b])
               for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True) if b > a]
    at_old = np.flatnonzero(np.logical_not(is_new))
    others = [(names[t], k, v) for t, k, v in zip(tid[at_old].tolist(), o_all[at_old].tolist(),
                                                  p_all[at_old].tolist(), strict=True)]
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
        last = len(do) - 1 - np.unique(do[::-1], return_index=True)[1]  # the latest of each, ascending
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
