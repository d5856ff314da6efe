"""A randomized campaign against many `serve --aml-only` daemons over one PostgreSQL (issue 40), or
over one SQLite workspace's files (`--store sqlite`, issue 36: an Add answers once its messages are in
log.db and a thread indexes them after).

    python scripts/bench/aml_cluster.py [--daemons 3] [--seconds 60] [--workers 6] [--users 20] [--seed 1]
    python scripts/bench/aml_cluster.py --store sqlite [--delta-max 60] [--migration-trials 30]

It starts its own PostgreSQL (initdb in a temp folder, as the tests do: tests/support/postgres.py; or
`--dsn` names an empty database) and N daemons - with `--store sqlite`, one daemon on a workspace
(a second refuses to start; its postings merge past `--delta-max` entries, so kills land in merges
too) - then for `--seconds`:

- workers send Adds, each with a unique word, to a random daemon; a failed delivery (503, a dropped
  connection, a daemon killed) is retried with the same request id and body on another daemon until
  acknowledged; a quarter of the Adds are delivered to two daemons AT ONCE (concurrent retries of one
  request id); a few acknowledged ones are sent again with a changed body (must be a 409);
- right after each acknowledgement, a Search for its word on ANOTHER daemon (read-after-write);
- a killer sends SIGKILL to a random daemon at random moments (every 2-6 s) and restarts it.

Then, with every daemon up, each acknowledged Add is counted in the database (its word in exactly one
message) and searched for once more (the hit must carry the text sent; on SQLite the message must be
in messages.db exactly once and the index's watermark at the log's last id). Printed: acknowledged Adds
lost, duplicated, read-after-write misses, replays that answered other bytes, changed bodies not
refused - all must be 0 - and what happened meanwhile (deliveries, retries, 503s, kills), with the
load average.

`--migration-trials N` (SQLite): after the campaign the workspace is filled to `--legacy-messages`
and its messages.db made as an older version wrote it (every turn's text copied, the owner index,
the postings' segments unpacked);
each trial starts a daemon on a copy, sends it SIGKILL at a random moment of its start (three in four
between when an uninterrupted start first wrote messages.db's WAL and when it listened - the migration
and the compaction after it -, one in four anywhere up to 1.3x that), starts it again and
checks the migration is done, every turn indexed once without its copy, the watermark at the log's
end, and sampled messages found once with their text.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
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
FACT_BASE = 1 << 40  # (mateclaw_mem.index.messages.fields: documents above it are facts)


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
    def __init__(self, daemons: list[AmlDaemon], args: argparse.Namespace, workspace: Path | None = None) -> None:
        self.daemons = daemons
        self.workspace = workspace  # SQLite's (None: PostgreSQL)
        self.args = args
        self.client = Client()
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.acked: dict[str, tuple[str, str, bytes]] = {}  # word -> (user, its text, the first answer)
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
            # (one daemon: both deliveries to it at once)
            targets = (self.others(rng) * 2)[: 2 if rng.random() < 0.25 else 1]
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

    def search(self, rng: random.Random, user: str, word: str, but: AmlDaemon | None, text: str = "",
               among: list[AmlDaemon] | None = None) -> int | None:
        """How many results hold `word` on a daemon other than `but` (None: no daemon answered); a
        hit holding the word without the whole `text` sent is counted as wrong text."""
        for daemon in (among or self.others(rng, but)) * 3:
            status, raw = self.client.post(daemon, "/v1/aml/search", {"query": word, "user_id": user, "top_k": 5})
            if status == 200:
                held = [item["content"] for item in json.loads(raw)["data"] if word in item["content"]]
                if text and any(text not in c for c in held):
                    self.note("HIT WITH OTHER TEXT")
                return len(held)
            self.note("search retries")
            time.sleep(0.1)
        return None

    def worker(self, w: int) -> None:
        rng = random.Random(self.args.seed * 1000 + w)
        n = 0
        while not self.stop.is_set():
            n += 1
            user, rid, word = f"user-{rng.randrange(self.args.users)}", f"w{w}-r{n}", f"tok{w}x{n}z"
            text = f"note {word} about the {rng.choice(WORDS)}"
            # (a few more turns now and then: Adds of different sizes, more for the indexer to write)
            more = [{"role": "assistant", "timestamp": TS + n, "content": f"Melanie: reply {k} on {rng.choice(WORDS)}"}
                    for k in range(rng.choice((0, 0, 3, 19)))]
            body = {"request_id": rid, "user_id": user, "session_id": f"s{n % 4}",
                    "messages": [{"role": "user", "timestamp": TS + n, "content": f"Caroline: {text}"}, *more]}
            with self.lock:
                self.attempted.add(word)
            got = self.deliver(rng, body)
            if got is None:
                self.note("Adds never acknowledged (gave up after 120 s)")
                continue
            daemon, raw = got
            with self.lock:
                self.acked[word] = (user, text, raw)
            found = self.search(rng, user, word, daemon, text)
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
            # Every other kill on SQLite lands on the daemon's index process when one runs (it indexes
            # and merges a stream of Adds: aml.index-process); the daemon goes on without it.
            child = victim.children() if self.workspace is not None and rng.random() < 0.5 else []
            if child:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child[0], signal.SIGKILL)
                self.note("kill -9 of the daemon's index process")
                continue
            victim.kill9()
            self.note("kill -9 of a daemon")
            if self.workspace is not None and behind(self.workspace):
                self.note("kills leaving acknowledged Adds not yet indexed")
            time.sleep(rng.uniform(0.1, 1.0))
            victim.start()


def stored_words(dsn: str | None, workspace: Path | None) -> tuple[Counter[str], dict[str, list[int]]]:
    """How many stored messages hold each campaign word, and their ids."""
    stored: Counter[str] = Counter()
    ids: dict[str, list[int]] = {}
    if dsn is not None:
        import psycopg

        with psycopg.connect(dsn) as conn:
            rows = list(conn.execute("SELECT id, content FROM messages"))
    else:
        assert workspace is not None
        with contextlib.closing(sqlite3.connect(workspace / ".mateclaw" / "log.db", timeout=60)) as lite:
            rows = lite.execute("SELECT id, content FROM messages").fetchall()
    for mid, content in rows:
        for word in re.findall(r"(?:tok|mig)\d+x\d+z", content):
            stored[word] += 1
            ids.setdefault(word, []).append(mid)
    return stored, ids


def behind(workspace: Path) -> bool:
    """Whether messages.db's watermark is short of the log's last id (the kill left indexing to do)."""
    with contextlib.closing(sqlite3.connect(workspace / ".mateclaw" / "messages.db", timeout=60)) as conn:
        conn.execute("ATTACH DATABASE ? AS log", (f"file:{workspace / '.mateclaw' / 'log.db'}?mode=ro",))
        mark = conn.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
        last = conn.execute("SELECT MAX(id) FROM log.messages").fetchone()[0] or 0
    return (int(mark[0]) if mark else 0) < last


def index_check(workspace: Path, note: Any) -> None:
    """SQLite: every logged turn in messages.db exactly once, none with a copy of its text, and the
    watermark at the log's last id (after a search has caught the index up)."""
    with contextlib.closing(sqlite3.connect(workspace / ".mateclaw" / "messages.db", timeout=60)) as conn:
        conn.execute("ATTACH DATABASE ? AS log", (str(workspace / ".mateclaw" / "log.db"),))
        logged = {r[0] for r in conn.execute("SELECT id FROM log.messages")}
        docs = Counter(r[0] for r in conn.execute("SELECT id FROM docs WHERE id < ?", (FACT_BASE,)))
        mark = conn.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
        copies = conn.execute("SELECT COUNT(*) FROM docs WHERE id < ? AND content <> ''", (FACT_BASE,)).fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0] / conn.execute("PRAGMA page_count").fetchone()[0]
    note("LOGGED TURNS NOT IN THE INDEX", len(logged - set(docs)))
    note("INDEXED TURNS NOT IN THE LOG", len(set(docs) - logged))
    note("TURNS INDEXED TWICE", sum(1 for n in docs.values() if n > 1))
    note("TURNS KEEPING A COPY OF THEIR TEXT", copies)
    note("WATERMARK NOT AT THE LOG'S END", int((int(mark[0]) if mark else 0) != max(logged, default=0)))
    # (not a loss: a start killed between the migration and its VACUUM leaves the freed pages to reuse)
    note("messages.db files over a quarter free pages", int(free > 0.25))
    # The postings on disk - Adds, merges and kills between - as a fresh parse of the documents makes them.
    from mateclaw_mem.index.messages.index import MessageIndex
    from tests.support.disk_reference import disk_state, reference_state, reference_view

    index = MessageIndex(workspace / ".mateclaw" / "messages.db")
    try:
        owners = [r[0] for r in index._storage._conn.execute("SELECT owner FROM powners WHERE agent = 'aml'")]
        note("OWNERS WHOSE POSTINGS DIFFER FROM A FRESH PARSE",
             sum(disk_state(index, "aml", o) != reference_state(reference_view(index, "aml", o)) for o in owners))
        note("owners whose postings were compared", len(owners))
    finally:
        index.close()


def verify(campaign: Campaign, dsn: str | None, workspace: Path | None) -> None:
    """Every acknowledged Add's word in exactly one stored message, and found by a search."""
    stored, _ = stored_words(dsn, workspace)
    rng = random.Random(7)
    for word, (user, text, _) in campaign.acked.items():
        if stored[word] == 0:
            campaign.note("ACKNOWLEDGED ADDS LOST")
        elif stored[word] > 1:
            campaign.note("ACKNOWLEDGED ADDS DUPLICATED")
        if campaign.search(rng, user, word, None, text) != 1:
            campaign.note("SEARCH AFTER THE CAMPAIGN NOT EXACTLY ONE")
    if workspace is not None:
        index_check(workspace, campaign.note)
    campaign.note("stored, never acknowledged (the client gave up: allowed)",
                  sum(1 for w in campaign.attempted if w not in campaign.acked and stored[w]))


def small_merges(entries: int) -> str:
    """The daemon's prelude: postings merged past `entries` (view_races.py's knob), so kills land in merges."""
    return f"from mateclaw_mem.index.messages import postings\npostings.DELTA_MAX = {entries}"


def fill(daemon: AmlDaemon, client: Client, messages: int) -> None:
    """Adds of 50 turns over 20 users, each turn with a word of its own (`migN x K z`)."""
    for n in range(messages // 50):
        turns = [{"role": "user" if k % 2 else "assistant", "timestamp": TS + k,
                  "content": f"Caroline: filler mig{n}x{k}z about the {WORDS[(n + k) % len(WORDS)]}"}
                 for k in range(50)]
        status, raw = client.post(daemon, "/v1/aml/add", {"request_id": f"fill-{n}", "user_id": f"user-{n % 20}",
                                                          "session_id": f"f{n % 7}", "messages": turns})
        if status != 200:
            raise RuntimeError(f"filling the workspace: {status} {raw[:200]!r}")


def make_legacy(workspace: Path) -> int:
    """messages.db as an older version wrote it: every turn's text copied, the owner index, the postings'
    segments unpacked (storage.py's migrations text-from-log, no-docs-by-owner and packed-postings
    undone); returns how many segments it unpacked."""
    from mateclaw_mem.index.messages.delta import narrow, unpack_segment

    db = workspace / ".mateclaw" / "messages.db"
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        segs = conn.execute("SELECT rowid, ords, packed FROM postings").fetchall()
        for rowid, ords, packed in segs:  # (as test_aml_text_from_log makes them: uint32 ordinals, narrowed counts)
            o, c = unpack_segment(bytes(ords), bytes(packed))
            conn.execute("UPDATE postings SET ords = ?, packed = ? WHERE rowid = ?", (o.tobytes(), narrow(c), rowid))
        conn.execute("DELETE FROM meta WHERE key = 'migrated:packed-postings'")
        conn.execute("ATTACH DATABASE ? AS log", (str(workspace / ".mateclaw" / "log.db"),))
        conn.execute("UPDATE docs SET content = (SELECT m.content FROM log.messages m WHERE m.id = docs.id)"
                     " WHERE id < ?", (FACT_BASE,))
        conn.execute("CREATE INDEX IF NOT EXISTS docs_by_owner ON docs (agent, owner, id)")
        conn.execute("DELETE FROM meta WHERE key IN ('migrated:text-from-log', 'migrated:no-docs-by-owner')")
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return len(segs)


def migrated(workspace: Path) -> bool:
    with contextlib.closing(sqlite3.connect(f"file:{workspace / '.mateclaw' / 'messages.db'}?mode=ro", uri=True,
                                            timeout=30)) as conn:
        return conn.execute("SELECT COUNT(*) FROM meta WHERE key IN ('migrated:text-from-log',"
                            " 'migrated:no-docs-by-owner', 'migrated:packed-postings')").fetchone()[0] == 3


def migration_campaign(work: Path, shared: Path, campaign: Campaign, args: argparse.Namespace) -> list[tuple[str, str]]:
    """kill -9 at a random moment of a start that migrates an older messages.db; then a start, checked."""
    filler = AmlDaemon(work / "fill", "sqlite", workspace=shared).start()
    fill(filler, campaign.client, args.legacy_messages)
    filler.stop()
    segments = make_legacy(shared)
    base = work / "legacy"
    shutil.copytree(shared, base)
    _, ids = stored_words(None, base)
    words = sorted(w for w in ids if w.startswith("mig"))
    users = {w: f"user-{int(w[3:].split('x')[0]) % 20}" for w in words}

    def started(ws: Path, folder: Path) -> tuple[AmlDaemon, subprocess.Popen[bytes]]:
        d = AmlDaemon(folder, "sqlite", workspace=ws)
        out = (folder / "killed.log").open("wb")
        return d, subprocess.Popen(d.command(), cwd=folder, env=d.env, stdout=out, stderr=subprocess.STDOUT)

    # An uninterrupted start: how long until the migration is done (the kills are drawn up to it).
    ws = work / "t-measure"
    shutil.copytree(base, ws)
    _, proc = started(ws, work / "measure")
    t0, wal = time.monotonic(), ws / ".mateclaw" / "messages.db-wal"
    began = None
    while not migrated(ws):
        if began is None and wal.exists() and wal.stat().st_size > 0:
            began = time.monotonic() - t0  # (its first write: make_legacy left no WAL)
        time.sleep(0.005)
        if time.monotonic() - t0 > 120:
            raise RuntimeError("the migration did not finish in 120 s")
    took = time.monotonic() - t0
    began = took if began is None else began
    while b"listening on" not in (work / "measure" / "killed.log").read_bytes():  # (the compaction after it)
        time.sleep(0.005)
        if proc.poll() is not None or time.monotonic() - t0 > 120:
            raise RuntimeError("the migrating start did not listen")
    ready = time.monotonic() - t0
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    rng = random.Random(args.seed)
    counts: Counter[str] = Counter()
    for t in range(args.migration_trials):
        ws, folder = work / f"t{t}", work / f"m{t}"
        shutil.copytree(base, ws)
        daemon, proc = started(ws, folder)
        # Three kills in four from the first write to the migration's end, one anywhere up to 1.3x it
        # (a start is slower or faster under load: whether it was done is read after each kill).
        time.sleep(rng.uniform(began, ready) if rng.random() < 0.75 else rng.uniform(0, ready * 1.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        counts["killed before the migration was done" if not migrated(ws) else "killed after it"] += 1
        daemon.start()
        sample = rng.sample(words, 20)
        for word in sample:
            if campaign.search(rng, users[word], word, None, f"filler {word} about", [daemon]) != 1:
                counts["MIGRATED: SEARCH NOT EXACTLY ONE"] += 1
        daemon.stop()
        if not migrated(ws):
            counts["MIGRATION NOT DONE AFTER THE RESTART"] += 1
        index_check(ws, lambda key, n=1: counts.__setitem__(key, counts[key] + n))
        shutil.rmtree(ws)
        shutil.rmtree(folder, ignore_errors=True)
    for key, v in counts.items():
        if key.split()[0].isupper():
            campaign.note(key, v)
    return [("migration trials (messages / postings segments migrated)",
             f"{args.migration_trials} ({len(words)} / {segments})"),
            ("an uninterrupted start: migration's first write / end / listening (s)",
             f"{began:.2f} / {took:.2f} / {ready:.2f}"),
            ("kills before the migration was done / after", f"{counts['killed before the migration was done']} / "
                                                              f"{counts['killed after it']}"),
            *[(f"after the restart: {k.lower()}", str(counts[k])) for k in (
                "MIGRATION NOT DONE AFTER THE RESTART", "MIGRATED: SEARCH NOT EXACTLY ONE",
                "LOGGED TURNS NOT IN THE INDEX", "INDEXED TURNS NOT IN THE LOG", "TURNS INDEXED TWICE",
                "TURNS KEEPING A COPY OF THEIR TEXT", "WATERMARK NOT AT THE LOG'S END",
                "messages.db files over a quarter free pages", "OWNERS WHOSE POSTINGS DIFFER FROM A FRESH PARSE")]]


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
    ap.add_argument("--store", choices=("postgresql", "sqlite"), default="postgresql")
    ap.add_argument("--delta-max", type=int, default=60,
                    help="SQLite: postings entries an owner's unmerged Adds hold before a merge (the product's 12,000)")
    ap.add_argument("--migration-trials", type=int, default=0, help="SQLite: kill -9 during the one-time migration")
    ap.add_argument("--legacy-messages", type=int, default=20_000, help="messages of the workspace migrated")
    args = ap.parse_args()

    server = None
    dsn: str | None = None
    work = Path(tempfile.mkdtemp(prefix="aml-cluster-"))
    shared: Path | None = None
    if args.store == "postgresql":
        if args.dsn is None:
            server = start_postgres("aml_cluster")
            if server is None:
                return 2
        dsn = args.dsn or server.create_database()  # type: ignore[union-attr]
        daemons = [AmlDaemon(work / f"d{i}", "postgresql", dsn) for i in range(args.daemons)]
    else:
        # (One daemon: a second on the same workspace refuses to start - SQLite has one writer.)
        shared, args.daemons = work / "ws", 1
        daemons = [AmlDaemon(work / "d0", "sqlite", workspace=shared, prelude=small_merges(args.delta_max))]
    try:
        for d in daemons:
            d.start()
        campaign = Campaign(daemons, args, shared)
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
        verify(campaign, dsn, shared)
        campaign.race.shutdown()
        c = campaign.counts
        rows = [
            ("store", args.store + (f" (merges past {args.delta_max} entries)" if shared else "")),
            ("daemons / workers / users", f"{args.daemons} / {args.workers} / {args.users}"),
            ("seconds", f"{elapsed:.0f}"),
            ("Adds acknowledged", str(len(campaign.acked))),
            ("deliveries (with retries and double deliveries)", str(c["deliveries"])),
            ("concurrent double deliveries of one request id", str(c["concurrent double deliveries"])),
            ("kill -9 of a daemon (restarted)", str(c["kill -9 of a daemon"])),
            *([("kill -9 of its index process (not restarted: the daemon goes on)",
                str(c["kill -9 of the daemon's index process"]))] if shared else []),
            *([(k, str(c[k])) for k in ("kills leaving acknowledged Adds not yet indexed",)] if shared else []),
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
            ("hits carrying other text than sent", str(c["HIT WITH OTHER TEXT"])),
            ("other 5xx answers", str(sum(v for k, v in c.items() if k.startswith("OTHER")))),
            ("Adds never acknowledged / stored anyway",
             f"{c['Adds never acknowledged (gave up after 120 s)']} / "
             f"{c['stored, never acknowledged (the client gave up: allowed)']}"),
        ]
        if shared is not None:
            rows += [(k.lower(), str(c[k])) for k in (
                "LOGGED TURNS NOT IN THE INDEX", "INDEXED TURNS NOT IN THE LOG", "TURNS INDEXED TWICE",
                "TURNS KEEPING A COPY OF THEIR TEXT", "WATERMARK NOT AT THE LOG'S END",
                "messages.db files over a quarter free pages", "owners whose postings were compared",
                "OWNERS WHOSE POSTINGS DIFFER FROM A FRESH PARSE")]
        if shared is not None and args.migration_trials:
            for d in daemons:
                d.stop()
            rows += migration_campaign(work, shared, campaign, args)
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
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
