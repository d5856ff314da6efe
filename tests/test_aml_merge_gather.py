"""`delta.gather` (a merge's grouping of an owner's unmerged rows, in numpy) against the entry-by-entry
grouping it replaced, on random rows as Adds write them: the same entries of new turns per term, in
the same order, and the same other entries in the order written."""

from __future__ import annotations

import random

import pytest

from mateclaw_mem.index.messages.delta import decode, encode, gather

VOCAB = [f"w{k}" for k in range(60)]


def _rows(rng: random.Random, adds: int) -> list[tuple[int, str, bytes, bytes, bytes]]:
    """Rows as `PostingWriter.flush` stores them: each Add's new turns (ordinals from its first_new
    on) and, now and then, grown neighbours (ordinals below it, some repeated across Adds)."""
    rows, n = [], 0
    for _ in range(adds):
        first_new = n
        entries: dict[tuple[str, int], int] = {}
        for ordinal in range(n, n + rng.randint(0, 6)):
            for t in rng.sample(VOCAB, rng.randint(1, 8)):
                entries[(t, ordinal)] = rng.randint(0, 3) | rng.randint(0, 2) << 16 | rng.randint(0, 1) << 48
            n = ordinal + 1
        for _ in range(rng.randint(0, 4) if first_new else 0):
            entries[(rng.choice(VOCAB), rng.randrange(first_new))] = rng.randint(1, 1 << 40)
        rows.append((first_new, *encode(entries)))
    return rows


def _reference(rows: list[tuple[int, str, bytes, bytes, bytes]]) -> tuple[dict[str, tuple[list[int], list[int]]],
                                                                         list[tuple[str, int, int]]]:
    new: dict[str, tuple[list[int], list[int]]] = {}
    old: list[tuple[str, int, int]] = []
    for first_new, *rest in rows:
        for t, ordinal, packed in decode(first_new, *rest).items():
            if ordinal >= first_new:
                got = new.setdefault(t, ([], []))
                got[0].append(ordinal)
                got[1].append(packed)
            else:
                old.append((t, ordinal, packed))
    return new, old


@pytest.mark.parametrize("seed", range(30))
def test_gather_groups_as_the_entry_by_entry_loop_did(seed: int) -> None:
    rng = random.Random(seed)
    rows = _rows(rng, rng.randint(1, 25))
    if seed % 5 == 0:
        rows.append((rows[-1][0], *encode({})))  # a writer with nothing of its own (a merger's)
    want_new, want_old = _reference(rows)
    got_new, got_old = gather(rows)
    assert {t: (o.tolist(), p.tolist()) for t, o, p in got_new} == want_new
    assert len(got_new) == len(want_new)  # one group per term
    assert all(o.dtype.itemsize == 4 and p.dtype.itemsize == 8 for _, o, p in got_new)
    assert got_old == want_old


def test_no_rows_and_empty_rows_gather_nothing() -> None:
    assert gather([]) == ([], [])
    assert gather([(0, *encode({}))]) == ([], [])
