"""Add/Search throughput of `serve --aml-only`: 1, 2 and 3 daemons over one PostgreSQL, beside one daemon
over SQLite (issue 40), with a round-robin client, and where the CPU goes (daemons, database, client).

    python scripts/bench/aml_throughput.py [--seconds 15] [--clients 8] [--daemons 1 2 3] [--rounds 1]

For each setup: a fresh store (PostgreSQL: a fresh database on a throw-away server of its own, as the
tests start one; SQLite: a fresh workspace), the daemons started, then `--clients` threads send Adds
(two LoCoMo turns each, 100 users, unique request ids) for `--seconds`, each to the next daemon in
turn (`--sticky`: each user to one daemon, as a balancer hashing user_id), then Searches (a LoCoMo
question's words, top_k 10) for `--seconds`. Printed per setup: Adds/s
and searches/s, p50 latencies, and the CPU milliseconds per request spent by the daemons, by
PostgreSQL (the postmaster and its backends) and by this client, and the machine's CPU use (of
cores x seconds). `--rounds N` repeats the setups interleaved (figures from a shared, busy machine
vary; compare within a round).

Reading it: where daemons' CPU per request stays flat while the total is at the machine's cores, the
machine is the limit; the database becomes the limit where its CPU per request times the rate nears
the cores it has (the "DB-bound ceiling" column: cores / DB CPU per request, if the database had the
whole machine to itself).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from _cluster import AmlDaemon, PostgresServer, cpu_seconds, daemons_for, postgres_pids, start_postgres
from _load import load_average

LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "bench" / "locomo" / "locomo_dev.json"
USERS = 100


def corpus(path: Path) -> tuple[list[str], list[str]]:
    """(turn texts "Speaker: text", questions) from LoCoMo dev when present, else generated sentences."""
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        turns = [f"{t['speaker']}: {t['text']}" for conv in data for key, session in conv["conversation"].items()
                 if key.startswith("session_") and isinstance(session, list) for t in session]
        questions = [q["question"] for conv in data for q in conv["qa"]]
        return turns, questions
    rng = random.Random(3)
    words = [f"w{i}" for i in range(3000)]
    turns = [f"Caroline: {' '.join(rng.choices(words, k=18))}" for _ in range(5000)]
    return turns, [" ".join(rng.choices(words, k=6)) for _ in range(500)]


class Load:
    """`clients` threads, each request to the next daemon in turn, for a fixed time."""

    def __init__(self, daemons: list[AmlDaemon], clients: int, sticky: bool = False) -> None:
        self.ports = [d.port for d in daemons]
        self.clients = clients
        self.sticky = sticky  # each user always to the same daemon (a balancer hashing user_id)
        self.turn = 0
        self.lock = threading.Lock()

    def _next(self, user: str) -> int:
        if self.sticky:
            return self.ports[zlib.crc32(user.encode()) % len(self.ports)]
        with self.lock:
            self.turn += 1
            return self.ports[self.turn % len(self.ports)]

    def run(self, seconds: float, make: Any) -> tuple[int, int, list[float]]:
        """(answered 200, failed, latencies ms) of `make(rng, n) -> (path, body)` requests."""
        stop = time.monotonic() + seconds
        ok, bad, lat = [0], [0], []
        guard = threading.Lock()

        def client(c: int) -> None:
            rng = random.Random(c)
            conns: dict[int, http.client.HTTPConnection] = {}
            n, mine_ok, mine_bad, mine_lat = 0, 0, 0, []
            while time.monotonic() < stop:
                n += 1
                path, body = make(rng, c, n)
                port = self._next(body["user_id"])
                conn = conns.get(port) or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conns[port] = conn
                t0 = time.perf_counter()
                try:
                    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    resp.read()
                    good = resp.status == 200
                except (http.client.HTTPException, OSError):
                    conn.close()
                    conns.pop(port)
                    good = False
                mine_lat.append((time.perf_counter() - t0) * 1000)
                mine_ok, mine_bad = mine_ok + good, mine_bad + (not good)
            with guard:
                ok[0] += mine_ok
                bad[0] += mine_bad
                lat.extend(mine_lat)

        threads = [threading.Thread(target=client, args=(c,)) for c in range(self.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return ok[0], bad[0], lat


def measure(label: str, daemons: list[AmlDaemon], server: PostgresServer | None, args: argparse.Namespace,
            turns: list[str], questions: list[str], run: int) -> dict[str, Any]:
    load = Load(daemons, args.clients, sticky=args.sticky)

    def add(rng: random.Random, c: int, n: int) -> tuple[str, dict[str, Any]]:
        i = rng.randrange(len(turns) - 1)
        return "/v1/aml/add", {"request_id": f"r{run}-{c}-{n}", "user_id": f"u{rng.randrange(USERS)}",
                               "session_id": f"s{n % 10}", "messages": [
                                   {"role": "user", "content": turns[i], "timestamp": 1683554160000 + n},
                                   {"role": "user", "content": turns[i + 1], "timestamp": 1683554160000 + n}]}

    def search(rng: random.Random, c: int, n: int) -> tuple[str, dict[str, Any]]:
        return "/v1/aml/search", {"query": rng.choice(questions), "user_id": f"u{rng.randrange(USERS)}", "top_k": 10}

    out: dict[str, Any] = {"setup": label}
    procs = [d.proc.pid for d in daemons if d.proc is not None]
    for phase, make in (("add", add), ("search", search)):
        db = postgres_pids(server) if server is not None else []
        before = (cpu_seconds(procs), cpu_seconds(db), time.process_time(), time.monotonic())
        ok, bad, lat = load.run(args.seconds, make)
        db = postgres_pids(server) if server is not None else []  # (backends opened meanwhile count from 0)
        after = (cpu_seconds(procs), cpu_seconds(db), time.process_time(), time.monotonic())
        wall = after[3] - before[3]
        n = max(ok, 1)
        out[phase] = {
            "per_s": ok / wall, "failed": bad, "p50_ms": statistics.median(lat) if lat else 0.0,
            "daemon_ms": 1000 * (after[0] - before[0]) / n, "db_ms": 1000 * max(after[1] - before[1], 0) / n,
            "client_ms": 1000 * (after[2] - before[2]) / n,
            "busy": ((after[0] - before[0]) + max(after[1] - before[1], 0) + (after[2] - before[2]))
            / (wall * (os.cpu_count() or 1)),
        }
    return out


def setup_run(kind: str, n: int, server: PostgresServer | None, work: Path, args: argparse.Namespace,
              turns: list[str], questions: list[str], run: int) -> dict[str, Any]:
    folder = work / f"{kind}-{n}-{run}"
    daemons = daemons_for(kind, n, server, folder)
    try:
        for d in daemons:
            d.start()
        return measure(f"{kind} x{n}", daemons, server if kind == "postgresql" else None, args, turns, questions, run)
    finally:
        for d in daemons:
            d.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--daemons", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--no-sqlite", action="store_true")
    ap.add_argument("--sticky", action="store_true",
                    help="each user always to the same daemon (a balancer hashing user_id), not round-robin")
    ap.add_argument("--data", type=Path, default=LOCOMO, help="LoCoMo dev JSON for realistic turns (optional)")
    args = ap.parse_args()
    turns, questions = corpus(args.data)
    server = start_postgres("aml_throughput")
    if server is None:
        return 2
    work = Path(tempfile.mkdtemp(prefix="aml-throughput-"))
    setups = ([] if args.no_sqlite else [("sqlite", 1)]) + [("postgresql", n) for n in args.daemons]
    results = []
    try:
        for run in range(args.rounds):
            for kind, n in setups:
                results.append(setup_run(kind, n, server, work, args, turns, questions, run))
                print(f"  done: {results[-1]['setup']} (round {run + 1})", file=sys.stderr)
    finally:
        server.stop()
    cores = os.cpu_count() or 1
    print(f"{'setup':<14} {'Adds/s':>8} {'p50 ms':>7} {'daemon':>7} {'DB':>6} {'client':>7} {'busy':>5} "
          f"{'DB-bound':>8} | {'search/s':>8} {'p50 ms':>7} {'daemon':>7} {'DB':>6} {'busy':>5}")
    print(f"{'':<14} {'':>8} {'':>7} {'ms/Add':>7} {'ms/Add':>6} {'ms/Add':>7} {'':>5} {'Adds/s':>8} | "
          f"{'':>8} {'':>7} {'ms/q':>7} {'ms/q':>6}")
    for r in results:
        a, s = r["add"], r["search"]
        ceiling = f"{cores * 1000 / a['db_ms']:.0f}" if a["db_ms"] > 0 else "-"
        print(f"{r['setup']:<14} {a['per_s']:>8.0f} {a['p50_ms']:>7.2f} {a['daemon_ms']:>7.2f} {a['db_ms']:>6.2f} "
              f"{a['client_ms']:>7.2f} {a['busy']:>5.0%} {ceiling:>8} | {s['per_s']:>8.0f} {s['p50_ms']:>7.2f} "
              f"{s['daemon_ms']:>7.2f} {s['db_ms']:>6.2f} {s['busy']:>5.0%}")
        if a["failed"] or s["failed"]:
            print(f"  ({r['setup']}: {a['failed']} Adds and {s['failed']} searches failed)")
    routing = "sticky by user" if args.sticky else "round-robin"
    print(f"({args.clients} clients, {routing}, {args.seconds:g} s per phase, {USERS} users, Adds of 2 LoCoMo turns; "
          f"busy = CPU used by daemons + DB + client of {cores} cores x seconds)")
    print(load_average())
    return 0


if __name__ == "__main__":
    sys.exit(main())
