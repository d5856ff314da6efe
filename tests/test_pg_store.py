"""The Add/Search store on PostgreSQL (conversations/pg/) against a real server (tests/support/postgres.py;
skipped with the reason where none can start): it ranks exactly as the SQLite store on random
histories - chunked Adds spread over two daemons sharing one database, merges, facts, searches on
either daemon between them - and keeps the contract across daemons (read-after-write, one row and
one answer per request id under concurrent retries, 409 for another body), fact jobs claimed once
and taken over after a dead claimer's lease, and a lost database answered with a reason."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.aml import AmlService
from mateclaw_mem.conversations.aml_records import AmlMessage
from mateclaw_mem.conversations.facts import FactStore
from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.errors import ConflictError, StoreUnavailableError
from mateclaw_mem.index.messages import postings
from mateclaw_mem.index.messages.disk_view import ByteCache
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.index.messages.ranking import Ranking, rank
from tests.support.disk_reference import disk_state, disk_view, random_line, random_query, shrunk_layout

pytest.importorskip("psycopg")

from mateclaw_mem.conversations.pg import PgStore, open_store
from mateclaw_mem.conversations.pg.store import PgFactStore

TS = 1683554160000
BASE = Ranking()
RANKINGS = {"default": BASE, "requery": replace(BASE, prf_requery=True), "few-candidates": replace(BASE, max_candidates=7)}


def _clock() -> ManualClock:
    return ManualClock(datetime(2024, 1, 1, tzinfo=UTC))


def _store_facts(store: FactStore, job_key: str, owner: str, conv: str, msg_ids: list[int],
                 facts: list[tuple[str, list[int], int]]) -> None:
    """A fact job queued, claimed and finished with these facts (what the model would have answered)."""
    store.enqueue(job_key, "aml", owner, conv, msg_ids, now_ms=TS)
    job = store.claim()
    assert job is not None
    store.finish(job, facts, now_ms=TS)


class _Sqlite:
    """The SQLite store as the daemon builds it (log.db + messages.db, facts in log.db)."""

    def __init__(self, root: Path, clock: ManualClock) -> None:
        self.log = ConversationLog(root / "log.db")
        self.index = MessageIndex(root / "messages.db")
        self.facts = FactStore(root / "log.db")
        self.service = AmlService(self.log, self.index, clock)

    def store_facts(self, job_key: str, owner: str, conv: str, msg_ids: list[int], facts: list[tuple[str, list[int],
                    int]]) -> None:
        _store_facts(self.facts, job_key, owner, conv, msg_ids, facts)
        self.index.catch_up(self.log)  # (the fact worker's order: a fact takes its source turn's speaker)
        self.index.sync_facts(self.facts)

    def close(self) -> None:
        for x in (self.index, self.facts, self.log):
            x.close()


class _Pg:
    """One daemon's store over the shared database."""

    def __init__(self, dsn: str, clock: ManualClock) -> None:
        self.store: PgStore = open_store(dsn)
        self.log, self.index = self.store.log, self.store.index
        self.facts = self.store.fact_store(lambda: int(clock.now().timestamp() * 1000))
        self.service = AmlService(self.log, self.index, clock)

    def store_facts(self, job_key: str, owner: str, conv: str, msg_ids: list[int], facts: list[tuple[str, list[int],
                    int]]) -> None:
        _store_facts(self.facts, job_key, owner, conv, msg_ids, facts)  # (indexed in its transaction)

    def close(self) -> None:
        self.store.close()


def _msgs(lines: list[str], ts: int) -> list[AmlMessage]:
    return [AmlMessage(role="user", content=t, timestamp=ts + i) for i, t in enumerate(lines)]


def _rank(index: MessageIndex, owner: str, query: str, options: list[str], r: Ranking) -> list[tuple[float, int]]:
    # In one snapshot, as a search reads: a merger (the PostgreSQL daemons' are not held off by the
    # lock, which only binds a connection there) may commit meanwhile.
    with index.lock:
        conn = index._storage._conn
        conn.execute("BEGIN")
        try:
            return rank(disk_view(index, "aml", owner), query, options, r, limit=100)
        finally:
            conn.execute("COMMIT")


def _items(service: AmlService, query: str, owner: str) -> list[tuple[str, float, str]]:
    return [(i.id, i.score, i.content) for i in service.search(query, owner, 100)]


@pytest.mark.parametrize("seed", range(6))
def test_postgresql_ranks_exactly_like_sqlite(tmp_path: Path, pg_database: str, seed: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    if seed in (2, 3):  # tiny segments and merges at nearly every Add: every path of the segment writes
        monkeypatch.setattr(postings, "SEG_POSTINGS", 4)
        monkeypatch.setattr(postings, "DELTA_MAX", 40 * (seed - 1))
    # A shrunk layout (tests/test_aml_disk_layout.py): a large owner's paths - blocks past the first,
    # lengths read ahead, common words scored field by field - read through PostgreSQL too.
    seen = shrunk_layout(monkeypatch, *((4, 2, 8) if seed == 4 else (8, 3, 30))) if seed >= 4 else None
    rng = random.Random(seed)
    clock = _clock()
    lite = _Sqlite(tmp_path, clock)
    daemons = [_Pg(pg_database, clock), _Pg(pg_database, clock)]  # two daemons, one database
    owners = ("u1", "u2", "u3")
    compared = found = 0
    try:
        for k in range(30 + 15 * seed):
            owner = rng.choice(owners)
            conv = f"{owner}-c{rng.randint(0, 2 + seed % 3)}"
            lines = [random_line(rng) for _ in range(rng.randint(1, 9))]
            ts = TS + rng.randint(0, 400) * 86_400_000
            writer, reader = rng.sample(daemons, 2)
            answers = {s.service.add_json(f"r{k}", owner, conv, _msgs(lines, ts)) for s in (lite, writer)}
            assert len(answers) == 1
            if rng.random() < 0.2:  # a fact job's result, on one daemon
                last = lite.log.messages("aml", conv, owner=owner)[-1].id
                fact = [(random_line(rng).split(": ", 1)[-1], [last], ts)]
                for s in (lite, rng.choice(daemons)):
                    s.store_facts(f"r{k}", owner, conv, [last], fact)
            if rng.random() < 0.2:
                for s in (lite, *daemons):
                    s.index._storage.merger.run_now()
            if k % 3 == 0:  # read-after-write on the other daemon, its cache warm from earlier searches
                query, _ = random_query(rng)
                want = _items(lite.service, query, owner)
                assert _items(reader.service, query, owner) == want, (seed, k, query)
                assert _items(writer.service, query, owner) == want, (seed, k, query)
        lite.index.catch_up(lite.log)  # (an Add is indexed after its answer; a search would catch up first)
        for s in (lite, *daemons):  # (the tables compared below: no merge under the reads)
            s.index._storage.merger.stop()
        for owner in owners:
            assert disk_state(daemons[0].index, "aml", owner) == disk_state(lite.index, "aml", owner)
            for _ in range(8):
                query, options = random_query(rng)
                for name, r in RANKINGS.items():
                    want = _rank(lite.index, owner, query, options, r)
                    for d in daemons:
                        got = _rank(d.index, owner, query, options, r)
                        assert got == want, (seed, owner, query, options, name)
                    compared += 1
                    found += bool(want)
                assert _items(daemons[1].service, query, owner) == _items(lite.service, query, owner)
        assert found > compared * 0.6
        if seen is not None:
            assert seen["a block past the first"] > 100 and seen["read ahead"] > 100 and seen["field by field"] > 100
    finally:
        for s in (lite, *daemons):
            s.close()


# ------------------------------------------------------------------- the contract, on either store


@pytest.fixture(params=["sqlite", "postgresql"])
def two(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[AmlService, AmlService]]:
    """Two services over one store: two daemons over one PostgreSQL database, or - for SQLite, one
    file per daemon by design - two services over the same files, as two processes would open them."""
    clock = _clock()
    if request.param == "sqlite":
        stores: list[Any] = [_Sqlite(tmp_path, clock), _Sqlite(tmp_path, clock)]
    else:
        dsn = request.getfixturevalue("pg_database")
        stores = [_Pg(dsn, clock), _Pg(dsn, clock)]
    try:
        yield stores[0].service, stores[1].service
    finally:
        for s in stores:
            s.close()


def test_an_add_on_one_daemon_is_found_at_once_on_the_other(two: tuple[AmlService, AmlService]) -> None:
    a, b = two
    for k in range(12):
        a.add(f"r{k}", "u1", "s1", _msgs([f"Ann: my {k}th pet is called Biscuit{k}"], TS + k))
        hits = b.search(f"Biscuit{k}", "u1", 5)
        assert hits and hits[0].id == f"m{k + 1}" and f"Biscuit{k}" in hits[0].content, k
        (a, b) = (b, a)
    assert b.search("Biscuit3", "u2", 5) == []  # another user sees nothing


def test_one_request_id_retried_at_once_on_both_daemons_is_one_add(two: tuple[AmlService, AmlService]) -> None:
    a, b = two
    body = _msgs(["Bo: the kiln reaches 1200 degrees", "Cy: pottery glazes melt there"], TS)
    answers: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def deliver(svc: AmlService) -> None:
        start.wait()
        try:
            answers.append(svc.add_json("same", "u1", "s1", body))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=deliver, args=(svc,)) for svc in (a, b) * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(answers) == 8 and len(set(answers)) == 1
    stored = b.log.messages("aml", "s1", owner="u1")
    assert [m.content for m in stored] == ["Bo: the kiln reaches 1200 degrees", "Cy: pottery glazes melt there"]
    assert len(a.search("kiln degrees", "u1", 10)) == 2
    with pytest.raises(ConflictError):
        b.add("same", "u1", "s1", _msgs(["Bo: another body"], TS))
    assert len(a.log.messages("aml", "s1", owner="u1")) == 2
    # The same id from another user is a request of its own.
    assert a.add("same", "u2", "s1", _msgs(["Bo: another body"], TS))["success"] is True


def test_deleting_a_user_removes_their_rows_from_every_daemons_answers(two: tuple[AmlService, AmlService]) -> None:
    from mateclaw_mem.conversations.aml_users import AmlUsers

    a, b = two
    a.add("r1", "victim", "s1", _msgs(["Ann: my marmalade harbour secret"], TS))
    b.add("r1", "other", "s1", _msgs(["Bo: the teapot lighthouse"], TS))
    assert b.search("marmalade harbour", "victim", 5)
    out = AmlUsers(a, _clock()).delete("victim")
    assert out["deleted"]["log.db:messages"] == 1 and out["deleted"]["messages.db:docs"] == 1
    assert b.search("marmalade harbour", "victim", 5) == [] and a.search("marmalade harbour", "victim", 5) == []
    assert b.search("teapot lighthouse", "other", 5)
    b.add("r1", "victim", "s1", _msgs(["Ann: starting afresh"], TS))  # the request id is free again
    assert [i.content for i in a.search("afresh", "victim", 5)] == ["[2023-05-08 Mon] Ann: starting afresh"]


# ------------------------------------------------------------------- fact jobs over several daemons


def test_fact_jobs_are_claimed_once_and_a_dead_claimers_job_after_its_lease(pg_database: str) -> None:
    clock = _clock()
    now = lambda: int(clock.now().timestamp() * 1000)  # noqa: E731
    stores = [open_store(pg_database) for _ in range(3)]
    try:
        jobs = [s.fact_store(now) for s in stores]
        a = AmlService(stores[0].log, stores[0].index, clock)
        for k in range(30):
            a.add(f"r{k}", "u1", "s1", _msgs([f"Ann: note number {k}"], TS + k))
            assert jobs[k % 3].enqueue(f"r{k}", "aml", "u1", "s1", [k + 1], now_ms=TS)
        assert not jobs[1].enqueue("r0", "aml", "u1", "s1", [1], now_ms=TS)  # a retried Add queues nothing
        claimed: dict[int, list[int]] = {}
        lock = threading.Lock()

        def drain(i: int) -> None:
            while (job := jobs[i].claim()) is not None:
                with lock:
                    claimed.setdefault(job.id, []).append(i)
                jobs[i].finish(job, [(f"fact of job {job.id}", list(job.message_ids), TS)], now_ms=TS)

        threads = [threading.Thread(target=drain, args=(i,)) for i in range(3) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(claimed) == list(range(1, 31)) and all(len(v) == 1 for v in claimed.values())
        assert jobs[0].counts() == {"done": 30, "facts": 30}
        (top,) = a.search("fact of job 7", "u1", 1)  # indexed with the result
        assert top.id.startswith("f") and top.content.endswith("fact: fact of job 7")

        # A daemon claims a job and dies: nobody else takes it until its lease ends, then one does.
        a.add("late", "u1", "s2", _msgs(["Bo: the late one"], TS))
        assert jobs[0].enqueue("late", "aml", "u1", "s2", [31], now_ms=TS)
        dead = jobs[0].claim()
        assert dead is not None and jobs[1].claim() is None and jobs[2].claim() is None
        clock.set(clock.now() + timedelta(milliseconds=jobs[0].lease_ms + 1))
        taken = jobs[2].claim()
        assert taken is not None and taken.id == dead.id and jobs[1].claim() is None
        jobs[0].finish(dead, [("from the dead claimer", [31], TS)], now_ms=TS)  # it was not dead after all
        jobs[2].finish(taken, [("from the new claimer", [31], TS)], now_ms=TS)
        assert jobs[1].counts() == {"done": 31, "facts": 31}
        assert a.search("claimer", "u1", 5)[0].content.endswith("fact: from the new claimer")
    finally:
        for s in stores:
            s.close()


def test_a_worker_picks_up_jobs_another_daemon_queued(pg_database: str) -> None:
    assert PgFactStore.poll_s is not None and FactStore.poll_s is None


# ------------------------------------------------------------------- a lost database


def test_a_lost_database_is_a_store_unavailable_error_and_the_pool_reconnects(pg_server: Any) -> None:
    dsn = pg_server.create_database()
    store = open_store(dsn, timeout=2.0)
    try:
        svc = AmlService(store.log, store.index, _clock())
        svc.add("r1", "u1", "s1", _msgs(["Ann: the lighthouse keeper"], TS))
        pg_server.stop_server()
        try:
            with pytest.raises(StoreUnavailableError, match="PostgreSQL") as lost:
                svc.search("lighthouse", "u1", 5)
            assert "password" not in str(lost.value)
            with pytest.raises(StoreUnavailableError):
                svc.add("r2", "u1", "s1", _msgs(["Ann: lost?"], TS))
        finally:
            pg_server.restart_server()
        for _ in range(120):  # back by itself, once the pool has a connection again (seconds)
            try:
                found = svc.search("lighthouse", "u1", 5)
                break
            except StoreUnavailableError:
                time.sleep(0.25)
        assert [i.id for i in found] == ["m1"]
        svc.add("r2", "u1", "s1", _msgs(["Ann: back again"], TS))
        assert svc.search("back again", "u1", 5)
    finally:
        store.close()


def test_an_unreachable_database_at_open_names_why() -> None:
    with pytest.raises(StoreUnavailableError, match="no connection within"):
        open_store("host=127.0.0.1 port=1 user=nobody dbname=none connect_timeout=1", timeout=1.0)


def test_retention_expires_idle_users_on_postgresql(pg_database: str) -> None:
    from mateclaw_mem.conversations.aml_users import DAY_MS, AmlUsers

    clock = _clock()
    pg = _Pg(pg_database, clock)
    try:
        pg.service.add("r1", "idle", "s1", _msgs(["Ann: an old marmalade note"], TS))
        clock.set(clock.now() + timedelta(days=40))
        pg.service.add("r1", "active", "s1", _msgs(["Bo: a fresh marmalade note"], TS))
        users = AmlUsers(pg.service, clock, retention_days=30)
        assert users.expire() == ["idle"]
        assert pg.service.search("marmalade", "idle", 5) == [] and pg.service.search("marmalade", "active", 5)
        assert pg.log.owners_idle_since("aml", int(clock.now().timestamp() * 1000) + DAY_MS) == ["active"]
    finally:
        pg.close()


def test_a_nul_character_is_refused_with_a_reason_and_nothing_half_stored(pg_database: str) -> None:
    from mateclaw_mem.errors import InvalidInputError

    pg = _Pg(pg_database, _clock())
    try:
        with pytest.raises(InvalidInputError, match="NUL"):
            pg.service.add("r1", "u1", "s1", _msgs(["Ann: fine", "Bo: not \x00 fine"], TS))
        assert pg.log.messages("aml", "s1", owner="u1") == []
        assert pg.service.add("r1", "u1", "s1", _msgs(["Ann: fine"], TS))["success"] is True  # the id is free
        (kept,) = pg.log.messages("aml", "s1", owner="u1")
        assert [i.id for i in pg.service.search("fine", "u1", 5)] == [f"m{kept.id}"]
    finally:
        pg.close()


def test_concurrent_adds_merges_and_searches_on_two_daemons_stay_exact(pg_database: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads of two daemons at once - Adds of a shared owner and of their own, searches, the mergers
    (tiny thresholds: merges all along) - then every daemon's warm cache ranks as a cold view does."""
    monkeypatch.setattr(postings, "SEG_POSTINGS", 4)
    monkeypatch.setattr(postings, "DELTA_MAX", 60)
    clock = _clock()
    daemons = [_Pg(pg_database, clock), _Pg(pg_database, clock)]
    errors: list[BaseException] = []
    misses: list[str] = []

    def work(i: int) -> None:
        rng = random.Random(i)
        me, other = daemons[i % 2], daemons[1 - i % 2]
        try:
            for k in range(25):
                owner = rng.choice(("shared", f"own{i}"))
                word = f"zq{i}x{k}"
                lines = [random_line(rng) for _ in range(rng.randint(1, 5))] + [f"Ann: the {word} arrived"]
                me.service.add(f"t{i}-{k}", owner, f"{owner}-c{rng.randint(0, 2)}", _msgs(lines, TS + k))
                if not any(word in it.content for it in other.service.search(word, owner, 5)):
                    misses.append(word)  # read-after-write on the other daemon
                other.service.search(random_query(rng)[0], owner, 20)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and not misses
        rng = random.Random(99)
        for owner in ("shared", "own0", "own1", "own2", "own3"):
            for _ in range(6):
                query, options = random_query(rng)
                for d in daemons:  # (the mergers still run: both views in one snapshot, as a search reads)
                    with d.index.lock:
                        conn = d.index._storage._conn
                        conn.execute("BEGIN")
                        try:
                            warm = rank(disk_view(d.index, "aml", owner), query, options, BASE, limit=100)
                            fresh = rank(disk_view(d.index, "aml", owner, ByteCache(0)), query, options, BASE,
                                         limit=100)
                        finally:
                            conn.execute("COMMIT")
                    assert warm == fresh, (owner, query)
        for d in daemons:
            d.index._storage.merger.stop()
        assert disk_state(daemons[0].index, "aml", "shared") == disk_state(daemons[1].index, "aml", "shared")
    finally:
        for d in daemons:
            d.close()


def test_migrations_go_forward_once_and_a_newer_schema_is_refused(pg_database: str) -> None:
    import psycopg

    from mateclaw_mem.conversations.pg import schema
    from mateclaw_mem.errors import ConfigError

    with psycopg.connect(pg_database, autocommit=True) as raw:  # a database made by the first release
        first = schema.MIGRATIONS
        try:
            schema.MIGRATIONS = first[:1]
            assert schema.migrate(raw, TS) == [1]
        finally:
            schema.MIGRATIONS = first
        raw.execute("INSERT INTO messages (agent, owner, conversation_id, role, content, ts_ms, created_ms)"
                    " VALUES ('aml', 'u1', 's1', 'user', 'Ann: kept across the upgrade', %s, %s)", (TS, TS))
    store = open_store(pg_database)  # the daemon's start applies what is missing, and only that
    try:
        assert store.migrated == [m[0] for m in schema.MIGRATIONS[1:]]
        assert [m.content for m in store.log.messages("aml", "s1", owner="u1")] == ["Ann: kept across the upgrade"]
    finally:
        store.close()
    again = open_store(pg_database)
    try:
        assert again.migrated == []
        with psycopg.connect(pg_database, autocommit=True) as raw:
            assert [r[0] for r in raw.execute("SELECT version FROM schema_version ORDER BY version")] == [
                m[0] for m in schema.MIGRATIONS]
            raw.execute("INSERT INTO schema_version (version, name, applied_ms) VALUES (%s, 'from the future', 0)",
                        (schema.LATEST + 1,))
    finally:
        again.close()
    with pytest.raises(ConfigError, match=f"version {schema.LATEST + 1}, newer than"):
        open_store(pg_database)


def test_health_names_the_backend_pool_and_schema(pg_database: str, tmp_path: Path) -> None:
    from mateclaw_mem.conversations.pg import PgAmlService, pg_health, schema

    store = open_store(pg_database)
    svc = PgAmlService(store.log, store.index, _clock())
    svc.pg = store
    try:
        health = pg_health(svc)
        assert health["backend"] == "postgresql" and health["reachable"] is True
        assert health["schema_version"] == schema.LATEST and health["pending_migrations"] == 0
        assert health["pool"]["pool_max"] >= 1 and health["last_error"] is None
    finally:
        svc.stop()
    lite = _Sqlite(tmp_path, _clock())
    try:
        assert pg_health(lite.service) == {"backend": "sqlite"}
    finally:
        lite.close()


def test_a_request_id_raced_past_the_owner_lock_is_answered_from_its_row(pg_database: str) -> None:
    """Request ids are per user, not per agent, so two agents' services serving one user name take
    different owner locks: the loser of the insert race meets the unique key and answers from the
    winner's row (the same answer), never with an error."""
    clock = _clock()
    stores = [open_store(pg_database) for _ in range(2)]
    try:
        services = [AmlService(st.log, st.index, clock, agent=agent) for st, agent in zip(stores, ("aml", "other"),
                                                                                        strict=True)]
        for k in range(6):
            start = threading.Barrier(4)
            answers: list[str] = []
            errors: list[BaseException] = []

            def deliver(svc: AmlService, k: int = k, start: threading.Barrier = start,
                        answers: list[str] = answers, errors: list[BaseException] = errors) -> None:
                start.wait()
                try:
                    answers.append(svc.add_json(f"r{k}", "u1", "s1", _msgs([f"Ann: raced {k}"], TS)))
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=deliver, args=(svc,)) for svc in services * 2]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors and len(set(answers)) == 1 and len(answers) == 4, (k, errors)
            with stores[0].log.lock:
                rows = stores[0].log._conn.execute("SELECT COUNT(*) FROM requests WHERE owner = 'u1' AND"
                                                   " request_id = ?", (f"r{k}",)).fetchone()[0]
            assert rows == 1
    finally:
        for st in stores:
            st.close()


def test_an_image_added_on_one_daemon_comes_back_from_another_started_before_it(pg_database: str) -> None:
    """(SQLite is one daemon per workspace: it learns of images at start and from its own Adds.)"""
    daemons = [_Pg(pg_database, _clock()), _Pg(pg_database, _clock())]  # both start on a store without images
    try:
        url = "https://example.com/pixel.png"
        daemons[0].service.add("r1", "u1", "s1", [AmlMessage(role="user", timestamp=TS, content=[
            {"type": "text", "text": "Ann: my cat Pixel"}, {"type": "image_url", "image_url": {"url": url}}])])
        (hit,) = daemons[1].service.search("cat Pixel", "u1", 5)
        assert [i["url"] for i in hit.images] == [url]
    finally:
        for d in daemons:
            d.close()


def test_a_store_indexed_by_another_tokenizer_is_refused_with_the_way_out(pg_database: str, tmp_path: Path) -> None:
    from mateclaw_mem.conversations.pg import open_pg_service
    from mateclaw_mem.errors import ConfigError
    from mateclaw_mem.settings import load_settings

    (tmp_path / "c.yaml").write_text("aml:\n  store: postgresql\n", encoding="utf-8")

    pg = _Pg(pg_database, _clock())
    try:
        pg.service.add("r1", "u1", "s1", _msgs(["Ann: indexed long ago"], TS))
        with pg.log.lock:
            pg.log._conn.execute("UPDATE meta SET value = 'tok-0' WHERE key = 'tokenizer'")
    finally:
        pg.close()
    settings = load_settings(tmp_path / "c.yaml", tmp_path / "ws")
    with pytest.raises(ConfigError, match=r"tokenizer 'tok-0'.*aml export"):
        open_pg_service(settings, _clock(), dsn=pg_database)
    exported = open_store(pg_database)  # (export still opens it: it reads the log, not the index)
    try:
        assert [m.content for m in exported.log.since(0)] == ["Ann: indexed long ago"]
    finally:
        exported.close()
