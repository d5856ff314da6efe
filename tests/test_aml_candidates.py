"""The numpy first stage of a message search (index/messages/candidates.py, view._saturate_all,
view.sat_among) gives the very floats of the plain loops it replaced, on random histories."""

from __future__ import annotations

import heapq
import random

from mateclaw_mem.index.messages.candidates import candidates
from mateclaw_mem.index.messages.ranking import Ranking
from tests.support.owner_view import OwnerView, _saturate
from tests.support.random_views import WORDS, random_view


def _search(view: OwnerView, rng: random.Random) -> None:
    candidates(view, dict.fromkeys(rng.sample(WORDS, 8), 1.0), (), Ranking().sat_key(), 0)


def _view(seed: int, n: int) -> OwnerView:
    return random_view(seed, n, _search)


def _holding(view: OwnerView, t: str) -> dict[int, tuple[int, int, int, int]]:
    """{turn id: its counts of `t`} for the turns holding `t`."""
    return {i: tf[t] for i in view.by_id if t in (tf := view.tf(i))}


def _got(view: OwnerView, *args: object) -> dict[int, float]:
    pos, vals = candidates(view, *args)  # type: ignore[arg-type]
    return {view.ids[p]: v for p, v in zip(pos.tolist(), vals.tolist(), strict=True)}


def _reference(view: OwnerView, qweights: dict[str, float], groups: list[dict[str, float]], key: tuple,
               limit: int) -> dict[int, float]:
    """The loops `_rank` ran before: sum per term in term order, the best related term per group,
    then the best `limit` (stable: the first met wins a tie)."""
    k1, w, b = key
    raw: dict[int, float] = {}
    for t, qw in qweights.items():
        f = qw * view.idf(t)
        for i, c in _holding(view, t).items():
            v = _saturate(c, view.by_id[i].lens, w, b, k1, view.avg)
            if v > 0:
                raw[i] = raw.get(i, 0.0) + f * v
    for group in groups:
        best: dict[int, float] = {}
        for t, rel in group.items():
            if t in qweights:
                continue
            f = rel * view.idf(t)
            for i, c in _holding(view, t).items():
                v = f * _saturate(c, view.by_id[i].lens, w, b, k1, view.avg)
                if v > 0 and best.get(i, 0.0) < v:
                    best[i] = v
        for i, v in best.items():
            raw[i] = raw.get(i, 0.0) + v
    if limit and len(raw) > limit:
        raw = dict(heapq.nlargest(limit, raw.items(), key=lambda kv: kv[1]))
    return raw


def test_candidates_are_the_loops_floats_exactly() -> None:
    key = Ranking().sat_key()
    checked = cut = patched = 0
    for seed in range(40):
        view = _view(seed, 30 + seed * 7 if seed % 2 else 600 + seed * 40)  # small ones move the averages
        patched += bool(view.patches)
        rng = random.Random(1000 + seed)
        qweights = {t: rng.choice((1.0, 0.3)) for t in rng.sample(WORDS, rng.randint(1, 5))}
        groups = [{t: 0.1 for t in rng.sample(WORDS, 3)} for _ in range(rng.randint(0, 2))]
        for limit in (0, 10, 1000):
            got = _got(view, qweights, groups, key, limit)
            want = _reference(view, qweights, groups, key, limit)
            if limit and len(want) == limit:
                cut += 1
                # Ties at the cut may be broken by another order: compare above the cut score.
                floor = min(want.values())
                assert {i: v for i, v in got.items() if v > floor} == {i: v for i, v in want.items() if v > floor}
                assert len(got) == limit
            else:
                assert got == want  # same turns, bit-identical sums
            checked += 1
    assert checked == 120 and cut > 10 and patched > 5


def test_a_big_term_read_among_candidates_gives_its_arrays_values_and_is_cached_on_its_second_read() -> None:
    key = Ranking().sat_key()
    view = _view(11, 400)
    rng = random.Random(5)
    read = 0
    for t in WORDS[:30]:
        among = rng.sample(list(view.pos.values()), 4)
        part = view.sat_among(t, key, among)
        if part is None:
            continue
        assert key not in view.arrays.get(t, {})  # read for those four only, nothing made
        at, vals = part
        k1, w, b = key
        want = {k: v for k, p in enumerate(among) if (c := view.tf(view.ids[p]).get(t)) is not None
                and (v := _saturate(c, view.by_id[view.ids[p]].lens, w, b, k1, view.avg)) > 0}
        assert dict(zip(at.tolist(), vals.tolist(), strict=True)) == want
        assert view.sat_among(t, key, among) is None  # a second read: the arrays are made instead
        idx, whole = view.sat_arrays(t, key)
        assert {int(p): v for p, v in zip(idx.tolist(), whole.tolist(), strict=True) if p in among} == {
            among[k]: v for k, v in want.items()}
        read += 1
    assert read >= 5


def test_a_terms_arrays_are_the_one_at_a_time_floats_after_patches() -> None:
    key = Ranking().sat_key()
    k1, w, b = key
    view = _view(8, 1200)  # long enough that the Adds leave the averages (and the arrays) in place
    assert view.patches
    for t in WORDS:
        idx, vals = view.sat_arrays(t, key)
        assert {view.ids[p]: v for p, v in zip(idx.tolist(), vals.tolist(), strict=True)} == {
            i: v for i, c in _holding(view, t).items()
            if (v := _saturate(c, view.by_id[i].lens, w, b, k1, view.avg)) > 0}


def test_field_at_a_time_saturation_is_the_row_at_a_time_floats() -> None:
    """bm25f.saturate_fields (the on-disk search's, one field's array at a time, a field whose b is 0
    not divided) gives saturate_rows' very floats, for packed postings as stored and as a strided
    view (the shift-and-mask path), and for keys whose weights or b are 0."""
    import numpy as np

    from mateclaw_mem.index.messages.bm25f import (
        counts,
        field_norms,
        normalisation,
        saturate_fields,
        saturate_rows,
    )

    rng = np.random.default_rng(7)
    avg = (13.7, 4.1, 27.9, 2.0)
    keys = [Ranking().sat_key(), (1.2, (1.0, 0.0, 0.3, 0.5), (0.75, 0.3, 0.0, 0.0)),
            (0.9, (0.0, 0.0, 0.0, 0.0), (0.4, 0.3, 0.3, 0.0))]
    for n in (0, 1, 7, 5000):
        c = rng.integers(0, 4, size=(n, 4)).astype(np.uint64)
        c[rng.random((n, 4)) < 0.01] = 65535
        packed = c[:, 0] | (c[:, 1] << np.uint64(16)) | (c[:, 2] << np.uint64(32)) | (c[:, 3] << np.uint64(48))
        lens = rng.integers(0, 400, size=(n, 4)).astype(np.float64)
        for p in (packed, np.repeat(packed, 2)[::2]):  # (the second a strided view)
            for key in keys:
                want = saturate_rows(counts(p), normalisation(key[2], lens, avg), key)
                got = saturate_fields(p, field_norms(key[2], lambda f, lens=lens: lens[:, f].copy(), avg), key)
                assert np.array_equal(got[0], want[0])
                assert got[1].tobytes() == want[1].tobytes()
