"""The on-disk message index against the in-memory view it replaced, at the scale of one large owner:
every search ranked both ways, counted identical or not (issue 36: "the same top 100 in the same order").

    python scripts/bench/aml_disk_differential.py [--messages 100000] [--queries 100] [--unmerged 15] [--seed 7]

tests/test_aml_disk_index.py compares the two on random histories of a few hundred turns an owner, and
tests/test_aml_disk_layout.py on a shrunk layout; here the layout is the real one (blocks of 32,768
documents, reading lengths ahead, common words scored field by field, ordinals past 16 bits), the history
one owner's, merged, then `--unmerged` more Adds of 20 turns left beside the segments. Each query is
ranked under the default ranking and the knobs that take other branches of it (tests/support/
disk_reference.py RANKINGS), through a fresh on-disk view per search with the byte cache carried between
them, as the index searches. Exit status 1 when any ranking differs (the first three are printed).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from _load import load_average  # noqa: E402

from mateclaw_mem.conversations.log import ConversationLog, NewMessage  # noqa: E402
from mateclaw_mem.index.messages.index import MessageIndex  # noqa: E402
from mateclaw_mem.index.messages.ranking import rank  # noqa: E402
from tests.support.disk_reference import RANKINGS, disk_view, random_line, random_query, reference_view  # noqa: E402

TS = 1683554160000
DAY_MS = 86_400_000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000, help="turns of the one owner before the merge")
    parser.add_argument("--queries", type=int, default=100, help="random queries, each ranked under every knob")
    parser.add_argument("--unmerged", type=int, default=15, help="Adds of 20 turns left unmerged after the merge")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        log = ConversationLog(tmp / "log.db")
        index = MessageIndex(tmp / "messages.db")
        t0 = time.perf_counter()
        for k in range(args.messages // 20):
            lines = [random_line(rng) for _ in range(20)]
            ts = TS + rng.randint(0, 400) * DAY_MS
            log.append("aml", f"c{k % 50}", [NewMessage("user", t, ts + i) for i, t in enumerate(lines)],
                       owner="big", now_ms=TS)
            if k % 50 == 49:
                index.sync(log)
        while index.sync(log):
            pass
        index._storage.merger.run_now()
        for k in range(args.unmerged):  # (each indexed on its own: rows beside the segments)
            lines = [random_line(rng) for _ in range(20)]
            log.append("aml", f"c{k % 7}", [NewMessage("user", t, TS + 500 * DAY_MS + i) for i, t in enumerate(lines)],
                       owner="big", now_ms=TS)
            index.sync(log)
        with index.lock:
            pending = index._storage._conn.execute("SELECT n, pending FROM powners WHERE owner = 'big'").fetchone()
        built = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = reference_view(index, "aml", "big")
        parsed = time.perf_counter() - t0
        same = differ = found = 0
        for _ in range(args.queries):
            query, options = random_query(rng)
            for knob, r in RANKINGS.items():
                with index.lock:  # (a search's reads, as MessageIndex.search takes them)
                    got = rank(disk_view(index, "aml", "big"), query, options, r, limit=100)
                want = rank(ref, query, options, r, limit=100)
                found += bool(want)
                if got == want:
                    same += 1
                    continue
                differ += 1
                if differ <= 3:
                    # (the first rank where they part; past the shorter one's end when one is a prefix)
                    first = next((k for k, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                                 min(len(got), len(want)))
                    print(f"DIFFERS ({knob}) {query!r} {options}: first at rank {first + 1}:"
                          f" disk {got[first : first + 2]} / in-memory {want[first : first + 2]}")
        index.close()
        log.close()
    print(f"one owner: {pending['n']:,} turns indexed ({pending['pending']:,} postings unmerged),"
          f" built in {built:.1f} s, the in-memory view parsed in {parsed:.1f} s")
    print(f"rankings compared: {same + differ:,} ({args.queries} queries x {len(RANKINGS)} knobs, top 100 each,"
          f" {found:,} with hits): identical {same:,}, different {differ:,}")
    print(load_average())
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
