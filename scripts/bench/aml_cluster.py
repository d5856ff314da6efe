"""A randomized campaign against many `serve --aml-only` daemons over one PostgreSQL (issue 40).

    python scripts/bench/aml_cluster.py [--daemons 3] [--seconds 60] [--workers 6] [--users 20] [--seed 1]

It starts its own PostgreSQL (initdb in a temp folder, as the tests do: tests/support/postgres.py; or
`--dsn` names an empty database) and N daemons, then for `--seconds`:

- workers send Adds, each with a unique word, to a random daemon; a failed delivery (503, a dropped
  connection, a daemon killed) is retried with the same request id and body on another daemon until
  acknowledged; a quarter of the Adds are delivered to two daemons AT ONCE (concurrent retries of one
  request id); a few acknowledged ones are sent again with a changed body (must be a 409);
- right after each acknowledgement, a Search for its word on ANOTHER daemon (read-after-write);
- a killer sends SIGKILL to a random daemon at random moments (every 2-6 s) and restarts it.

Then, with every daemon up, each acknowledged Add is counted in the database (its word in exactly one
message) and searched for once more. Printed: acknowledged Adds lost, duplicated, read-after-write
misses, replays that answered other bytes, changed bodies not refused - all must be 0 - and what
happened meanwhile (deliveries, retries, 503s, kills), with the load average.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _cluster import AmlDaemon, start_postgres  # scripts/bench/ is on sys.path
from _load import load_average

TS = 1683554160000
WORDS = ["kite", "lake", "boat", "garden", "violin", "museum", "hiking", "recipe", "puppy", "concert"]
TIMEOUT = 15.0


class Client:
    """POST JSON to a daemon over a keep-alive connection per thread and daemon: (status or None, body)."""

    def __init__(self) -> None:
        self.local = threading.local()

    def post(self, daemon: AmlDaemon, path: str, body: dict[str, Any]) -> tuple[int | None, bytes]:
        conns = self.local.__dict__.setdefault("conns", {})
        data = json.dumps(body).encode()
        for attempt in (0, 1):
            conn = conns.get(daemon.port) or http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=TIMEOUT)
            conns[daemon.port] = conn
            try:
                conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                conns.pop(daemon.port, None)
                if attempt:
                    return None, b""
        return None, b""


class Campaign:
    def __init__(self, daemons: list[AmlDaemon], args: argparse.Namespace) -> None:
        self.daemons = daemons
        self.args = args
        self.client = Client()
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.acked: dict[str, tuple[str, str, bytes]] = {}  # word -> (user, request id, the first answer)
        self.attempted: set[str] = set()
        self.stop = threading.Event()
        self.race = ThreadPoolExecutor(max_workers=2 * args.workers, thread_name_prefix="race")

    def note(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def others(self, rng: random.Random, but: AmlDaemon | None = None) -> list[AmlDaemon]:
        pool = [d for d in self.daemons if d is not but] or list(self.daemons)
        rng.shuffle(pool)
        return pool

    def deliver(self, rng: random.Random, body: dict[str, Any]) -> tuple[AmlDaemon, bytes] | None:
        """Send until acknowledged (retrying on other daemons); sometimes two deliveries at once."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            targets = self.others(rng)[: 2 if rng.random() < 0.25 else 1]
            self.note("deliveries", len(targets))
            if len(targets) == 2:
                self.note("concurrent double deliveries")
            answers = list(self.race.map(lambda d: (d, *self.client.post(d, "/v1/aml/add", body)), targets))
            ok = [(d, raw) for d, status, raw in answers if status == 200]
            for _, status, raw in answers:
                self.classify(status, raw)
            if len({raw for _, raw in ok}) > 1:
                self.note("REPLAY MISMATCH")
            if ok:
                return ok[0]
            time.sleep(0.05 + rng.random() * 0.2)  # a retry, as a client backs off
            self.note("retries")
        return None

    def classify(self, status: int | None, raw: bytes) -> None:
        if status is None:
            self.note("transport errors (daemon killed)")
        elif status == 503:
            self.note("503 answers")
        elif status == 409:
            self.note("UNEXPECTED 409 on a first delivery")
        elif status >= 500:
            self.note(f"OTHER {status} answers")

    def search(self, rng: random.Random, user: str, word: str, but: AmlDaemon | None) -> int | None:
        """How many results hold `word` on a daemon other than `but` (None: no daemon answered)."""
        for daemon in self.others(rng, but) * 3:
            status, raw = self.client.post(daemon, "/v1/aml/search", {"query": word, "user_id": user, "top_k": 5})
            if status == 200:
                return sum(word in item["content"] for item in json.loads(raw)["data"])
            self.note("search retries")
            time.sleep(0.1)
        return None

    def worker(self, w: int) -> None:
        rng = random.Random(self.args.seed * 1000 + w)
        n = 0
        while not self.stop.is_set():
            n += 1
            user, rid, word = f"user-{rng.randrange(self.args.users)}", f"w{w}-r{n}", f"tok{w}x{n}z"
            body = {"request_id": rid, "user_id": user, "session_id": f"s{n % 4}",
                    "messages": [{"role": "user", "timestamp": TS + n,
                                  "content": f"Caroline: note {word} about the {rng.choice(WORDS)}"}]}
            with self.lock:
                self.attempted.add(word)
            got = self.deliver(rng, body)
            if got is None:
                self.note("Adds never acknowledged (gave up after 120 s)")
                continue
            daemon, raw = got
            with self.lock:
                self.acked[word] = (user, rid, raw)
            found = self.search(rng, user, word, daemon)
            if found == 0:
                self.note("READ-AFTER-WRITE MISS")
            elif found is None:
                self.note("searches with no daemon answering")
            if rng.random() < 0.05:  # the same request id, another body: refused wherever it lands
                changed = {**body, "messages": [{"role": "user", "content": f"changed {word}", "timestamp": TS}]}
                for d in self.others(rng):
                    status, _ = self.client.post(d, "/v1/aml/add", changed)
                    if status in (None, 503):
                        continue
                    self.note("changed bodies sent")
                    if status != 409:
                        self.note("CHANGED BODY NOT 409")
                    break

    def killer(self) -> None:
        rng = random.Random(self.args.seed)
        while not self.stop.wait(rng.uniform(self.args.kill_min, self.args.kill_max)):
            victim = rng.choice(self.daemons)
            victim.kill9()
            self.note("kill -9 of a daemon")
            time.sleep(rng.uniform(0.1, 1.0))
            victim.start()


def verify(campaign: Campaign, dsn: str) -> None:
    """Every acknowledged Add's word in exactly one stored message, and found by a search."""
    import psycopg

    stored: Counter[str] = Counter()
    with psycopg.connect(dsn) as conn:
        for (content,) in conn.execute("SELECT content FROM messages"):
            stored.update(re.findall(r"tok\d+x\d+z", content))
    rng = random.Random(7)
    for word, (user, _, _) in campaign.acked.items():
        if stored[word] == 0:
            campaign.note("ACKNOWLEDGED ADDS LOST")
        elif stored[word] > 1:
            campaign.note("ACKNOWLEDGED ADDS DUPLICATED")
        if campaign.search(rng, user, word, None) != 1:
            campaign.note("SEARCH AFTER THE CAMPAIGN NOT EXACTLY ONE")
    campaign.note("stored, never acknowledged (the client gave up: allowed)",
                  sum(1 for w in campaign.attempted if w not in campaign.acked and stored[w]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--daemons", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--kill-min", type=float, default=2.0)
    ap.add_argument("--kill-max", type=float, default=6.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dsn", help="an empty PostgreSQL database (default: a throw-away server of its own)")
    args = ap.parse_args()

    server = None
    if args.dsn is None:
        server = start_postgres("aml_cluster")
        if server is None:
            return 2
    dsn = args.dsn or server.create_database()  # type: ignore[union-attr]
    work = Path(tempfile.mkdtemp(prefix="aml-cluster-"))
    daemons = [AmlDaemon(work / f"d{i}", "postgresql", dsn) for i in range(args.daemons)]
    try:
        for d in daemons:
            d.start()
        campaign = Campaign(daemons, args)
        threads = [threading.Thread(target=campaign.worker, args=(w,)) for w in range(args.workers)]
        killer = threading.Thread(target=campaign.killer)
        t0 = time.monotonic()
        for t in [*threads, killer]:
            t.start()
        time.sleep(args.seconds)
        campaign.stop.set()
        for t in [*threads, killer]:
            t.join()
        elapsed = time.monotonic() - t0
        for d in daemons:
            if not d.alive():
                d.start()
        verify(campaign, dsn)
        campaign.race.shutdown()
        c = campaign.counts
        rows = [
            ("daemons / workers / users", f"{args.daemons} / {args.workers} / {args.users}"),
            ("seconds", f"{elapsed:.0f}"),
            ("Adds acknowledged", str(len(campaign.acked))),
            ("deliveries (with retries and double deliveries)", str(c["deliveries"])),
            ("concurrent double deliveries of one request id", str(c["concurrent double deliveries"])),
            ("kill -9 of a daemon (restarted)", str(c["kill -9 of a daemon"])),
            ("transport errors / 503 answers / retries", f"{c['transport errors (daemon killed)']} / {c['503 answers']}"
                                                          f" / {c['retries']}"),
            ("changed bodies sent (must be 409)", str(c["changed bodies sent"])),
            ("acknowledged Adds lost", str(c["ACKNOWLEDGED ADDS LOST"])),
            ("acknowledged Adds duplicated", str(c["ACKNOWLEDGED ADDS DUPLICATED"])),
            ("read-after-write misses (search on another daemon)", str(c["READ-AFTER-WRITE MISS"])),
            ("replays answering other bytes", str(c["REPLAY MISMATCH"])),
            ("changed bodies not answered 409", str(c["CHANGED BODY NOT 409"])),
            ("409 on a first delivery", str(c["UNEXPECTED 409 on a first delivery"])),
            ("final search not finding exactly one", str(c["SEARCH AFTER THE CAMPAIGN NOT EXACTLY ONE"])),
            ("other 5xx answers", str(sum(v for k, v in c.items() if k.startswith("OTHER")))),
            ("Adds never acknowledged / stored anyway",
             f"{c['Adds never acknowledged (gave up after 120 s)']} / "
             f"{c['stored, never acknowledged (the client gave up: allowed)']}"),
        ]
        width = max(len(k) for k, _ in rows)
        print(f"{'figure':<{width}}  value")
        for k, v in rows:
            print(f"{k:<{width}}  {v}")
        print(load_average())
        # The failures are the counters named in capitals (each must stay 0).
        return 1 if sum(v for k, v in c.items() if k.split()[0].isupper()) else 0
    finally:
        for d in daemons:
            d.stop()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
