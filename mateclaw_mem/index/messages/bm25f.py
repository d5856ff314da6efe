"""BM25F's saturated term frequency, the one formula both the on-disk search (messages/disk_view.py)
and the in-memory reference view (tests/support/owner_view.py) compute, so their floats are equal:
the same operations in the same order, one document or many at once in numpy."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import lru_cache
from typing import Any

# (k1, per-field weights, per-field b): what a saturated term frequency depends on.
SatKey = tuple[float, tuple[float, ...], tuple[float, ...]]


def saturate(
    c: tuple[int, int, int, int], lens: tuple[int, int, int, int], w: tuple[float, ...], b: tuple[float, ...],
    k1: float, avg: tuple[float, ...],
) -> float:
    """BM25F: field-weighted, length-normalised term frequency, saturated."""
    tf = sum(w[f] * c[f] / (1.0 - b[f] + b[f] * lens[f] / avg[f]) for f in range(4) if c[f])
    return tf / (k1 + tf) if tf > 0 else 0.0


@lru_cache(maxsize=64)
def _row(values: tuple[float, ...]) -> Any:
    """`values` as a float64 array, made once (a search asks for the same few dozens of times; never
    written to)."""
    import numpy as np

    return np.array(values, dtype=np.float64)


@lru_cache(maxsize=1)
def _fields() -> tuple[Any, Any]:
    import numpy as np

    return np.arange(0, 64, 16, dtype=np.uint64), np.uint64(0xFFFF)


def normalisation(b: tuple[float, ...], lens: Any, avg: tuple[float, ...], *, own: bool = False) -> Any:
    """BM25F length normalisation per field, 1 - b + b x len / avg, of a row or rows of lengths;
    `own`: `lens` is a float64 array the caller gives up, written over. (In place after the first
    product, or from the first with `own`: a common word's rows are megabytes, and each temporary
    of that size is mapped, faulted in and unmapped again. The same floats: a product or a sum is
    the same either way round.)"""
    bb = _row(b)
    if own:
        out = lens
        out *= bb
    else:
        out = bb * lens
    out /= _row(avg)
    out += 1.0 - bb
    return out


def counts(packed: Any) -> Any:
    """Packed postings (`turns.unpack`, uint64) as an (n, 4) float array of field counts."""
    import numpy as np

    if _LITTLE and packed.dtype == np.uint64 and packed.flags.c_contiguous:
        # Field f is bits 16f..16f+15: on a little-endian machine, the f-th uint16 of the entry
        # (one conversion, not two shifted and masked uint64 copies first).
        return packed.view(np.uint16).reshape(-1, 4).astype(np.float64)
    shifts, mask = _fields()
    return ((packed[:, None] >> shifts) & mask).astype(np.float64)


def saturate_rows(c: Any, norms: Any, key: SatKey) -> tuple[Any, Any]:
    """`saturate` of many documents at once: `c` their field counts (`counts`), `norms` their
    `normalisation` under `key`. (A mask of the documents scoring > 0, their values.) A field a
    document lacks adds 0.0, which changes no sum: the same floats as `saturate`. Neither input is
    written to (the view keeps both for the search)."""
    import numpy as np

    k1, w, _ = key
    x = _row(w) * c
    x /= norms
    tf = x[:, 0] + x[:, 1]
    tf += x[:, 2]
    tf += x[:, 3]
    keep = tf > 0
    tf = tf[keep]
    d = tf + k1
    return keep, np.divide(tf, d, out=d)


def field_norms(b: tuple[float, ...], lens_of: Callable[[int], Any], avg: tuple[float, ...]) -> list[Any]:
    """`normalisation` field by field, as four 1-D arrays (None for a field whose b is 0: 1 - 0 + 0 x
    len / avg is exactly 1.0, and a division by 1.0 changes no float); `lens_of(f)` gives a fresh
    float64 array of field f's lengths, written over. The same floats, element by element."""
    out: list[Any] = []
    for f in range(4):
        if b[f] == 0.0:
            out.append(None)
            continue
        x = lens_of(f)
        x *= b[f]
        x /= avg[f]
        x += 1.0 - b[f]
        out.append(x)
    return out


def saturate_fields(packed: Any, norms: list[Any], key: SatKey) -> tuple[Any, Any]:
    """`saturate_rows(counts(packed), normalisation(...), key)` from `field_norms`, a field at a time:
    the same products, quotients and sums in the same order (w x c is c x w), on arrays of one float
    a posting rather than four. A common word's tens of thousands of postings made (n, 4) float
    temporaries of megabytes each - past the allocator's mmap threshold, so mapped, faulted in page
    by page and unmapped at every cold search; a field's stay on the heap and are reused."""
    import numpy as np

    k1, w, _ = key
    # Field f is bits 16f..16f+15 (`counts`): on a little-endian machine the f-th uint16 of the entry.
    as16 = packed.view(np.uint16).reshape(-1, 4) if _LITTLE and packed.dtype == np.uint64 \
        and packed.flags.c_contiguous else None
    shifts, mask = _fields()
    tf: Any = None
    for f in range(4):
        x = (as16[:, f] if as16 is not None else (packed >> shifts[f]) & mask).astype(np.float64)
        x *= w[f]
        if norms[f] is not None:
            x /= norms[f]
        if tf is None:
            tf = x
        else:
            tf += x
    keep = tf > 0
    tf = tf[keep]
    d = tf + k1
    return keep, np.divide(tf, d, out=d)


def stepped_averages(len_sum: list[int], n: int) -> tuple[float, ...]:
    """Average field lengths in 1% steps: a single Add rarely moves them (which changes every
    score), and the same sums give the same steps whichever way they were reached."""
    import math

    return tuple(AVG_STEP ** round(math.log(max(len_sum[i] / max(n, 1), 1.0), AVG_STEP)) for i in range(4))


AVG_STEP = 1.01
_LITTLE = sys.byteorder == "little"
