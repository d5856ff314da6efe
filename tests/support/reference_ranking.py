"""The ranking steps after the first stage as plain Python loops over dicts of turn ids: what
`index/messages/ranking.py` ran before they moved to numpy (messages/scoring.py), kept as the
reference the numpy steps must equal float for float (tests/test_aml_scoring.py). The query
analysis and the first stage are the product's own (each tested on its own)."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable

from mateclaw_mem.index.messages.candidates import candidates
from mateclaw_mem.index.messages.ranking import Boosts, Ranking, analyse, first_slot_to
from mateclaw_mem.index.messages.turns import Doc, unpack
from mateclaw_mem.index.tokenizer import STOPWORDS
from tests.support.owner_view import OwnerView, _saturate


def reference_rank(view: OwnerView, query: str, options: list[str], r: Ranking, *, need: int,
                   first_slot: bool = False) -> list[tuple[float, int]]:
    q = analyse(view, query, options, r)
    if q is None:
        return []
    pos, vals = candidates(view, q.qweights, q.groups, r.sat_key(), r.max_candidates)
    raw = {view.ids[p]: v for p, v in zip(pos.tolist(), vals.tolist(), strict=True)}
    by_id = _boosted(view, raw, q.boosts, r)
    if not by_id:
        return []

    def expanded(extra: dict[str, float]) -> dict[int, float]:
        scores = raw
        if extra:
            scores = dict(raw)
            for i, v in _raw(view, extra, r, within=None if r.prf_requery else raw.keys()).items():
                scores[i] = scores.get(i, 0.0) + v
        return _settle(view, _boosted(view, scores, q.boosts, r), r)

    flat = _feedback(view, by_id, q.qweights, r) if r.prf_docs and r.prf_terms and r.prf_weight else {}
    final = expanded(flat) if flat else _settle(view, by_id, r)
    ranked = [(sc, -neg) for sc, neg in heapq.nlargest(need, ((sc, -i) for i, sc in final.items() if sc > 0))]
    if first_slot and ranked and r.first_prf_weight and r.first_prf_docs and r.first_prf_terms:
        weighted = _weighted_feedback(view, by_id, q.qweights, r)
        if weighted:
            alt = expanded(weighted)
            ranked = first_slot_to(ranked, min(alt, key=lambda i: (-alt[i], i)))
    return ranked


def _settle(view: OwnerView, by_id: dict[int, float], r: Ranking) -> dict[int, float]:
    if r.neighbour_weight or r.thread_weight:
        by_id = _inherit(view, by_id, r)
    if r.session_weight and by_id:
        per_session: dict[str, list[float]] = {}
        for i, sc in by_id.items():
            per_session.setdefault(view.by_id[i].conversation_id, []).append(sc)
        strength = {c: sum(sorted(v, reverse=True)[:3]) for c, v in per_session.items()}
        top = max(strength.values()) or 1.0
        w = r.session_weight
        by_id = {i: sc * (1.0 + w * strength[view.by_id[i].conversation_id] / top) for i, sc in by_id.items()}
    return by_id


def _inherit(view: OwnerView, by_id: dict[int, float], r: Ranking) -> dict[int, float]:
    inherited: dict[int, float] = {}
    thread: dict[int, float] = {}
    for i, sc in by_id.items():
        d = view.by_id[i]
        for j in d.around:
            if inherited.get(j, 0.0) < sc:
                inherited[j] = sc
        if r.thread_weight:
            for k in d.thread:
                if thread.get(k, 0.0) < sc:
                    thread[k] = sc
    out = dict(by_id)
    for j, sc in inherited.items():
        out[j] = out.get(j, 0.0) + r.neighbour_weight * sc
    for k, sc in thread.items():
        own = out.get(k, 0.0)
        v, cap = own + r.thread_weight * sc, sc * 0.999
        out[k] = v if v <= cap else (cap if cap > own else own)
    return out


def _raw(view: OwnerView, qweights: dict[str, float], r: Ranking, *,
         within: Iterable[int] | None = None) -> dict[int, float]:
    k1, w, b = r.sat_key()
    ids = list(view.by_id) if within is None else list(within)
    acc: dict[int, float] = {}
    for t, qw in qweights.items():
        f = qw * view.idf(t)
        for i in ids:
            d = view.by_id[i]
            posting = view.postings.get(t, {}).get(view.pos[i])
            c = unpack(posting) if posting is not None else None
            v = _saturate(c, d.lens, w, b, k1, view.avg) if c else 0.0
            if v > 0:
                acc[i] = acc.get(i, 0.0) + f * v
    return acc


def _boosted(view: OwnerView, raw: dict[int, float], q: Boosts, r: Ranking) -> dict[int, float]:
    out = {}
    for i, s in raw.items():
        for f in _factors(view.by_id[i], q, r):
            s *= f
        if s > 0:
            out[i] = s
    return out


def _factors(d: Doc, q: Boosts, r: Ranking) -> tuple[float, ...]:
    fs: list[float] = []
    if r.question_mode == "share":
        fs.append(1.0 - (1.0 - r.question_penalty) * d.question_share)
    elif d.is_question:
        fs.append(r.question_penalty)
    if d.echo:
        fs.append(1.0 - r.echo_penalty * d.echo)
    if d.speaker in q.named:
        fs.append(r.speaker_boost)
    if q.when and d.has_time:
        fs.append(r.when_boost)
    if q.count and d.has_number:
        fs.append(r.count_boost)
    if q.known_names is not None and not d.names <= q.known_names:
        fs.append(r.name_boost)
    return tuple(fs)


def _feedback(view: OwnerView, scores: dict[int, float], qweights: dict[str, float], r: Ranking) -> dict[str, float]:
    top = [-neg for _, neg in heapq.nlargest(r.prf_docs, ((sc, -i) for i, sc in scores.items()))]
    gain: Counter[str] = Counter()
    for i in top:
        for t, c in view.tf(i).items():
            if c[0] and t not in qweights and t not in STOPWORDS:
                gain[t] += view.idf(t) / len(top)
    return {t: r.prf_weight for t, _ in gain.most_common(r.prf_terms)}


def _weighted_feedback(view: OwnerView, scores: dict[int, float], qweights: dict[str, float],
                       r: Ranking) -> dict[str, float]:
    top = heapq.nlargest(r.first_prf_docs, ((sc, -i) for i, sc in scores.items()))
    total = sum(sc for sc, _ in top)
    if total <= 0:
        return {}
    gain: Counter[str] = Counter()
    for sc, neg in top:
        for t, c in view.tf(-neg).items():
            if c[0] and t not in qweights and t not in STOPWORDS:
                gain[t] += sc / total * view.idf(t)
    strongest = gain.most_common(r.first_prf_terms)
    if not strongest or strongest[0][1] <= 0:
        return {}
    return {t: r.first_prf_weight * g / strongest[0][1] for t, g in strongest}
