"""`mateclaw-mem aml export|import` at size: time and peak memory of moving a store SQLite -> PostgreSQL
-> SQLite, each step the real CLI in a process of its own (issue 40). The memory must not grow with the
store: export pages by id and import streams the file in pages inside one transaction.

    python scripts/bench/aml_transfer.py [--sizes 5000 50000]

Per size: a SQLite store filled with that many messages (Adds of 50 LoCoMo turns over 100 users,
through the Add path), then `aml export` (gzip), `aml import` into a fresh PostgreSQL database (a
throw-away server, as the tests start one), `aml export` from it and `aml import` into a fresh SQLite
workspace (which rebuilds messages.db from the log). Printed: seconds, messages/s and the process's
peak RSS (VmHWM) of each step, the file's size, and whether the last export's records
equal the first's.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _cluster import start_postgres
from _load import load_average
from aml_throughput import LOCOMO, corpus

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.aml import AmlMessage
from mateclaw_mem.runtime.aml_only import open_node
from mateclaw_mem.settings import load_settings

PER_ADD = 50


def fill(folder: Path, n: int, turns: list[str]) -> Path:
    cfg = folder / "c.yaml"
    cfg.write_text("timezone: UTC\n", encoding="utf-8")
    from datetime import UTC, datetime

    node = open_node(load_settings(cfg, folder / "ws"), ManualClock(datetime(2026, 1, 1, tzinfo=UTC)))
    rng = random.Random(5)
    try:
        for a in range(n // PER_ADD):
            start = rng.randrange(len(turns) - PER_ADD)
            msgs = [AmlMessage("user", turns[start + i], 1683554160000 + a * 1000 + i) for i in range(PER_ADD)]
            node.aml.add_json(f"r{a}", f"u{a % 100}", f"s{a % 7}", msgs)
    finally:
        node.close()
    return cfg


def step(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of one CLI command in a process of its own. The peak is the kernel's
    high-water mark (VmHWM, reset at exec) read while it runs: wait4's ru_maxrss would count the RSS
    this process had when it forked the child."""
    # Its stderr to a file: a pipe nobody reads while polling could fill and stall the child.
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "mateclaw_mem.cli.main", *argv], env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
        peak_kib = 0
        status = Path(f"/proc/{proc.pid}/status")
        while proc.poll() is None:
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak_kib = max(peak_kib, int(line.split()[1]))
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        seconds = time.perf_counter() - t0
        err.seek(0)
        text = err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {text[-2000:]}")
    return seconds, peak_kib / 1024


def records(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line for line in f if not line.startswith('{"format"')]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 50000])
    ap.add_argument("--data", type=Path, default=LOCOMO)
    args = ap.parse_args()
    turns, _ = corpus(args.data)
    server = start_postgres("aml_transfer")
    if server is None:
        return 2
    work = Path(tempfile.mkdtemp(prefix="aml-transfer-"))
    base = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
    rows = []
    try:
        for n in args.sizes:
            folder = work / f"n{n}"
            (folder / "a").mkdir(parents=True)
            (folder / "b").mkdir()
            cfg = fill(folder / "a", n, turns)
            pg_cfg = folder / "pg.yaml"
            pg_cfg.write_text("timezone: UTC\naml:\n  store: postgresql\n", encoding="utf-8")
            (folder / "b" / "c.yaml").write_text("timezone: UTC\n", encoding="utf-8")
            pg_env = {**base, "MATECLAW_PG_DSN": server.create_database()}
            a, b, c = folder / "a.jsonl.gz", folder / "b.jsonl.gz", folder / "c.jsonl.gz"
            steps = [
                ("export sqlite", ["--workspace", str(folder / "a" / "ws"), "--config", str(cfg), "aml", "export",
                                   str(a)], base),
                ("import postgresql", ["--workspace", str(folder / "pg"), "--config", str(pg_cfg), "aml", "import",
                                       str(a)], pg_env),
                ("export postgresql", ["--workspace", str(folder / "pg"), "--config", str(pg_cfg), "aml", "export",
                                       str(b)], pg_env),
                ("import sqlite", ["--workspace", str(folder / "b" / "ws"), "--config", str(folder / "b" / "c.yaml"),
                                   "aml", "import", str(b)], base),
                ("export sqlite again", ["--workspace", str(folder / "b" / "ws"), "--config",
                                         str(folder / "b" / "c.yaml"), "aml", "export", str(c)], base),
            ]
            for name, argv, env in steps:
                seconds, rss = step(argv, env)
                rows.append((n, name, seconds, n / seconds, rss))
                print(f"  {n}: {name} {seconds:.1f} s", file=sys.stderr)
            same = records(a) == records(b) == records(c)
            rows.append((n, f"file {a.stat().st_size / 1e6:.1f} MB gzip'd; records equal after the round trip: "
                            f"{'yes' if same else 'NO'}", 0.0, 0.0, 0.0))
    finally:
        server.stop()
    print(f"{'messages':>9}  {'step':<22} {'seconds':>8} {'msgs/s':>8} {'peak RSS MiB':>12}")
    for n, name, seconds, rate, rss in rows:
        if seconds:
            print(f"{n:>9}  {name:<22} {seconds:>8.1f} {rate:>8.0f} {rss:>12.0f}")
        else:
            print(f"{n:>9}  {name}")
    print(load_average())
    return 0


if __name__ == "__main__":
    sys.exit(main())
