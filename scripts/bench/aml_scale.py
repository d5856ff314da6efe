"""AML Add/Search as history grows, over HTTP, beside the floor in the same run.

Three servers on loopback, fed the same requests in turn: the daemon (`mateclaw-mem serve` on a temp
workspace), the floor (scripts/bench/floor_server.py: stdlib HTTP, one SQLite FTS5 table) and the
floor with an indexed owner column (`--owner-index`, the stronger reference).

One user: the LoCoMo dev turns replayed under one user_id (copies get their own session ids) up to
each size, as Adds of 20 turns. Then, per server: Add p50; the first search after the Adds and the
warm searches (p50/p95, 100 of the dev questions, top_k 100; then the same 100 again, their terms
now in the byte cache); RSS; then `--first` - 1 more rounds of 200 turns, each followed by another
first search (the first search's row is the p50 of them all); the files on disk (after one file
search, which catches the file index up with the log as a daemon's reconcile does); and a restart
(the process stopped, started again) to its first answer, the search's own latency beside it.

Spread: U users x M turns each, then a restart, then searches spread uniformly over the users (every
user is cold at first: the case that parsed an evicted owner's history before), p50/p95 and RSS.

    python scripts/bench/aml_scale.py --data LOCOMO.json [--sizes 1000,10000,30000,100000]
        [--spread 100x3000,1000x300] [--searches 100] [--first 5] [--spread-searches 600]
"""

from __future__ import annotations

import argparse
import compileall
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from _daemon import children, start_daemon  # scripts/bench/_daemon.py (this script's folder is on sys.path)
from _figures import record  # scripts/bench/_figures.py
from _load import load_average  # scripts/bench/_load.py

from mateclaw_mem.settings import AmlSettings

REPO = Path(__file__).resolve().parents[2]
SERVERS: tuple[str, ...] = ("ours", "floor", "floor+idx")
CACHE_BYTES = AmlSettings().cache_bytes  # aml.cache-bytes as ours runs (the default: its config sets none)
BASE_SRC: Path | None = None  # --base: a "base" server run from this source tree beside "ours"
# Measured (issue 36): a fourth server in the rotation spaces each daemon's Adds further apart, which
# gives a deferred indexer time to drain, and base's own background work slows the floors. At 100k
# one user, ours read 1.02 against the floor's 0.76 ms with --base, and 1.74 against 0.67 without.
BASE_CAVEAT = ("note: with --base the Adds of each server are spaced by four requests, not three, and base's"
               " background work runs beside the floors: compare the Add rows ours against base only, and"
               " read ours against the floors from a run without --base")


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


def add_bodies(base: list[tuple[str, str, int]], user: str, size: int, tag: str) -> list[dict[str, Any]]:
    """`size` turns of `user` as Adds of up to 20 turns, each session copy its own session id."""
    out: list[dict[str, Any]] = []
    done = copy = 0
    while done < size:
        chunk: dict[str, list[dict[str, Any]]] = {}
        for session, text, ts in base[: size - done]:
            chunk.setdefault(f"{session}-c{copy}", []).append({"role": "user", "content": text, "timestamp": ts})
        for session, msgs in chunk.items():
            for i in range(0, len(msgs), 20):
                out.append({"request_id": f"{tag}-{len(out)}", "user_id": user, "session_id": session,
                            "messages": msgs[i : i + 20]})
        done += min(len(base), size - done)
        copy += 1
    return out


class Server:
    """One server process, restartable on its own files."""

    def __init__(self, name: str, tmp: Path) -> None:
        self.name, self.tmp = name, tmp
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: http.client.HTTPConnection | None = None
        tmp.mkdir(parents=True, exist_ok=True)
        if name in ("ours", "base"):
            (tmp / "mateclaw.yaml").write_text("timezone: UTC\n", encoding="utf-8")
            self.files = tmp / "ws" / ".mateclaw"
        else:
            self.files = tmp

    def cmd(self) -> list[str]:
        if self.name in ("ours", "base"):
            return [sys.executable, "-m", "mateclaw_mem.cli.main", "serve", "--workspace", str(self.tmp / "ws"),
                    "--config", str(self.tmp / "mateclaw.yaml"), "--port", "0"]
        extra = ["--owner-index"] if self.name == "floor+idx" else []
        return [sys.executable, str(REPO / "scripts" / "bench" / "floor_server.py"), "--port", "0",
                "--db", str(self.tmp / "floor.db"), *extra]

    def start(self, *, until_ready: bool = False) -> float:
        """Start it; seconds from the spawn to listening (`until_ready`: to the end of its start-up,
        the routes built after listening and the background work started; the floors have none)."""
        t0 = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(BASE_SRC)} if self.name == "base" else None
        proc, url = start_daemon(self.cmd(), self.tmp / f"{self.name}.log", env=env, timeout=120,
                                 until_ready=until_ready and self.name in ("ours", "base"))
        if url is None:
            proc.kill()
            sys.exit(f"{self.name} did not start:\n{(self.tmp / f'{self.name}.log').read_text(errors='replace')}")
        self.proc = proc
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)
        return time.perf_counter() - t0

    def stop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def post(self, path: str, body: dict[str, Any]) -> float:
        """ms for one request (its answer read)."""
        assert self.conn is not None
        data = json.dumps(body).encode()
        for attempt in (0, 1):
            t0 = time.perf_counter()
            try:
                self.conn.request("POST", path, data, {"Content-Type": "application/json"})
                resp = self.conn.getresponse()
                payload = resp.read()
                break
            except (OSError, http.client.HTTPException):
                # The server closed a connection idle past its keep-alive (5 s: the floors' searches
                # between two of ours can take that long at 100k) before reading this request: again,
                # on a new connection (Adds are idempotent by request id, searches read only).
                if attempt:
                    raise
                self.conn.close()
        ms = (time.perf_counter() - t0) * 1000
        if resp.status != 200:
            sys.exit(f"{self.name} {path}: {resp.status} {payload[:300]!r}")
        return ms

    def settle(self) -> None:
        """What a daemon running longer than `search.reconcile-interval-seconds` (300 s) has done by
        now: its file index caught up with the conversation log (one file search does it at once;
        a version that copies Add/Search turns into index.db does that here), so the disk figure
        holds every copy a running daemon keeps. The floors have nothing of the kind."""
        if self.name not in ("ours", "base") or self.conn is None:
            return
        for attempt in (0, 1):
            try:
                self.conn.request("GET", "/api/v1/agents/aml/workspace/memory/search?q=settle&scope=conversations")
                resp = self.conn.getresponse()
                payload = resp.read()
                break
            except (OSError, http.client.HTTPException):  # closed idle past keep-alive, as in `post`
                if attempt:
                    raise
                self.conn.close()
        if resp.status != 200:
            sys.exit(f"{self.name} file search: {resp.status} {payload[:300]!r}")

    def rss_mb(self, pid: int | None = None, field: str = "VmRSS") -> float:
        assert self.proc is not None
        try:
            lines = Path(f"/proc/{self.proc.pid if pid is None else pid}/status").read_text().splitlines()
        except FileNotFoundError:  # (a child that ended meanwhile)
            return 0.0
        for line in lines:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024 / 1e6  # (/proc says kB for KiB; MB: 10^6 B, as the bound)
        return float("nan")

    def children(self) -> list[int]:
        """The server's child processes (ours: its index process while one runs, aml.index-process)."""
        assert self.proc is not None
        return children(self.proc.pid)

    def child_rss_mb(self, field: str = "VmRSS") -> float:
        return sum(self.rss_mb(pid, field) for pid in self.children())

    def child_private_mb(self) -> float:
        """What its index process holds of its own (RssAnon: its heap and arenas; its libraries' pages
        are the daemon's too), which the daemon's cache bound counts while it runs."""
        return self.child_rss_mb("RssAnon")

    def disk_bytes(self) -> int:
        return sum(self.disk_files().values())

    def disk_files(self) -> dict[str, int]:
        """Bytes of each database file (with its -wal/-shm), by name."""
        return {p.name: p.stat().st_size for p in sorted(self.files.iterdir()) if p.is_file() and ".db" in p.name}


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    return v[max(0, min(len(v) - 1, round(p / 100 * len(v) + 0.5) - 1))] if v else float("nan")


def interleaved(servers: list[Server], path: str, bodies: list[dict[str, Any]],
                start: int = 0) -> dict[str, list[float]]:
    """Each body to every server, the order rotating per body (from `start`): the same machine load
    for all."""
    out: dict[str, list[float]] = {s.name: [] for s in servers}
    for k, body in enumerate(bodies):
        for j in range(len(servers)):
            s = servers[(start + k + j) % len(servers)]
            out[s.name].append(s.post(path, body))
    return out


def search_body(user: str, q: str) -> dict[str, Any]:
    return {"user_id": user, "query": q, "top_k": 100}


# Messages Added between two first searches (`--first`): 10 Adds of 20 turns.
FIRST_EXTRA = 200


def split_after(bodies: list[dict[str, Any]], messages: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`bodies` cut after the Add that reaches `messages` turns."""
    done = 0
    for k, body in enumerate(bodies):
        if done >= messages:
            return bodies[:k], bodies[k:]
        done += len(body["messages"])
    return bodies, []


def one_user(size: int, base: list[tuple[str, str, int]], questions: list[str], searches: int,
             firsts: int = 1) -> None:
    with tempfile.TemporaryDirectory() as name:
        servers = [Server(n, Path(name) / n) for n in SERVERS]
        for s in servers:
            # Its start-up done (the rest of the services, the watcher's first reconcile): Adds that ran
            # beside it slowed all three servers on this 2-core machine, the floors most (at 1k, 4 runs,
            # load 2.4: floor p50 1.90 ms beside it, 0.68 after).
            s.start(until_ready=True)
        user = "scale-user"
        # The Adds, and after the warm searches `firsts - 1` more rounds of FIRST_EXTRA turns, each
        # followed by a first search: what the Adds leave cold again (the owner's saturated values,
        # the terms they wrote) read afresh. One sample per size was one draw of the machine's noise.
        bodies, extra = split_after(add_bodies(base, user, size + (firsts - 1) * FIRST_EXTRA, f"s{size}"), size)
        total = size
        try:
            adds = interleaved(servers, "/v1/aml/add", bodies)
            # What indexed them beside the daemon: its index process, while one runs (its own RSS and peak).
            child = {s.name: s.child_rss_mb() for s in servers}
            child_own = {s.name: s.child_private_mb() for s in servers}
            child_peak = {s.name: s.child_rss_mb("VmHWM") for s in servers}
            first = interleaved(servers, "/v1/aml/search", [search_body(user, questions[0])])
            warm = interleaved(servers, "/v1/aml/search", [search_body(user, q) for q in questions[1 : 1 + searches]])
            # The same questions again: the first pass after the Adds read most terms from disk (an Add
            # drops the cached entries of the terms it wrote and all its owner's saturated values);
            # this one finds them in the byte cache.
            again = interleaved(servers, "/v1/aml/search", [search_body(user, q) for q in questions[1 : 1 + searches]])
            rss = {s.name: s.rss_mb() for s in servers}
            tree = {s.name: rss[s.name] + s.child_private_mb() for s in servers}
            for k in range(1, firsts):
                more, extra = split_after(extra, FIRST_EXTRA)
                interleaved(servers, "/v1/aml/add", more)
                total += sum(len(b["messages"]) for b in more)
                # (Each round another server first: the first to search right after its Adds finds the
                # most of them still to index - with --base, "ours" was first in every round, and its
                # first search at 30k read 28 ms against the same code's 15 as "base".)
                for n, v in interleaved(servers, "/v1/aml/search", [search_body(user, questions[-1 - k])],
                                        start=k).items():
                    first[n] += v
            # The most each held at any moment of the run (the kernel's high-water marks: between two
            # reads a search's temporaries come and go unseen by the rows above).
            # (The kernel raises its mark lazily, at unmaps: never below a read of RSS taken before.)
            peak = {s.name: max(rss[s.name], s.rss_mb(field="VmHWM")) for s in servers}
            child_peak = {n: max(v, next(s.child_rss_mb("VmHWM") for s in servers if s.name == n))
                          for n, v in child_peak.items()}
            disk: dict[str, float] = {}
            files: dict[str, int] = {}
            restart: dict[str, float] = {}
            after: dict[str, float] = {}
            for s in servers:
                s.settle()
                s.stop()
                disk[s.name] = s.disk_bytes()  # stopped: the WAL files checkpointed and gone, as at rest
                if s.name == "ours":
                    files = s.disk_files()
                t0 = time.perf_counter()
                s.start()
                after[s.name] = s.post("/v1/aml/search", search_body(user, questions[-1]))
                restart[s.name] = (time.perf_counter() - t0) * 1000
            # The idle daemon at this history: started again, its start-up done, nothing asked (the
            # RSS goal is "never above aml.cache-bytes + the idle daemon").
            idle: dict[str, float] = {}
            for s in servers:
                s.stop()
                s.start(until_ready=True)
                time.sleep(1.0)  # what its background parts do at once (the watcher's first reconcile)
                idle[s.name] = s.rss_mb()
        finally:
            for s in servers:
                s.stop()
    print(f"\none user, {size:,} messages ({load_average()})")
    print(f"| {'figure':<34} | " + " | ".join(f"{n:>10}" for n in SERVERS) + " | ours/floor | ours/floor+idx |")
    print(f"|{'-' * 36}|" + "|".join("-" * 12 for _ in SERVERS) + f"|{'-' * 12}|{'-' * 16}|")

    def row(label: str, vals: dict[str, float], unit: str, fmt: str = "{:>10.2f}") -> None:
        o, f, fi = (vals[n] for n in ("ours", "floor", "floor+idx"))
        print(f"| {label:<34} | " + " | ".join(fmt.format(vals[n]) for n in SERVERS)
              + f" | {o / f:>10.2f} | {o / fi:>14.2f} |")
        record(f"AML scale, {size} messages of one user: {label}", o, unit, ref=f, ref_name="floor")

    row("Add p50 ms (20 turns)", {n: pct(v, 50) for n, v in adds.items()}, "ms")
    row("Add p95 ms (20 turns)", {n: pct(v, 95) for n, v in adds.items()}, "ms")
    row("first search ms" if firsts == 1 else f"first search p50 ms (of {firsts})",
        {n: pct(v, 50) for n, v in first.items()}, "ms")
    if firsts > 1:
        print(f"| {'  each, ms':<34} | " + " | ".join(
            f"{' '.join(f'{x:.0f}' for x in first[n]):>10}" for n in SERVERS) + " |")
    row("warm search p50 ms", {n: pct(v, 50) for n, v in warm.items()}, "ms")
    row("warm search p95 ms", {n: pct(v, 95) for n, v in warm.items()}, "ms")
    row("  same questions again p50 ms", {n: pct(v, 50) for n, v in again.items()}, "ms")
    row("  same questions again p95 ms", {n: pct(v, 95) for n, v in again.items()}, "ms")
    print(f"| {'index process RSS MB after the Adds':<34} | "
          + " | ".join(f"{child[n]:>10.0f}" for n in SERVERS) + " | peak: " + ", ".join(
              f"{n} {child_peak[n]:.0f}" for n in SERVERS if n in ("ours", "base")) + " |")
    print(f"| {'  of its own (RssAnon) MB':<34} | " + " | ".join(f"{child_own[n]:>10.0f}" for n in SERVERS) + " |")
    row("RSS MB", rss, "MB", "{:>10.0f}")
    print(f"| {'  with its index process own MB':<34} | " + " | ".join(f"{tree[n]:>10.0f}" for n in SERVERS)
          + " | (the child, if one still runs after the searches) |")
    row("  idle daemon RSS MB (restarted)", idle, "MB", "{:>10.0f}")
    over = {n: rss[n] - idle[n] for n in SERVERS}
    print(f"| {'  RSS over the idle daemon MB':<34} | " + " | ".join(f"{over[n]:>10.1f}" for n in SERVERS)
          + f" | ours' aml.cache-bytes: {CACHE_BYTES / 1e6:.1f} MB |")
    print(f"| {'  peak (VmHWM) over it MB':<34} | " + " | ".join(f"{peak[n] - idle[n]:>10.1f}" for n in SERVERS)
          + " | the index process's peak: " + ", ".join(
              f"{n} {child_peak[n]:.0f}" for n in SERVERS if n in ("ours", "base")) + " |")
    row("disk bytes per message (stopped)", {n: disk[n] / total for n in SERVERS}, "B", "{:>10.0f}")
    row("restart -> first answer ms", restart, "ms", "{:>10.0f}")
    row("  of which the search ms", after, "ms")
    print("ours on disk, bytes per message: " + ", ".join(f"{k} {v / total:.0f}" for k, v in files.items() if v))


def spread(users: int, each: int, base: list[tuple[str, str, int]], questions: list[str], searches: int) -> None:
    rng = random.Random(users * 7 + each)
    with tempfile.TemporaryDirectory() as name:
        servers = [Server(n, Path(name) / n) for n in SERVERS]
        for s in servers:
            s.start(until_ready=True)  # (as for one user)
        try:
            bodies: list[dict[str, Any]] = []
            for u in range(users):
                offset = rng.randrange(len(base))
                mine = base[offset:] + base[:offset]  # each user starts at another place in the turns
                bodies += add_bodies(mine, f"user-{u}", each, f"u{u}")
            adds = interleaved(servers, "/v1/aml/add", bodies)
            peak = {s.name: s.rss_mb(field="VmHWM") + s.child_rss_mb("VmHWM") for s in servers}
            disk: dict[str, float] = {}
            for s in servers:  # every owner cold, as after a restart
                s.settle()
                s.stop()
                disk[s.name] = s.disk_bytes()  # stopped: the WAL files checkpointed and gone, as at rest
                s.start(until_ready=True)  # (a restart's own cost: the one-user rows' restart -> first answer)
            got = interleaved(servers, "/v1/aml/search", [search_body(f"user-{rng.randrange(users)}",
                                                                      rng.choice(questions)) for _ in range(searches)])
            rss = {s.name: s.rss_mb() + s.child_rss_mb() for s in servers}
            peak = {s.name: max(peak[s.name], s.rss_mb(field="VmHWM") + s.child_rss_mb("VmHWM")) for s in servers}
        finally:
            for s in servers:
                s.stop()
    total = users * each
    print(f"\n{users} users x {each:,} messages, {searches} searches spread uniformly after a restart"
          f" ({load_average()})")
    print(f"| {'figure':<34} | " + " | ".join(f"{n:>10}" for n in SERVERS) + " | ours/floor | ours/floor+idx |")
    print(f"|{'-' * 36}|" + "|".join("-" * 12 for _ in SERVERS) + f"|{'-' * 12}|{'-' * 16}|")
    rows = [("Add p50 ms (20 turns)", {n: pct(v, 50) for n, v in adds.items()}, "{:>10.2f}"),
            ("search p50 ms", {n: pct(v, 50) for n, v in got.items()}, "{:>10.2f}"),
            ("search p95 ms", {n: pct(v, 95) for n, v in got.items()}, "{:>10.2f}"),
            ("RSS MB (+ index process)", rss, "{:>10.0f}"),
            ("  peak (VmHWM) MB, Adds or searches", peak, "{:>10.0f}"),
            ("disk bytes per message (stopped)", {n: disk[n] / total for n in SERVERS}, "{:>10.0f}")]
    for label, vals, fmt in rows:
        o, f, fi = (vals[n] for n in ("ours", "floor", "floor+idx"))
        print(f"| {label:<34} | " + " | ".join(fmt.format(vals[n]) for n in SERVERS)
              + f" | {o / f:>10.2f} | {o / fi:>14.2f} |")
        record(f"AML spread {users}x{each}: {label}", o, "ms" if "ms" in label else "", ref=f, ref_name="floor")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("AML_DATA"),
                    help="the LoCoMo dev split (env AML_DATA; not part of this repo)")
    ap.add_argument("--sizes", default="1000,10000,30000,100000")
    ap.add_argument("--spread", default="100x3000", help="USERSxMESSAGES[,...]; empty: none")
    ap.add_argument("--searches", type=int, default=100, help="warm searches per size")
    ap.add_argument("--first", type=int, default=5,
                    help=f"first searches per size (p50): after the Adds, then N-1 more, each after {FIRST_EXTRA}"
                    " more turns (Added after the warm searches)")
    ap.add_argument("--spread-searches", type=int, default=600)
    ap.add_argument("--base", type=Path, help="also run the daemon from this source tree (e.g. `git archive`"
                    " of an earlier commit's mateclaw_mem) as 'base', interleaved with the others; the Add"
                    " rows then compare ours with base only (the run prints why)")
    args = ap.parse_args()
    global SERVERS, BASE_SRC
    if args.base is not None:
        if not (args.base / "mateclaw_mem").is_dir():
            ap.error(f"--base: no mateclaw_mem package under {args.base}")
        BASE_SRC, SERVERS = args.base.resolve(), (*SERVERS, "base")
    if not args.data or not Path(args.data).is_file():
        ap.error(f"--data: {'give the path' if not args.data else f'no such file: {args.data}'} "
                 "(the LoCoMo data is not part of this repo)")
    # Each daemon's package with its bytecode written, as an install has it (scripts/setup.sh writes it
    # for a checkout): a tree without it (a `git archive`, PYTHONPATH=<tree>) under
    # PYTHONDONTWRITEBYTECODE=1 compiled every module at every start, 0.3-0.6 s of the restart row.
    import mateclaw_mem

    for tree in {Path(mateclaw_mem.__file__).parent, *([BASE_SRC / "mateclaw_mem"] if BASE_SRC else [])}:
        compileall.compile_dir(tree, quiet=1)
    data = json.loads(Path(args.data).read_text(encoding="utf-8"))
    base = turns(data)
    questions = [q["question"] for conv in data for q in conv["qa"]][::3]
    print("AML scale: ours (mateclaw-mem serve) beside the floor and the floor with an indexed owner;",
          load_average())
    if BASE_SRC is not None:
        print(BASE_CAVEAT)
    for size in (int(s) for s in args.sizes.split(",") if s):
        one_user(size, base, questions, args.searches, max(1, args.first))
    for spec in (s for s in args.spread.split(",") if s):
        users, each = (int(x) for x in spec.split("x"))
        spread(users, each, base, questions, args.spread_searches)
    print(load_average())
    return 0


if __name__ == "__main__":
    sys.exit(main())
