"""Dense retrieval that can only help: weighted fusion, a bad (random-vector) embedding server
leaving the keyword ranking in place, query/passage modes, embeddings without a chat model, the
background backfill and its status, incomplete-vector flags, numpy and pure-Python scoring alike,
and AML search behind the same setting."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import pytest

from mateclaw_mem.conversations.aml import AmlMessage
from mateclaw_mem.index import dense
from mateclaw_mem.index.dense import Gate, Matrix, agreement, fuse, pack
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import ModelSettings, load_settings

AGENT = "default"

# Topic notes: each query has one section that clearly holds it (keyword-wise).
NOTES = {
    "Boat": "We keep the sailing boat at the harbour in La Rochelle; the mast was repaired in May.",
    "Garden": "The vegetable garden has tomatoes, courgettes and basil; watering every evening.",
    "Chess": "Chess club on Thursdays at the office, five members, rapid games of ten minutes.",
    "Dentist": "Dentist appointment with Dr. Faure near Croix-Rousse on January 12th.",
    "Laptop": "The laptop battery is swelling; IT replaces it next week with a new battery.",
    "Concert": "Concert tickets for the Fourvière festival on July 4th, row F, two seats.",
    "Passport": "Passport renewal at the prefecture before the March trip to Montreal.",
    "Bike": "The bike chain snapped on the way to work; bought a new chain at Cycles Verts.",
}
QUERIES = [("sailing boat mast", "Boat"), ("tomatoes basil watering", "Garden"), ("chess club Thursdays", "Chess"),
           ("dentist appointment", "Dentist"), ("laptop battery", "Laptop"), ("concert tickets festival", "Concert"),
           ("passport renewal prefecture", "Passport"), ("bike chain snapped", "Bike")]


def _settings(workspace: Path, base_url: str, **model: object):
    return load_settings(None, workspace, overrides={
        "timezone": "Europe/Berlin", "search": {"watch": False},
        "model": {"base_url": base_url, "timeout_seconds": 5, "max_retries": 0, **model},
    })


def _write_notes(svc: Services) -> None:
    svc.store.ensure_agent(AGENT)
    body = "# Memory\n\n" + "".join(f"## {title}\n\n{text}\n\n" for title, text in NOTES.items())
    svc.store.write(AGENT, "MEMORY.md", body, expected_sha=None, actor="person")


def _figures(svc: Services) -> tuple[list[str], float, float]:
    tops, hit1, rr = [], 0, 0.0
    for query, want in QUERIES:
        titles = [h.title for h in svc.search.search(query, limit=10, record=False).hits]
        tops.append(titles[0])
        hit1 += titles[0] == want
        rr += 1 / (titles.index(want) + 1) if want in titles else 0.0
    return tops, hit1 / len(QUERIES), rr / len(QUERIES)


# -- fusion ----------------------------------------------------------------------------------------


def test_fusion_keeps_the_lexical_order_unless_the_dense_signal_is_strong() -> None:
    lexical = [(1, 10.0), (2, 6.0), (3, 5.5)]
    # Weight 0: the lexical order exactly; dense-only ids come after, with score 0.
    assert [i for i, _ in fuse(lexical, [(3, 0.9), (4, 0.8)], 0.0)][:3] == [1, 2, 3]
    # A mild dense preference cannot reorder a clear lexical gap (1 over 2)...
    dense = [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.15)]
    fused = fuse(lexical, dense, 0.2, keep=0)
    assert fused[0][0] == 1
    # ...but a strong one can swap close neighbours (2 and 3 are 0.05 apart lexically)...
    assert [i for i, _ in fused].index(3) < [i for i, _ in fused].index(2)
    # ...except within the kept head (by default the keyword top 3 never move).
    assert [i for i, _ in fuse(lexical, dense, 0.2)][:3] == [1, 2, 3]
    # A dense-only id enters with 0 lexical: below every lexical hit of a quarter of the top or more.
    assert [i for i, _ in fused][-1] == 4 and fused[-1][1] == pytest.approx(0.2 * 0.25)


def test_the_agreement_gate_stays_shut_for_cosines_unrelated_to_the_keywords() -> None:
    rng = random.Random(7)
    lexical = [(i, 100.0 - i) for i in range(30)]
    random_gate, useful_gate = Gate(), Gate()
    assert random_gate.factor == 0.0  # shut until searches show the model means something
    for _ in range(40):
        noise = [(i, rng.gauss(0.8, 0.03)) for i in range(300)]  # e5-like: high, narrow, meaningless
        random_gate.update(lexical, noise)
        # The same kind of noise, but the keywords' top 10 sit a little higher: a model that understands.
        useful_gate.update(lexical, [(i, c + (0.05 if i < 10 else 0.0)) for i, c in noise])
    assert random_gate.factor == 0.0 and abs(random_gate.mean) < 1.0
    assert useful_gate.factor == 1.0 and agreement(lexical, [(i, float(i < 10)) for i in range(300)]) > 10


def test_numpy_and_pure_python_score_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    vecs = [pack([1.0, 2.0, 3.0]), pack([-1.0, 0.5, 0.0]), pack([0.0, 0.0, 1.0]), pack([1.0, 2.0])]
    q = pack([0.5, 1.0, 1.5])
    dense.numpy.cache_clear()
    with_numpy = Matrix([1, 2, 3, 4], vecs)
    assert with_numpy.ids == [1, 2, 3]  # the other dimension is skipped, never a crash
    monkeypatch.setitem(sys.modules, "numpy", None)  # `import numpy` now fails: the base install
    dense.numpy.cache_clear()
    try:
        plain = Matrix([1, 2, 3, 4], vecs)
        assert dense.numpy() is None
        assert plain.scores(q) == pytest.approx(with_numpy.scores(q), abs=1e-6)
        assert plain.scores(q)[0] == pytest.approx(1.0, abs=1e-6)
    finally:
        monkeypatch.undo()
        dense.numpy.cache_clear()


# -- a deliberately bad embedding server -----------------------------------------------------------


def test_random_vectors_leave_the_keyword_ranking_in_place(tmp_path: Path, clock, model_server) -> None:
    # The scripted server's vectors are hashes of the text: unrelated to meaning, i.e. random.
    keyword = Services(_settings(tmp_path / "ws", ""), clock)
    hybrid = Services(_settings(tmp_path / "ws", model_server.base_url, embedding_model="random"), clock)
    try:
        _write_notes(keyword)
        lex_tops, lex_h1, lex_mrr = _figures(keyword)
        assert lex_h1 == 1.0  # the corpus is built so keyword search gets every one
        tops, h1, mrr = _figures(hybrid)
        assert hybrid.search.search("laptop battery").mode == "hybrid"
        assert tops == lex_tops
        assert abs(h1 - lex_h1) <= 0.005 and abs(mrr - lex_mrr) <= 0.005
    finally:
        hybrid.close()
        keyword.close()


# -- modes, embeddings-only, backfill --------------------------------------------------------------


def test_embeddings_only_configuration_is_valid_and_stays_in_rules_mode() -> None:
    m = ModelSettings(base_url="http://localhost:8000/v1", embedding_model="e5")
    assert m.embeddings_configured and not m.configured
    with pytest.raises(ValueError, match=r"model\.model is empty"):
        ModelSettings(base_url="http://localhost:8000/v1")


def test_embeddings_only_search_backfill_status_and_aml(tmp_path: Path, clock, model_server) -> None:
    from mateclaw_mem.runtime.status import collect

    settings = _settings(tmp_path / "ws", model_server.base_url, embedding_model="e5",
                         embedding_query_prefix="query: ", embedding_passage_prefix="passage: ")
    svc = Services(settings, clock)
    try:
        assert svc.mode == "rules" and svc.model is None and svc.aml.facts is None  # no chat model: no fact jobs
        _write_notes(svc)
        svc.search.dense.max_embed_per_search = 2  # 8 sections miss vectors: more than a search may embed
        before = len(model_server.requests)
        result = svc.search.search("laptop battery")
        assert result.mode == "hybrid" and result.dense["vectors"] == 0 and result.dense["chunks"] > 9
        assert result.dense["complete"] is False
        assert any("embeddings incomplete" in w for w in result.warnings)
        assert [r.body["input"] for r in model_server.requests[before:]] == [["query: laptop battery"]]
        assert result.hits[0].title == "Laptop"  # keyword hits all the same

        svc.aml.add("r1", "alice", "s1", [AmlMessage("user", "I adopted a turtle called Shelly last week"),
                                           AmlMessage("assistant", "Lovely, how is Shelly doing?")])
        svc.start()  # starts the backfill (embeddings configured)
        assert "embeddings backfill" in svc.running_parts()
        assert svc.backfill.done.wait(30)
        # The watcher's start-up reconcile may index chunks after that first pass: once it is idle, one
        # more pass (as new notes wake it) covers them.
        deadline = time.monotonic() + 30
        while not svc.watcher.idle() and time.monotonic() < deadline:
            time.sleep(0.02)
        passes = svc.backfill.passes
        svc.backfill.wake()
        while svc.backfill.passes == passes and time.monotonic() < deadline:
            time.sleep(0.02)
        status = collect(svc)["index"]["embeddings"]
        have, _, total, *_ = status["files"].split()
        assert have == total and int(total) >= 9 and status["aml_messages"] == "2 / 2 vectors"
        inputs = [t for r in model_server.requests if r.path.endswith("embeddings") for t in r.body["input"]]
        passages = [t for t in inputs if not t.startswith("query: ")]
        assert passages and all(t.startswith("passage: ") for t in passages)
        assert not any("message" in t.split("\n")[0] for t in passages if "turtle" in t)  # no display titles
        assert not [r for r in model_server.requests if r.path.endswith("chat/completions")]

        result = svc.search.search("laptop battery")
        assert result.dense["complete"] and not result.warnings and result.hits[0].title == "Laptop"
        hits = svc.aml.search("what is the name of the turtle", "alice", 5)
        assert hits and "turtle" in hits[0].content and svc.message_index.dense.last_complete
    finally:
        svc.close()


def test_aml_ranking_is_untouched_without_embeddings_or_at_weight_zero(tmp_path: Path, clock, model_server) -> None:
    turns = ["I started pottery classes on Tuesdays", "That sounds relaxing! What do you make?",
             "Mostly bowls, and a mug for my sister", "My sister loves mugs, she collects them",
             "We went camping at the lake last weekend", "Did you see any wildlife at the lake?"]
    results = []
    for name, extra in (("plain", {}), ("zero", {"embedding_model": "e5"})):
        settings = _settings(tmp_path / name, model_server.base_url if extra else "", **extra)
        settings = settings.model_copy(update={"search": settings.search.model_copy(update={"dense_weight": 0.0})})
        svc = Services(settings, clock)
        try:
            svc.aml.add("r1", "bob", "s1", [AmlMessage("user" if i % 2 == 0 else "assistant", t)
                                             for i, t in enumerate(turns)])
            assert svc.message_index.dense is None
            results.append([(h.content, h.score) for h in svc.aml.search("mug for my sister", "bob", 6)])
        finally:
            svc.close()
    assert results[0] == results[1] and results[0]
