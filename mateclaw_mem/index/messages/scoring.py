"""The ranking steps after the first stage, in numpy over view positions (messages/columns.py).

A search scores a few hundred candidate turns (messages/candidates.py) and then, up to three times
per ranking, boosts them, passes scores along the conversation and weighs the sessions. Done turn by
turn in Python that was most of a search in a long history (about 8 of 14 ms at 30,000 turns,
scripts/bench/aml_scale.py). Each step here makes the floats the dict loops made: the same
operations in the same order (a boost a turn lacks multiplies by 1.0 and an absent term adds 0.0,
which change no float), so the order and every score are unchanged (tests/test_aml_scoring.py
runs both on random histories).

Scores are (positions, values) pairs of arrays, one entry per turn, in no particular order: every
result is sorted by (score, lower id first) before it leaves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mateclaw_mem.index.messages.columns import NEXT, PREV, THREAD_NEXT, THREAD_PREV
from mateclaw_mem.index.messages.ordinals import is_one_of

if TYPE_CHECKING:
    from mateclaw_mem.index.messages.bm25f import SatKey
    from mateclaw_mem.index.messages.rank_types import Boosts, Ranking, View


def factors(view: View, pos: Any, q: Boosts, r: Ranking) -> list[Any]:
    """Each turn's boosts at `pos`, one array per boost in the fixed order they multiply."""
    view.prepare(pos)  # (the on-disk view reads these turns' columns and links now)
    cols = view.cols
    out = []
    if r.question_mode == "share":
        out.append(1.0 - (1.0 - r.question_penalty) * cols.question_share[pos])
    else:
        out.append(np.where(cols.is_question[pos], r.question_penalty, 1.0))
    out.append(1.0 - r.echo_penalty * cols.echo[pos])  # no echo: exactly 1.0
    codes = [cols.speaker_codes[s] for s in q.named if s in cols.speaker_codes]
    if codes:
        out.append(np.where(is_one_of(cols.speaker[pos], codes), r.speaker_boost, 1.0))
    if q.when:
        out.append(np.where(cols.has_time[pos], r.when_boost, 1.0))
    if q.count:
        out.append(np.where(cols.has_number[pos], r.count_boost, 1.0))
    if q.known_names is not None:
        out.append(np.where(cols.names_within(pos, q.known_names), 1.0, r.name_boost))
    return out


def boosted(pos: Any, raw: Any, fs: list[Any]) -> tuple[Any, Any]:
    """Each turn's score times its boosts, one after another; the turns left above 0."""
    s = raw
    for f in fs:
        s = s * f
    keep = s > 0
    return pos[keep], s[keep]


def among(view: View, qweights: dict[str, float], key: SatKey, pos: Any) -> Any:
    """The sums over `qweights`' terms of weight x idf x saturated tf for the turns at `pos` (0.0
    where a turn holds none of them), added term by term in the terms' order."""
    slot = None
    # The on-disk view scores every term's entries at `pos` at once (the same floats, term by term).
    every = view.sat_among_all(qweights, key, pos)
    acc = np.zeros(len(pos))
    for t, qw in qweights.items():
        part = every.get(t)
        if part is not None:
            at, vals = part
        else:
            idx, vals = view.sat_arrays(t, key)
            if not idx.size:
                continue
            if slot is None:
                slot = np.full(len(view.ids), -1, dtype=np.intp)
                slot[pos] = np.arange(len(pos))
            s = slot[idx]
            hit = s >= 0
            at, vals = s[hit], vals[hit]
        acc[at] += (qw * view.idf(t)) * vals
    return acc


def everywhere(view: View, qweights: dict[str, float], key: SatKey) -> Any:
    """`among` for every turn holding one of the terms (a dense array over positions)."""
    view.load(qweights)
    acc = np.zeros(len(view.ids))
    for t, qw in qweights.items():
        idx, vals = view.sat_arrays(t, key)
        if idx.size:
            acc[idx] += (qw * view.idf(t)) * vals
    return acc


def settle(view: View, pos: Any, val: Any, r: Ranking) -> tuple[Any, Any]:
    """Scores after the steps that pass them along the conversation: a turn inherits a share of the
    best neighbouring turn's score and of the same speaker's turn two steps away (never rising above
    that one), then the turns of the sessions that match best are raised. `val` > 0."""
    if r.neighbour_weight or r.thread_weight:
        pos, val = _inherit(view, pos, val, r)
    if r.session_weight and pos.size:
        # A session that talks about the topic at length is where the answer most likely is: its
        # strength is the sum of its best three scores, in descending order.
        conv = view.cols.conv[pos]
        order = np.lexsort((-val, conv))
        pos, val, conv = pos[order], val[order], conv[order]
        first = np.empty(len(conv), dtype=bool)
        first[0] = True
        np.not_equal(conv[1:], conv[:-1], out=first[1:])
        group = np.cumsum(first) - 1
        starts = np.flatnonzero(first)
        place = np.arange(len(conv)) - starts[group]  # 0 for a session's best turn, 1 the next...
        strength = np.zeros(len(starts))
        for k in range(3):
            at = place == k
            strength[group[at]] += val[at]
        top = float(strength.max()) or 1.0
        val = val * (1.0 + r.session_weight * strength[group] / top)
    return pos, val


def _inherit(view: View, pos: Any, val: Any, r: Ranking) -> tuple[Any, Any]:
    n = len(view.ids)
    links = view.cols.links
    out = np.zeros(n)
    out[pos] = val
    present = np.zeros(n, dtype=bool)
    present[pos] = True

    def best_from(columns: tuple[int, int]) -> Any:
        # A turn has one predecessor and one successor, so each column's targets are distinct and
        # a plain fancy assignment takes the larger of two sources.
        got = np.zeros(n)
        for c in columns:
            to = links[pos, c]
            m = to >= 0
            t = to[m]
            got[t] = np.maximum(got[t], val[m])
        return got

    inherited = best_from((PREV, NEXT))
    at = np.flatnonzero(inherited > 0)
    out[at] = out[at] + r.neighbour_weight * inherited[at]
    present[at] = True
    if r.thread_weight:
        thread = best_from((THREAD_PREV, THREAD_NEXT))
        at = np.flatnonzero(thread > 0)
        own, src = out[at], thread[at]
        v, cap = own + r.thread_weight * src, src * 0.999  # never above its source, never below its own score
        out[at] = np.where(v <= cap, v, np.where(cap > own, cap, own))
        present[at] = True
    kept = np.flatnonzero(present)
    return kept, out[kept]


def best(view: View, pos: Any, val: Any, need: int) -> list[tuple[float, int]]:
    """(score, turn id) of the best `need` turns scoring above 0, best first, ties by lower id."""
    if need <= 0:
        return []
    keep = val > 0
    pos, val = pos[keep], val[keep]
    if len(val) > need:
        theta = np.partition(val, len(val) - need)[len(val) - need]
        keep = val >= theta
        pos, val = pos[keep], val[keep]
    ids = view.cols.ids[pos]
    order = np.lexsort((ids, -val))[:need]
    return list(zip(val[order].tolist(), ids[order].tolist(), strict=True))


def top_one(view: View, pos: Any, val: Any) -> int:
    """The id of the best-scoring turn (ties: the lower id)."""
    ids = view.cols.ids[pos]
    return int(ids[val == val.max()].min())
