"""The numpy ranking steps after the first stage (index/messages/scoring.py: boosts, feedback
within the candidates, neighbours and threads, sessions, the best-first cut) give the very floats
and the very order of the dict loops they replaced (tests/support/reference_ranking.py), on random
histories, for the default ranking, its tail ranking and knobs that take other branches."""

from __future__ import annotations

import random
from dataclasses import replace

from mateclaw_mem.index.messages.ranking import Ranking, _rank
from tests.support.owner_view import OwnerView
from tests.support.random_views import WORDS, random_view
from tests.support.reference_ranking import reference_rank

BASE = Ranking()
RANKINGS = {
    "default": BASE,
    "tail": replace(BASE, **BASE.tail_overrides, tail_overrides={}),  # type: ignore[arg-type]
    "requery": replace(BASE, prf_requery=True),
    "last-question": replace(BASE, question_mode="last", echo_penalty=0.0),
    "no-threads": replace(BASE, thread_weight=0.0),
    "no-passing": replace(BASE, thread_weight=0.0, neighbour_weight=0.0, session_weight=0.0),
    "few-candidates": replace(BASE, max_candidates=15, lexicon_down=0.0),
    "all-candidates": replace(BASE, max_candidates=0, prf_docs=0),
}
FORMS = ("{a} {b}", "When did Ann {a}?", "How many {a} {b} did Bo {c}?", "Who {a} {b} {c}",
         "Where is Ann's {a} and Bo {b}", "{a} {b} {c} {d}", "Cy")


def _query(rng: random.Random) -> tuple[str, list[str]]:
    words = dict(zip("abcd", rng.sample(WORDS, 4), strict=True))
    options = [" ".join(rng.sample(WORDS, 2)) for _ in range(rng.choice((0, 0, 2)))]
    return rng.choice(FORMS).format(**words), options


def _search_between(view: OwnerView, rng: random.Random) -> None:
    """Searches between Adds leave term arrays cached, for the next Adds to patch."""
    for r in (BASE, RANKINGS["tail"]):
        _rank(view, *_query(rng), r, need=10, first_slot=True)


def test_the_numpy_steps_rank_exactly_like_the_loops() -> None:
    compared = found = moved = 0
    for seed in range(24):
        view = random_view(seed, 40 + 17 * seed if seed % 3 else 500 + 30 * seed, _search_between,
                           convs=3 + seed % 9)
        rng = random.Random(7000 + seed)
        for _ in range(6):
            query, options = _query(rng)
            for name, r in RANKINGS.items():
                for need, first_slot in ((10, True), (110, False)):
                    got = _rank(view, query, options, r, need=need, first_slot=first_slot)
                    want = reference_rank(view, query, options, r, need=need, first_slot=first_slot)
                    assert got == want, (seed, query, options, name, need)
                    assert all(type(s) is float and type(i) is int for s, i in got)
                    compared += 1
                    found += bool(got)
                    if first_slot and got:
                        plain = reference_rank(view, query, options, replace(r, first_prf_weight=0.0), need=need)
                        moved += plain[0][1] != got[0][1]
    assert compared == 24 * 6 * len(RANKINGS) * 2
    assert found > compared * 0.8 and moved > 10  # real rankings, and the first slot did move turns


def test_a_view_without_turns_and_a_word_no_turn_holds_rank_to_nothing() -> None:
    empty = OwnerView()
    assert _rank(empty, "anything at all", [], BASE, need=10, first_slot=True) == []
    view = random_view(3, 50)
    assert _rank(view, "zzz-unknown", [], BASE, need=10, first_slot=True) == []
    idx, vals = view.sat_arrays("zzz", BASE.sat_key())
    assert idx.size == 0 and vals.size == 0
