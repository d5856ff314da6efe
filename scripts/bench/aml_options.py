"""AML Search with multiple-choice `options`: Hit@1 on a multiple-choice variant of the LoCoMo dev split,
searched without and with the options.

    python scripts/bench/aml_options.py --data LOCOMO_DEV.json --bench aml_bench.py [--seed 39] [--top-k 10]

The variant: each question of the dev split (the bench's own plan and strict evidence scoring) gets
four options - its answer (`adversarial_answer` for category 5, whose questions the conversation
does not answer) and three distractors, the answers of other questions of the same category drawn
with a fixed seed (never the answer's own text) - in a seeded order. The same questions are searched
in-process twice, without and with the options, and the figures printed side by side per category,
with how often a search returned more than top_k (must be 0) and the load average.

The options reach the ranking as a secondary query (index/messages/ranking.py: each option's words
not already in the question, at `option_weight` 0.3 of a question word), exactly as over HTTP
(`api/aml.py` -> `AmlService.search` -> `MessageIndex.search`).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from aml_inprocess import (  # scripts/bench/aml_inprocess.py (this script's folder is on sys.path)
    load_bench,
    ranking_with,
    require_inputs,
)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from mateclaw_mem.clock import ManualClock  # noqa: E402
from mateclaw_mem.conversations.aml import AmlMessage, AmlService  # noqa: E402
from mateclaw_mem.conversations.log import ConversationLog  # noqa: E402
from mateclaw_mem.index.messages.index import MessageIndex  # noqa: E402


def answer_of(q: dict) -> str:
    return str(q.get("answer") if q.get("answer") is not None else q.get("adversarial_answer") or "").strip()


def with_options(questions: list[dict], seed: int) -> list[dict]:
    """Each question with `options`: its answer and three other answers of its category, shuffled."""
    rng = random.Random(seed)
    by_cat: dict[object, list[str]] = {}
    for q in questions:
        if answer_of(q):
            by_cat.setdefault(q["category"], []).append(answer_of(q))
    out = []
    for q in questions:
        answer = answer_of(q)
        pool = sorted({a for a in by_cat.get(q["category"], []) if a.lower() != answer.lower()})
        if not answer or len(pool) < 3:
            continue
        options = [answer, *rng.sample(pool, 3)]
        rng.shuffle(options)
        out.append({**q, "options": options})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("AML_DATA"), help="the LoCoMo dev split (env AML_DATA)")
    ap.add_argument("--bench", default=os.environ.get("AML_BENCH"), help="aml_bench.py (env AML_BENCH)")
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--set", action="append", default=[], help="Ranking field=JSON value (e.g. option_weight=0.5)")
    args = ap.parse_args(argv)
    require_inputs(ap, args)
    bench = load_bench(Path(args.bench))
    bargs = argparse.Namespace(categories=bench.parse_categories("all"), repair_evidence=False, chunk_messages=20,
                               chunk_words=2000, ts_step_ms=0)
    plan, questions, _ = bench.build_plan(bench.load_conversations([args.data]), "options", bargs)
    mc = with_options(questions, args.seed)

    rows: dict[str, list[dict]] = {"without": [], "with": []}
    over = dict.fromkeys(rows, 0)
    with tempfile.TemporaryDirectory() as tmp:
        log = ConversationLog(Path(tmp) / "log.db")
        index = MessageIndex(Path(tmp) / "messages.db", ranking_with(args.set))
        svc = AmlService(log, index, ManualClock(datetime(2024, 1, 1, tzinfo=UTC)))
        for conv in plan:
            for call in conv["calls"]:
                svc.add(call["request_id"], call["user_id"], call["session_id"],
                        [AmlMessage(m["role"], m["content"], m.get("timestamp")) for m in call["messages"]])
        for q in mc:
            for mode in rows:
                items = svc.search(q["question"], q["user_id"], args.top_k, q["options"] if mode == "with" else None)
                over[mode] += len(items) > args.top_k
                got = [{"id": i.id, "content": i.content} for i in items]
                rows[mode].append({**bench.score_question(q, got, 2000), "category": q["category"], "n_items": len(got),
                                   "tokens_returned": sum(len(i.content.split()) for i in items)})
        log.close()
        index.close()

    print(f"LoCoMo dev, multiple choice (answer + 3 same-category distractors, seed {args.seed}):"
          f" {len(mc)} of {len(questions)} questions, top_k {args.top_k}"
          + (f", {' '.join(args.set)}" if args.set else ""))
    print(f"{'category':<10} {'n':>5} {'Hit@1 without':>14} {'Hit@1 with':>11} {'MRR without':>12} {'MRR with':>9}")
    cats = sorted({r["category"] for r in rows["without"]})
    for name, pick in [(str(c), lambda r, c=c: r["category"] == c) for c in cats] + [("overall", lambda r: True)]:
        a = bench.aggregate([r for r in rows["without"] if pick(r)])
        b = bench.aggregate([r for r in rows["with"] if pick(r)])
        print(f"{name:<10} {a['n']:>5} {a['hit@1']:>14.4f} {b['hit@1']:>11.4f} {a['mrr']:>12.4f} {b['mrr']:>9.4f}")
    print(f"searches returning more than top_k: without {over['without']}, with {over['with']}"
          f" (load {os.getloadavg()[0]:.2f})")
    return 1 if any(over.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
