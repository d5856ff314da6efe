"""LoCoMo dev through the AML bench client (`aml_bench.py`, over HTTP) against `serve --aml-only`:
one daemon over SQLite, then 1 and 3 daemons over one PostgreSQL behind a round-robin proxy (issue 40).

    python scripts/bench/aml_locomo_cluster.py [--bench ../shared/bench/aml_bench.py]
        [--data ../shared/bench/locomo/locomo_dev.json] [--setups sqlite:1 postgresql:1 postgresql:3]

aml_bench.py takes one Add URL and one Search URL; here they are a round-robin proxy's
(_cluster.RoundRobin: each request to the next daemon, as a load balancer would), so consecutive Adds
of one conversation land on different daemons and every question is asked of whichever daemon is
next. Printed: each setup's aml_bench table (Hit@k, MRR, recall, latency, contract violations), the
requests each daemon served, and whether every question's returned items (ids, scores, text) are the
same as the first setup's - the backends must agree exactly - with the load average.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _cluster import PostgresServer, RoundRobin, daemons_for, start_postgres
from _load import load_average

SHARED = Path(__file__).resolve().parents[3] / "shared" / "bench"


def run_setup(kind: str, n: int, server: PostgresServer | None, work: Path, args: argparse.Namespace
              ) -> tuple[str, dict[str, Any], list[int]]:
    folder = work / f"{kind}-{n}"
    daemons = daemons_for(kind, n, server, folder)
    try:
        for d in daemons:
            d.start()
        with RoundRobin([d.url for d in daemons]) as proxy:
            out = folder / "questions.json"
            done = subprocess.run(
                [sys.executable, str(args.bench), "--data", str(args.data), "--add-url", f"{proxy.url}/v1/aml/add",
                 "--search-url", f"{proxy.url}/v1/aml/search", "--categories", "all", "--out", str(out),
                 "--progress-every", "0", *args.extra],
                capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"aml_bench.py failed ({done.returncode}): {done.stderr[-2000:]}")
            return done.stdout, json.loads(out.read_text(encoding="utf-8")), list(proxy.counts)
    finally:
        for d in daemons:
            d.stop()


def answers(result: dict[str, Any]) -> dict[str, Any]:
    return {q["qid"]: [(t["id"], t["score"], t["content"]) for t in q["top"]] for q in result["questions"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", type=Path, default=SHARED / "aml_bench.py")
    ap.add_argument("--data", type=Path, default=SHARED / "locomo" / "locomo_dev.json")
    ap.add_argument("--setups", nargs="+", default=["sqlite:1", "postgresql:1", "postgresql:3"])
    ap.add_argument("extra", nargs="*", help="more aml_bench.py flags (after --)")
    args = ap.parse_args()
    for path in (args.bench, args.data):
        if not path.is_file():
            print(f"aml_locomo_cluster: {path} not found (--bench / --data)", file=sys.stderr)
            return 2
    setups = [(s.split(":")[0], int(s.split(":")[1])) for s in args.setups]
    server = None
    if any(kind == "postgresql" for kind, _ in setups):
        server = start_postgres("aml_locomo_cluster")
        if server is None:
            return 2
    work = Path(tempfile.mkdtemp(prefix="aml-locomo-cluster-"))
    first: dict[str, Any] | None = None
    try:
        for kind, n in setups:
            table, result, served = run_setup(kind, n, server, work, args)
            print(f"=== {kind}, {n} daemon(s) behind a round-robin proxy (requests per daemon: {served})")
            print(table.rstrip())
            mine = answers(result)
            if first is None:
                first = mine
            else:
                differ = sum(mine.get(q) != a for q, a in first.items())
                print(f"questions whose returned items (ids, scores, text) differ from {setups[0][0]} "
                      f"x{setups[0][1]}: {differ} of {len(first)}")
            print(load_average())
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
