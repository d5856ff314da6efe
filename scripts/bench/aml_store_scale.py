"""One user's history on each Add/Search store, side by side: Add p50/p95 as it grows, the first search
after a restart (a new process's cold cache) and warm searches, bytes on disk - SQLite files against a
PostgreSQL database (a throw-away server, as the tests start one, unless --dsn names an empty database).

    python scripts/bench/aml_store_scale.py [--messages 30000] [--searches 200] [--dsn DSN]

Same turns, same queries on both (LoCoMo-like random lines, tests/support/disk_reference.py); the
ranking is the same code, so only the costs differ. Print includes the load average: compare runs
only under similar load.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from mateclaw_mem.clock import ManualClock  # noqa: E402
from mateclaw_mem.conversations.aml import AmlService  # noqa: E402
from mateclaw_mem.conversations.aml_records import AmlMessage  # noqa: E402
from mateclaw_mem.conversations.log import ConversationLog  # noqa: E402
from mateclaw_mem.index.messages.index import MessageIndex  # noqa: E402
from tests.support.disk_reference import random_line, random_query  # noqa: E402

TS = 1683554160000


def pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def run(name: str, open_service: Callable[[], tuple[AmlService, Callable[[], None]]], size: Callable[[], int],
        args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(7)
    svc, close = open_service()
    add_ms: list[float] = []
    for k in range(args.messages // 20):
        msgs = [AmlMessage(role="user", content=random_line(rng), timestamp=TS + k * 60_000 + i) for i in range(20)]
        t = time.perf_counter()
        svc.add(f"r{k}", "u1", f"s{k // 10}", msgs)
        add_ms.append((time.perf_counter() - t) * 1000)
    close()
    queries = [random_query(random.Random(i))[0] for i in range(args.searches)]
    svc, close = open_service()  # a restart: nothing cached
    t = time.perf_counter()
    svc.search(queries[0], "u1", 100)
    first = (time.perf_counter() - t) * 1000
    warm: list[float] = []
    for q in queries[1:]:
        t = time.perf_counter()
        svc.search(q, "u1", 100)
        warm.append((time.perf_counter() - t) * 1000)
    close()
    tail = add_ms[-max(1, len(add_ms) // 5):]  # the last fifth: Adds at (nearly) the full history
    return {"store": name, "add p50 (last fifth)": statistics.median(tail), "add p95 (last fifth)": pct(tail, 95),
            "first search ms": first, "warm p50": statistics.median(warm), "warm p95": pct(warm, 95),
            "MB (history)": size() / 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=30_000)
    ap.add_argument("--searches", type=int, default=200)
    ap.add_argument("--dsn", default="")
    args = ap.parse_args()
    clock = ManualClock(datetime(2024, 1, 1, tzinfo=UTC))
    rows = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)

        def sqlite() -> tuple[AmlService, Callable[[], None]]:
            log, index = ConversationLog(root / "log.db"), MessageIndex(root / "messages.db")

            def close() -> None:
                index.close()
                log.close()
            return AmlService(log, index, clock), close

        rows.append(run("sqlite", sqlite, lambda: sum(p.stat().st_size for p in root.iterdir()), args))

        from mateclaw_mem.conversations.pg import open_store

        dsn = args.dsn
        if not dsn:
            from tests.support.postgres import PostgresServer

            dsn = stack.enter_context(PostgresServer.start()).create_database()

        def postgresql() -> tuple[AmlService, Callable[[], None]]:
            store = open_store(dsn)
            return AmlService(store.log, store.index, clock), store.close

        def db_size() -> int:
            import psycopg

            with psycopg.connect(dsn) as conn:
                return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])

        open_store(dsn).close()  # the tables made: what an empty store takes is not the history's
        empty = db_size()
        rows.append(run("postgresql", postgresql, lambda: db_size() - empty, args))
    keys = list(rows[0])
    print(f"one user, {args.messages} messages in Adds of 20, {args.searches} searches (top 100)")
    for k in keys:
        print(f"{k:<22}" + "".join(f"{r[k]:>14.2f}" if isinstance(r[k], float) else f"{r[k]:>14}" for r in rows))
    print(f"load average {os.getloadavg()} ({os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
