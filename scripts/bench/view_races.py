#!/usr/bin/env python3
"""Randomized campaign: the on-disk AML index (index/messages/postings.py, disk_view.py) under Adds
from two connections (the daemon and another process sharing the file), searches and rewrites (a
forget) racing each other. After each trial every owner's ranking through the daemon's index (its
byte cache warm, kept up to date by what it wrote and dropped for what the other connection wrote)
must equal the in-memory reference view parsed from the same file (tests/support/owner_view.py),
and no thread may hang or fail.

    .venv/bin/python scripts/bench/view_races.py [--trials 2000] [--seed 1]

Prints counts; a nonzero `wrong`, `hung` or `errors` is a bug. `--delta-max` (default 60, the product's
12,000) makes the Adds' postings merge into the term segments every few Adds, so merges race too.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.index.messages import postings
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.index.messages.ranking import rank
from tests.support.disk_reference import reference_view

WORDS = ("garden tomato river coffee meeting deadline lisbon guitar marathon budget invoice dentist birthday "  # noqa: SIM905
         "sister harbour climbing recipe novel train pottery camping adoption painting sunset").split()
SPEAKERS = ("Caroline", "Melanie", "Jon")
OWNERS = ("u1", "u2", "u3")
QUERIES = ("pottery class camping", "when did she paint the sunset", "coffee with my sister", "marathon budget")


def turn(rng: random.Random) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
    return f"{rng.choice(SPEAKERS)}: {words}{rng.choice(('.', '?', '!'))}"


def append(log: ConversationLog, rng: random.Random, owner: str, n: int, ts: list[int]) -> None:
    msgs = []
    for _ in range(n):
        ts[0] += rng.randint(1, 90_000)
        msgs.append(NewMessage("user", turn(rng), ts[0]))
    log.append("aml", f"{owner}-s{rng.randint(0, 3)}", msgs, owner=owner, now_ms=ts[0])


def ranking(index: MessageIndex, owner: str) -> list[list[tuple[int, float]]]:
    return [[(h.id, h.score) for h in index.search("aml", owner, q, limit=15)] for q in QUERIES]


def trial(root: Path, rng: random.Random) -> dict[str, int]:
    log = ConversationLog(root / "log.db")
    ts = [1_700_000_000_000]
    for owner in OWNERS:
        for _ in range(rng.randint(1, 6)):
            append(log, rng, owner, rng.randint(1, 12), ts)
    MessageIndex(root / "m.db").sync(log)
    index = MessageIndex(root / "m.db", cache_bytes=rng.choice((0, 4000, 1 << 24)))  # the daemon
    other = MessageIndex(root / "m.db")  # another process writing the same file
    errors: list[BaseException] = []
    lock = threading.Lock()  # the campaign's own: the log is appended by one thread at a time

    def guarded(fn):  # type: ignore[no-untyped-def]
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # counted, never swallowed silently
                errors.append(exc)
        return run

    seeds = [rng.random() for _ in range(4)]

    def searcher(k: int) -> None:
        r = random.Random(seeds[k])
        for _ in range(r.randint(1, 4)):
            owner = r.choice(OWNERS)
            index.search("aml", owner, r.choice(QUERIES), limit=10)

    def adder() -> None:
        r = random.Random(seeds[2])
        for _ in range(r.randint(1, 5)):
            with lock:
                append(log, r, r.choice(OWNERS), r.randint(1, 3), ts)
                r.choice((index, other)).sync(log)

    def rewriter() -> None:
        r = random.Random(seeds[3])
        if r.random() < 0.5:
            owner = r.choice(OWNERS)
            with index.lock:  # (the writer's connection: a statement on it outside the lock, racing
                # a sync on another thread, held an older snapshot that sync's BEGIN IMMEDIATE hit)
                ids = [row[0] for row in index._storage._conn.execute(
                    "SELECT id FROM docs WHERE owner = ? LIMIT 50", (owner,)).fetchall()]
            if ids:
                index.rewrite("aml", owner, {r.choice(ids): f"Caroline: {r.choice(WORDS)} forgotten"})

    threads = [threading.Thread(target=guarded(f)) for f in
               (lambda: searcher(0), lambda: searcher(1), adder, rewriter)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = sum(t.is_alive() for t in threads)
    wrong = 0
    if not hung:
        other.sync(log)  # what the adder logged last, by the other connection
        wrong = sum(ranking(index, o) != reference(index, o) for o in OWNERS)
        index.close()
    other.close()
    log.close()
    return {"wrong": wrong, "hung": hung, "errors": len(errors)}


def reference(index: MessageIndex, owner: str) -> list[list[tuple[int, float]]]:
    view = reference_view(index, "aml", owner)
    return [[(i, round(s, 6)) for s, i in rank(view, q, [], index.ranking, limit=15)] for q in QUERIES]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--delta-max", type=int, default=60,
                    help="postings entries an owner's unmerged Adds hold before a merge (small: merges race too)")
    opts = ap.parse_args()
    postings.DELTA_MAX = opts.delta_max
    rng = random.Random(opts.seed)
    totals = {"trials": 0, "wrong": 0, "hung": 0, "errors": 0}
    t0 = time.perf_counter()
    for k in range(opts.trials):
        with tempfile.TemporaryDirectory() as tmp:
            got = trial(Path(tmp), rng)
        totals["trials"] += 1
        for key, v in got.items():
            totals[key] += v
        if got["wrong"] or got["hung"] or got["errors"]:
            print(f"trial {k}: {got}", file=sys.stderr)
    print(f"{totals['trials']} trials in {time.perf_counter() - t0:.0f} s: {totals['wrong']} owners ranked "
          f"unlike the reference view, {totals['hung']} threads hung, {totals['errors']} errors")
    return 1 if totals["wrong"] or totals["hung"] or totals["errors"] else 0


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    rc = main()
    print(load_average())
    sys.exit(rc)
