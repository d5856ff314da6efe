"""The numpy first stage of a message search (index/messages/candidates.py, view._saturate_all,
view.saturated_among) gives the very floats of the plain loops it replaced, on random histories."""

from __future__ import annotations

import heapq
import random

from mateclaw_mem.index.messages.candidates import candidates
from mateclaw_mem.index.messages.ranking import Ranking
from mateclaw_mem.index.messages.view import Doc, OwnerView, _saturate

WORDS = [f"w{i}" for i in range(60)]


def _doc(rng: random.Random, doc_id: int, conv: str) -> Doc:
    tf: dict[str, tuple[int, int, int, int]] = {}
    for w in rng.sample(WORDS, rng.randint(1, 12)):
        tf[w] = tuple(rng.choice((0, 0, 1, 2, 3)) for _ in range(4))  # type: ignore[assignment]
        if not any(tf[w]):
            tf[w] = (1, 0, 0, 0)
    lens = tuple(sum(c[f] for c in tf.values()) + rng.randint(0, 20) for f in range(4))
    return Doc(doc_id, rng.choice(("Ann", "Bo", None)), False, False, 0.0, False, frozenset(), tf,
               lens, conv, "user", "text", 0)  # type: ignore[arg-type]


def _view(seed: int, n: int) -> OwnerView:
    rng = random.Random(seed)
    view = OwnerView()
    ids = iter(range(1, 10 * n))
    view.apply([_doc(rng, next(ids), f"c{k % 7}") for k in range(n)])
    # Later Adds, and a turn parsed again (its neighbour field grew), as the index does - with
    # searches in between, so that cached term scores are patched rather than made afresh.
    for _ in range(5):
        candidates(view, dict.fromkeys(rng.sample(WORDS, 8), 1.0), (), Ranking().sat_key(), 0)
        view.apply([_doc(rng, next(ids), f"c{rng.randint(0, 6)}") for _ in range(rng.randint(1, 9))])
        again = rng.choice(list(view.by_id))
        view.apply([_doc(rng, again, view.by_id[again].conversation_id)])
    return view


def _reference(view: OwnerView, qweights: dict[str, float], groups: list[dict[str, float]], key: tuple,
               limit: int) -> dict[int, float]:
    """The loops `_rank` ran before: sum per term in term order, the best related term per group,
    then the best `limit` (stable: the first met wins a tie)."""
    k1, w, b = key
    raw: dict[int, float] = {}
    for t, qw in qweights.items():
        f = qw * view.idf(t)
        for i, c in view.postings.get(t, {}).items():
            v = _saturate(c, view.by_id[i].lens, w, b, k1, view.avg)
            if v > 0:
                raw[i] = raw.get(i, 0.0) + f * v
    for group in groups:
        best: dict[int, float] = {}
        for t, rel in group.items():
            if t in qweights:
                continue
            f = rel * view.idf(t)
            for i, c in view.postings.get(t, {}).items():
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
            got = candidates(view, qweights, groups, key, limit)
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


def test_a_common_term_among_few_candidates_is_read_from_its_arrays_with_the_same_values() -> None:
    key = Ranking().sat_key()
    view = _view(11, 400)
    rng = random.Random(5)
    read = 0
    for t in WORDS[:20]:
        docs = view.postings.get(t, {})
        among = set(rng.sample(list(view.by_id), 4))
        if len(docs) <= 8 * len(among):
            continue
        part = view.saturated_among(t, key, among)  # the arrays' values of those 4 turns, nothing else
        assert set(part) <= among and t not in view.sat  # no dict of the whole term was made
        k1, w, b = key
        assert part == {i: v for i in among if (c := docs.get(i)) is not None
                        and (v := _saturate(c, view.by_id[i].lens, w, b, k1, view.avg)) > 0}
        read += 1
    assert read >= 5


def test_scoring_a_term_among_candidates_reads_the_whole_terms_values() -> None:
    key = Ranking().sat_key()
    view = _view(7, 200)
    rng = random.Random(3)
    for t in WORDS[:20]:
        among = set(rng.sample(list(view.by_id), 40))
        part = view.saturated_among(t, key, among)  # those turns only, or the whole term when it is small
        whole = view.saturated(t, key)  # the vectorised whole-term entry
        assert {i: v for i, v in part.items() if i in among} == {i: v for i, v in whole.items() if i in among}
        assert set(part) <= set(whole)
        assert view.saturated_among(t, key, among) is whole  # now from the cache
        k1, w, b = key
        assert whole == {i: v for i, c in view.postings[t].items()
                         if (v := _saturate(c, view.by_id[i].lens, w, b, k1, view.avg)) > 0}
