"""The first slot of a message search is chosen by a second, score-weighted query feedback; every
other turn keeps the order of the main ranking (`Ranking.first_prf_weight`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.index.messages.ranking import Ranking, first_slot_to

TS = 1683554160000
# Bags of words chosen so that the two feedbacks disagree on the best turn for "hiking": with
# equal weights the short "garden hiking garden lake" wins; weighted by the top turns' scores,
# the feedback favours "tent tent bread sunset hiking".
LINES = [
    "Caroline: eagles kids fishing pottery.",
    "Melanie: camping garden river lake.",
    "Caroline: painting river fishing trail tent.",
    "Melanie: tent ridge bread eagles trail river.",
    "Caroline: garden hiking garden lake.",
    "Melanie: river trail trail painting.",
    "Caroline: pottery painting.",
    "Melanie: tent tent bread sunset hiking.",
]


def test_the_rule_moves_only_the_chosen_turn_and_only_from_within_the_list() -> None:
    ranked = [(3.0, 10), (2.0, 20), (1.5, 30), (1.0, 40)]
    moved = first_slot_to(ranked, 30)
    assert [i for _, i in moved] == [30, 10, 20, 40]
    assert moved[0][0] > 3.0 and moved[1:] == [(3.0, 10), (2.0, 20), (1.0, 40)]
    assert first_slot_to(ranked, 10) == ranked  # already first
    assert first_slot_to(ranked, 99) == ranked  # not among the results: the set never changes


def _searches(tmp_path: Path, query: str) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    log = ConversationLog(tmp_path / "log.db")
    log.append("aml", "s1", [NewMessage("user", t, TS + i) for i, t in enumerate(LINES)], owner="u1", now_ms=TS)
    out = []
    for name, ranking in (("on", Ranking()), ("off", replace(Ranking(), first_prf_weight=0.0))):
        index = MessageIndex(tmp_path / f"{name}.db", ranking)
        index.sync(log)
        out.append([(h.content, h.score) for h in index.search("aml", "u1", query, limit=6)])
        index.close()
    log.close()
    return out[0], out[1]


def test_feedback_moves_a_different_turn_into_position_one_and_keeps_the_rest_in_order(tmp_path: Path) -> None:
    on, off = _searches(tmp_path, "hiking")
    assert Ranking().first_prf_weight > 0
    assert off[0][0] == LINES[4] and on[0][0] == LINES[7]
    assert on[1:] == [x for x in off if x[0] != LINES[7]]
    assert [s for _, s in on] == sorted((s for _, s in on), reverse=True)


def test_when_the_best_turn_is_already_first_nothing_changes(tmp_path: Path) -> None:
    on, off = _searches(tmp_path, "river")
    assert len(off) >= 3
    assert on == off
