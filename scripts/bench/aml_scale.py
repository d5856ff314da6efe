"""Search latency of the Add/Search index as one user's history grows (in-process, no HTTP).

The LoCoMo dev turns are replayed under a single user_id - copies get their own session ids - up to
each size, then 200 of the dev questions are searched with top_k 100. The question set is what a
real user asks; the history is conversational text, so common words match a large share of it.
"first search" is the search before those: it parses the whole history into the owner's view, as the
first search after a daemon start does.

    python scripts/bench/aml_scale.py [--sizes 3000,10000,30000] [--data PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from _figures import record  # scripts/bench/_figures.py (this script's folder is on sys.path)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from mateclaw_mem.clock import ManualClock  # noqa: E402
from mateclaw_mem.conversations.aml import AmlMessage, AmlService  # noqa: E402
from mateclaw_mem.conversations.log import ConversationLog  # noqa: E402
from mateclaw_mem.index.messages.index import MessageIndex  # noqa: E402


def turns(data: list[dict]) -> list[tuple[str, str, int]]:
    """(session key, "Speaker: text", unix ms) for every turn, in order."""
    out = []
    for conv in data:
        c = conv["conversation"]
        n = 1
        while f"session_{n}" in c:
            when = datetime.strptime(c[f"session_{n}_date_time"], "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
            ms = int(when.timestamp() * 1000)
            for k, t in enumerate(c[f"session_{n}"]):
                out.append((f"{conv['sample_id']}-{n}", f"{t['speaker']}: {t['text']}", ms + k))
            n += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("AML_DATA"),
                    help="the LoCoMo dev split (env AML_DATA; not part of this repo)")
    ap.add_argument("--sizes", default="3000,10000,30000")
    args = ap.parse_args()
    if not args.data or not Path(args.data).is_file():
        ap.error(f"--data: {'give the path' if not args.data else f'no such file: {args.data}'} "
                 "(the LoCoMo data is not part of this repo)")
    data = json.loads(Path(args.data).read_text(encoding="utf-8"))
    base = turns(data)
    questions = [q["question"] for conv in data for q in conv["qa"]][::5][:200]
    print(f"{'messages':>9} {'add ms/20':>10} {'search p50':>11} {'p95':>8} {'max':>8}"
          f" {'after-add p50':>14} {'p95':>8} {'first search':>13}")
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            log = ConversationLog(Path(tmp) / "log.db")
            index = MessageIndex(Path(tmp) / "messages.db")
            svc = AmlService(log, index, ManualClock(datetime(2024, 1, 1, tzinfo=UTC)))
            add_ms = []
            done = 0
            copy = 0
            while done < size:
                chunk: dict[str, list[AmlMessage]] = {}
                for session, text, ts in base[: size - done]:
                    chunk.setdefault(f"{session}-c{copy}", []).append(AmlMessage("user", text, ts))
                for session, msgs in chunk.items():
                    for i in range(0, len(msgs), 20):
                        t0 = time.perf_counter()
                        svc.add(f"{session}-{i}", "one-user", session, msgs[i : i + 20])
                        add_ms.append((time.perf_counter() - t0) * 1000)
                done += min(len(base), size - done)
                copy += 1
            # The first search parses the whole history into the owner's view (once per process).
            t0 = time.perf_counter()
            svc.search("warm up", "one-user", 100)
            first_ms = (time.perf_counter() - t0) * 1000
            ms = []
            for q in questions:
                t0 = time.perf_counter()
                svc.search(q, "one-user", 100)
                ms.append((time.perf_counter() - t0) * 1000)
            ms.sort()
            # The agent pattern: a turn is added, then the next prompt searches.
            mixed = []
            for k, q in enumerate(questions[:100]):
                turn = AmlMessage("user", f"Caroline: {q}", 1_800_000_000_000 + k)
                svc.add(f"mixed-{k}", "one-user", "mixed", [turn])
                t0 = time.perf_counter()
                svc.search(q, "one-user", 100)
                mixed.append((time.perf_counter() - t0) * 1000)
            mixed.sort()
            # A restart: a new index on the same file, then its first search.
            index.close()
            t0 = time.perf_counter()
            index = MessageIndex(Path(tmp) / "messages.db")
            svc = AmlService(log, index, ManualClock(datetime(2024, 1, 1, tzinfo=UTC)))
            svc.search(questions[0], "one-user", 100)
            restart_ms = (time.perf_counter() - t0) * 1000
            print(f"{size:>9} {statistics.median(add_ms):>10.2f} {statistics.median(ms):>10.2f}ms"
                  f" {ms[int(len(ms) * 0.95)]:>7.2f}ms {ms[-1]:>7.2f}ms {statistics.median(mixed):>12.2f}ms"
                  f" {mixed[int(len(mixed) * 0.95)]:>7.2f}ms {first_ms:>11.0f}ms")
            record(f"AML Search p50, {size} messages of one user", statistics.median(ms), "ms",
                   goal="<= 10 ms" if size >= 30000 else "", met=statistics.median(ms) <= 10 if size >= 30000 else None)
            record(f"AML Search after an Add p50, {size} messages of one user", statistics.median(mixed), "ms")
            record(f"AML first search after a start (the view parsed), {size} messages of one user", first_ms, "ms")
            print(f"{'':>9} restart -> first answer {restart_ms:.0f} ms")
            record(f"AML restart to first answer, {size} messages of one user", restart_ms, "ms")
            log.close()
            index.close()
    return 0


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    rc = main()
    print(load_average())
    sys.exit(rc)
