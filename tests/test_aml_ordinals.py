"""The array steps a search runs in place of numpy's slower helpers (index/messages/ordinals.py) give
numpy's answers, and the dense arrays `candidates` borrows (`_Dense`) are all zeros whenever lent."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from mateclaw_mem.index.messages import candidates as cand
from mateclaw_mem.index.messages.ordinals import first_of_each, is_one_of, unique, unique_inverse


def _arrays(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = [np.zeros(0, dtype=np.int64), np.array([7]), np.array([3, 3, 3]), np.array([-1, -1, 5])]
    for _ in range(200):
        n = int(rng.integers(1, 2_000))
        hi = int(rng.choice([2, 10, 1_000, 1 << 40]))
        dtype = rng.choice([np.int64, np.int32, np.uint32, np.intp])
        lo = 0 if np.issubdtype(dtype, np.unsignedinteger) else -hi // 3
        out.append(rng.integers(lo, hi, n).astype(dtype))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_unique_and_its_index_and_inverse_are_numpys(seed: int) -> None:
    for a in _arrays(seed):
        want = np.unique(a)
        got = unique(a)
        assert got.dtype == want.dtype and np.array_equal(got, want)
        assert np.array_equal(first_of_each(a), np.unique(a, return_index=True)[1])
        values, inverse = unique_inverse(a)
        want_values, want_inverse = np.unique(a, return_inverse=True)
        assert np.array_equal(values, want_values) and np.array_equal(inverse, want_inverse.reshape(-1))
        assert np.array_equal(values[inverse], a)


def test_is_one_of_is_isin() -> None:
    rng = np.random.default_rng(4)
    for _ in range(300):
        a = rng.integers(-1, 6, int(rng.integers(0, 500)))
        few = rng.integers(-1, 6, int(rng.integers(1, 4))).tolist()
        assert np.array_equal(is_one_of(a, few), np.isin(a, few))
    assert not is_one_of(np.array([1, 2]), []).any()


def test_a_lent_array_is_all_zeros_whatever_its_last_borrower_left() -> None:
    """Random borrowers of random sizes, nested, writing anywhere: those that say they give their
    array back zeroed do (when they return), the others leave garbage, some raise midway."""
    dense = cand._Dense()
    rng = random.Random(5)
    lent = 0

    def borrow(depth: int) -> None:
        nonlocal lent
        n = rng.choice([0, 1, 5, 64, 300, 1_000, 4_096])
        zeroed = rng.random() < 0.5
        try:
            with dense.lent(n, given_back_zeroed=zeroed) as a:
                lent += 1
                assert len(a) == n and not a.any(), "a lent array must be n zeros"
                at = np.array([rng.randrange(n) for _ in range(rng.randrange(20))], dtype=np.intp) if n else \
                    np.zeros(0, dtype=np.intp)
                a[at] = 1.5
                if depth < 3 and rng.random() < 0.4:
                    borrow(depth + 1)  # (two arrays lent at once, as `candidates` holds)
                if rng.random() < 0.1:
                    raise KeyError("midway")  # given back without being zeroed
                if zeroed:
                    a[at] = 0.0
        except KeyError:
            pass

    for _ in range(3_000):
        borrow(0)
    assert lent > 3_000
    kept = sum(b.nbytes for b, _ in dense._free)
    assert 0 < kept <= cand.KEEP_BYTES


def test_lent_arrays_are_never_shared_between_threads() -> None:
    dense = cand._Dense()
    seen: list[str] = []

    def search(k: int) -> None:
        for _ in range(200):
            with dense.lent(1_000) as a:
                assert not a.any()
                a[:] = k + 1
                time.sleep(0)  # (let the others run while this one holds its array)
                if not (a == k + 1).all():
                    seen.append(f"thread {k} saw another's writes")

    threads = [threading.Thread(target=search, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == []
