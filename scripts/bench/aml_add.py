#!/usr/bin/env python3
"""AML Add and Search over HTTP, ours against the floor (scripts/bench/floor_server.py), interleaved.

Starts `mateclaw-mem serve` on a temp workspace (port 0) and the floor server, then for each client
count (1/4/16 threads, one keep-alive connection each) runs the same Adds against both, alternating
which goes first, and prints one table: p50/p95 and throughput, with the ratio to the floor.

    .venv/bin/python scripts/bench/aml_add.py [--adds 400] [--searches 200] [--clients 1,4,16]

An Add is one LoCoMo-like chunk (--messages turns of ~25 words, two speakers, a session timestamp);
the users are spread over --users owners. Searches run after the Adds, top_k 100, on the same users.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from _daemon import start_daemon  # scripts/bench/_daemon.py (this script's folder is on sys.path)
from _figures import record  # scripts/bench/_figures.py

REPO = Path(__file__).resolve().parents[2]
_VOCABULARY = ("camping trip lake painting sunset adoption agency support group pottery class museum dinosaurs"
               " guitar concert friends family beach kids school running marathon garden roses book club novel"
               " counseling career transgender community pride parade violin sister brother puppy hiking")
WORDS = tuple(_VOCABULARY.split())


def start(cmd: list[str], log: Path, timeout: float = 60.0, until_ready: bool = False,
          ) -> tuple[subprocess.Popen[bytes], str]:
    proc, url = start_daemon(cmd, log, timeout=timeout, until_ready=until_ready)
    if url is None:
        proc.kill()
        sys.exit(f"{cmd[1:4]} did not start:\n{log.read_text(errors='replace')}")
    return proc, url


def sentence(rng: random.Random, n: int = 25) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def add_body(tag: str, i: int, users: int, messages: int, rng: random.Random) -> dict:
    user = f"bench:{tag}:user-{i % users}"
    return {
        "request_id": f"{tag}-{i}",
        "user_id": user,
        "session_id": f"{user}:session_{i // (users * 5)}",
        "messages": [
            {"role": "user", "timestamp": 1683554160000 + i * 1000 + k,
             "content": f"{('Caroline', 'Melanie')[k % 2]}: {sentence(rng)}"}
            for k in range(messages)
        ],
    }


def run(url: str, path: str, bodies: list[dict], clients: int) -> tuple[list[float], float]:
    """Post every body (split over `clients` threads, one connection each); (latencies ms, req/s)."""
    parts = urlsplit(url)
    lat: list[float] = []
    lock = threading.Lock()
    errors: list[str] = []

    def worker(mine: list[dict]) -> None:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        out = []
        for body in mine:
            data = json.dumps(body).encode()
            t0 = time.perf_counter()
            conn.request("POST", path, data, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            payload = resp.read()
            out.append((time.perf_counter() - t0) * 1000)
            if resp.status != 200:
                errors.append(f"{resp.status} {payload[:200]!r}")
        conn.close()
        with lock:
            lat.extend(out)

    threads = [threading.Thread(target=worker, args=(bodies[k::clients],)) for k in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        sys.exit(f"{url}{path}: {len(errors)} failed, e.g. {errors[0]}")
    return lat, len(bodies) / wall


def cpu_ms(pid: int) -> float:
    """CPU time (user + system) the process has used so far, ms (Linux /proc): a figure the other
    work on a shared machine disturbs far less than wall time."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    return v[max(0, min(len(v) - 1, round(p / 100 * len(v) + 0.5) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adds", type=int, default=400, help="Adds per server per client count")
    parser.add_argument("--searches", type=int, default=200, help="Searches per server per client count")
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--messages", type=int, default=2, help="turns per Add")
    args = parser.parse_args()
    levels = [int(c) for c in args.clients.split(",")]
    rows: list[tuple[str, str, float, float]] = []  # (figure, unit, ours, floor)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        (tmp / "mateclaw.yaml").write_text("timezone: Europe/Berlin\n", encoding="utf-8")
        ours, ours_url = start([sys.executable, "-m", "mateclaw_mem.cli.main", "serve", "--workspace",
                                str(tmp / "ws"), "--config", str(tmp / "mateclaw.yaml"), "--port", "0"],
                               # Steady state: the routes the daemon builds once it listens (~160 ms of
                               # CPU) overlapped the first round; daemon_start.py times the start.
                               tmp / "daemon.log", until_ready=True)
        floor, floor_url = start([sys.executable, str(REPO / "scripts" / "bench" / "floor_server.py"),
                                  "--port", "0", "--db", str(tmp / "floor.db")], tmp / "floor.log")
        servers = {"ours": ours_url, "floor": floor_url}
        pids = {"ours": ours.pid, "floor": floor.pid}
        try:
            rng = random.Random(7)
            run(ours_url, "/v1/aml/add", [add_body("warm", i, 2, 1, rng) for i in range(20)], 1)  # warm-up
            run(floor_url, "/v1/aml/add", [add_body("warm", i, 2, 1, rng) for i in range(20)], 1)
            for round_no, clients in enumerate(levels):
                order = list(servers) if round_no % 2 == 0 else list(reversed(servers))
                add: dict[str, tuple[list[float], float]] = {}
                cpu: dict[tuple[str, str], float] = {}  # (kind, who) -> server CPU ms per request
                for who in order:
                    bodies = [add_body(f"c{clients}", i, args.users, args.messages, random.Random(i))
                              for i in range(args.adds)]
                    c0 = cpu_ms(pids[who])
                    add[who] = run(servers[who], "/v1/aml/add", bodies, clients)
                    cpu["Add", who] = (cpu_ms(pids[who]) - c0) / len(bodies)
                srch: dict[str, tuple[list[float], float]] = {}
                for who in order:
                    q = random.Random(clients)
                    bodies = [{"query": sentence(q, 8), "user_id": f"bench:c{clients}:user-{i % args.users}",
                               "top_k": 100} for i in range(args.searches)]
                    c0 = cpu_ms(pids[who])
                    srch[who] = run(servers[who], "/v1/aml/search", bodies, clients)
                    cpu["Search", who] = (cpu_ms(pids[who]) - c0) / len(bodies)
                for kind, got in (("Add", add), ("Search", srch)):
                    (lo, to), (lf, tf) = got["ours"], got["floor"]
                    rows.append((f"{kind} p50, {clients} client(s)", "ms", pct(lo, 50), pct(lf, 50)))
                    rows.append((f"{kind} p95, {clients} client(s)", "ms", pct(lo, 95), pct(lf, 95)))
                    rows.append((f"{kind} throughput, {clients} client(s)", "req/s", to, tf))
                    rows.append((f"{kind} server CPU, {clients} client(s)", "ms", cpu[kind, "ours"],
                                 cpu[kind, "floor"]))
        finally:
            for proc in (ours, floor):
                proc.terminate()
                proc.wait(timeout=30)
    print(f"AML over HTTP: {args.adds} Adds ({args.messages} turns each) and {args.searches} Searches (top_k 100)"
          f" per server per client count, {args.users} users")
    print(f"| {'figure':<31} | {'mateclaw-mem':>12} | {'floor':>10} | {'ratio':>6} |")
    print(f"|{'-' * 33}|{'-' * 14}|{'-' * 12}|{'-' * 8}|")
    for figure, unit, o, f in rows:
        kind, what = figure.split()[0], figure.split()[1].rstrip(",")
        goal, met = "", None
        if kind == "Add" and what == "throughput":
            goal, met = ">= 0.5x the floor", o / f >= 0.5
        elif kind == "Add" and what == "p50" and figure.endswith(" 1 client(s)"):  # the is one client's
            goal, met = "<= 2 ms", o <= 2
        elif kind == "Search" and what == "p50":
            goal, met = "<= 1.3x the floor", o / f <= 1.3
        record(f"AML {figure}", o, "ms" if unit == "ms" else "req/s", ref=f, ref_name="floor", goal=goal, met=met)
    for figure, unit, o, f in sorted(rows, key=lambda r: r[0].split()[0]):  # Adds, then Searches
        u = "ms" if unit == "ms" else "/s"
        print(f"| {figure:<31} | {o:>9.2f} {u} | {f:>7.2f} {u} | {o / f:>5.2f}× |")


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
