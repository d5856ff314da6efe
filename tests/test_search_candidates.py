"""Candidates for a search (`index.files.query.match`): when no more chunks match than are asked
for, they are fetched without bm25 (whose IDF walk of every term's doclist was most of a search at
50k chunks). That must be exactly the chunks the ranked query picks, in every scope, for OR and
AND expressions, whatever the caller's bounds on the number of matches say within the truth."""

from __future__ import annotations

import random

import pytest

from mateclaw_mem.index.tokenizer import fts_query
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings

WORDS = ["pelican", "harbour", "tomato", "violin", "ledger", "saffron", "quartz", "meadow", "lantern", "ferry",
         "walnut", "cobalt"]


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Services:
    root = tmp_path_factory.mktemp("cands")
    cfg = root / "iso.yaml"
    cfg.write_text("timezone: Europe/Berlin\nowner-isolation: true\n", encoding="utf-8")
    svc = Services(load_settings(cfg, root / "ws"))
    rng = random.Random(5)
    for agent in ("default", "other"):
        svc.store.ensure_agent(agent)
    svc.store.ensure_agent("default", owner="bob")
    for i in range(160):
        agent, owner = rng.choice([("default", None), ("default", None), ("default", "bob"), ("other", None)])
        rel = rng.choice([f"memory/2026-01-{1 + i % 28:02d}.md", "MEMORY.md", "PROFILE.md", f"notes/n{i % 9}.md"])
        # Zipf-ish: the first words are in most sections, the last in a few
        words = " ".join(w for k, w in enumerate(WORDS) if rng.random() < 1 / (1 + k * 0.8))
        svc.store.append_daily(agent, f"note {i}", words or "nothing", actor="person", owner=owner) \
            if rel.startswith("memory/") else svc.store.write(
                agent, rel, f"# {rel}\n\n## Note {i}\n\n{words}\n", expected_sha=None, actor="person", owner=owner)
    svc.file_index.rebuild()
    yield svc
    svc.close()


SCOPES = [[("default", [None])], [("default", [None, "bob"])], [("other", [None])],
          [("default", [None, "bob"]), ("global", [None])]]


@pytest.mark.parametrize("seed", range(6))
def test_the_chunks_fetched_unranked_are_those_the_ranked_query_picks(svc: Services, seed: int) -> None:
    rng = random.Random(seed)
    index = svc.file_index
    dfs = index.doc_freqs(WORDS)
    checked = {"complete": 0, "cut": 0}
    for _ in range(60):
        terms = rng.sample(WORDS, rng.randint(1, 4))
        expr = fts_query(terms) if rng.random() < 0.5 or len(terms) == 1 else " AND ".join(f'"{t}"' for t in terms)
        present = [dfs.get(t, 0) for t in terms]
        truth = sum(present) if " AND " not in expr else min(present)
        kw = {"scopes": rng.choice(SCOPES), "scope": rng.choice(["all", "memory", "profile", "persona", "files"]),
              "limit": rng.choice([1, 3, 8, 20, 40])}
        ranked = index.match(expr, **kw, at_least=kw["limit"] + 1)  # bm25, as before
        for bounds in ({}, {"at_most": truth}, {"at_most": truth + rng.randint(0, 50)},
                       {"at_least": max(present) if " AND " not in expr else 0}):
            got = index.match(expr, **kw, **bounds)
            assert {c.id for c in got} == {c.id for c in ranked}, (expr, kw, bounds)
            assert all(c.text and c.tokens is not None for c in got)
        checked["complete" if len(ranked) < kw["limit"] else "cut"] += 1
    assert checked["complete"] and checked["cut"]  # both sides of the limit were tried
