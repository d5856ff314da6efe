"""The Add/Search store on PostgreSQL: the SQLite store's classes over one database shared by any
number of daemons (conversations/pg/connection.py runs their statements).

What changes with several daemons, and where it is handled:

- An Add logs its messages, indexes them (documents, postings, the owner's statistics and version)
  and records its request id in one transaction (`PgLog.append_once`), committed before the answer:
  a search on any daemon finds it at once, and nothing is caught up later - a watermark over ids
  handed out by a sequence would skip an Add whose transaction committed after a later one's.
- Writers of one owner wait for each other in the database (`lock_owner`, a transaction lock:
  Adds, merges, fact results, deletes); another owner's go on. A retried request finds the first
  delivery's row once that commits (the same answer, or 409 for another body); the unique key on
  (owner, request_id) answers the rest (`_RETRIES`).
- Each process's cache is keyed by the owner's version read in the search's snapshot
  (disk_view.ByteCache.get/put): another daemon's write moves the version, and the entries go.
- Fact jobs are claimed with `FOR UPDATE SKIP LOCKED` and a lease (`PgFactStore.claim`): two daemons
  never take the same job, a dead daemon's job is taken again when its lease ends, and only the
  lease holder's results are stored (`finish`).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from psycopg import errors as pg_errors

from mateclaw_mem.conversations.facts import MAX_ATTEMPTS, Fact, FactJob, FactStore, _job
from mateclaw_mem.conversations.log import INSERT_COLUMNS, ConversationLog, NewMessage, OnceResult
from mateclaw_mem.conversations.pg.connection import Checkout, ConnProxy, lock_owner
from mateclaw_mem.db import immediate, owner_column
from mateclaw_mem.errors import ConfigError
from mateclaw_mem.index.messages import postings
from mateclaw_mem.index.messages.disk_view import ByteCache
from mateclaw_mem.index.messages.index import DEFAULT_CACHE_BYTES, MessageIndex
from mateclaw_mem.index.messages.ranking import Ranking
from mateclaw_mem.index.messages.storage import MessageStorage, _Merger, delete_owner_rows
from mateclaw_mem.index.sources import FactSource, MessageSource
from mateclaw_mem.redaction import redact

_RETRIES = 3  # an Add that lost the race for its request id's row runs again (and replays it)
LEASE_MS = 10 * 60 * 1000  # a claimed fact job's lease: longer than any model call it waits for


class PgStorage(MessageStorage):
    """The message index's tables; written by the Add's transaction (`PgLog`), not by `sync`."""

    checkpoints = None

    def __init__(self, checkout: Checkout) -> None:  # (no file: nothing of MessageStorage's opening)
        self.path = None  # type: ignore[assignment]
        self.lock = checkout  # type: ignore[assignment]
        self._conn = ConnProxy(checkout)  # type: ignore[assignment]
        self.writes = 0
        self.cache = None
        self._postings = True
        self.last_write = 0.0
        self._due = set()
        self._due_lock = threading.Lock()
        self.merger = _Merger(self)

    def committed(self, *, documents: bool = True) -> None:
        with self._due_lock:  # (several threads commit at once here, each on its own connection)
            super().committed(documents=documents)

    def sync(self, log: MessageSource, *, batch: int = 1000, upto: int | None = None,
             committed: Callable[[], None] | None = None) -> int:
        return 0  # every Add indexed its messages in its own transaction

    def sync_facts(self, facts: FactSource, *, batch: int = 1000) -> int:
        return 0  # every job's facts are indexed in the transaction that stores them

    def rebuild(self, log: MessageSource, facts: FactSource | None = None, *, batch: int = 1000) -> int:
        raise ConfigError("the PostgreSQL store is not rebuilt in place: `mateclaw-mem aml export` it and import it"
                          " into a fresh database (the import indexes every message again)")

    def merge_one(self, okey: int) -> int:
        with immediate(self._conn, self.lock) as conn:
            r = conn.execute("SELECT agent, owner FROM powners WHERE okey = ?", (okey,)).fetchone()
            if r is None:
                return 0
            lock_owner(conn, r[0], r[1])  # an Add of the owner on any daemon waits, and then sees it
            folded = postings.merge_owner(conn, okey, self.cache, above=postings.DELTA_MAX)
        if folded:
            self.committed(documents=False)
        return folded

    def close(self) -> None:
        self.merger.stop()


class PgIndex(MessageIndex):
    """The message index over PostgreSQL: searches as in messages.db, each in one snapshot
    (`BEGIN` is REPEATABLE READ there), on any pooled connection at once."""

    batch_bodies = True  # (each query a round trip: disk_view.DiskView.body_of)

    def __init__(self, storage: PgStorage, ranking: Ranking | None = None, *,
                 cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.path = None  # type: ignore[assignment]
        self.ranking = ranking or Ranking()
        self._storage = storage
        self._lock = storage.lock
        self.cache = ByteCache(cache_bytes)
        storage.cache = self.cache
        self.dense = None  # (embeddings: the SQLite store only, for now)

    def without_waiting(self) -> AbstractContextManager[None]:
        return nullcontext()

    def sync_later(self, log: MessageSource, logged_to: int = 0, *, wait: bool = True) -> None:
        pass  # every Add indexed its messages in its own transaction: nothing is left to fold in

    def lagging(self, messages: int) -> bool:
        return False

    def catch_up(self, log: MessageSource) -> int:
        return 0  # (the same)

    def _searching(self) -> None:
        pass  # (no index process: each Add indexes in its own transaction)

    def close(self) -> None:
        self._storage.close()  # (no indexing thread here)

    def hand_checkpoints_to(self, checkpoints: Any) -> None:
        pass

    def redacted_on_migration(self) -> int | None:
        return None  # (every row came in through redaction)

    def rewrite(self, agent: str, owner: str | None, changes: dict[int, str]) -> int:
        with self._lock, immediate(self._storage._conn, self._lock) as conn:
            lock_owner(conn, agent, owner_column(owner))
            return super().rewrite(agent, owner, changes)

    def delete_owner(self, agent: str, owner: str) -> int:
        with self._lock, immediate(self._storage._conn, self._lock) as conn:
            lock_owner(conn, agent, owner_column(owner))
            return delete_owner_rows(conn, agent, owner)


class PgLog(ConversationLog):
    """The conversation log in PostgreSQL; its writes index what they log, in their transaction."""

    def __init__(self, checkout: Checkout, storage: PgStorage) -> None:
        self.path = None  # type: ignore[assignment]
        self._lock = checkout  # type: ignore[assignment]
        self._conn = ConnProxy(checkout)  # type: ignore[assignment]
        self.storage = storage

    def close(self) -> None:
        pass

    def without_waiting(self) -> AbstractContextManager[None]:
        return nullcontext()

    def redacted_on_migration(self) -> dict[str, int]:
        return {}

    def has_attachments(self, agent: str) -> bool:
        # Asked once, when a service starts, so that a text-only log's searches skip the attachment
        # lookup: here another daemon may log an image at any moment after this one started.
        return True

    @contextmanager
    def holding(self, agent: str, owner: str) -> Iterator[object]:
        with self._lock, immediate(self._conn, self._lock) as conn:
            lock_owner(conn, agent, owner_column(owner))
            yield conn
        self.storage.committed()  # (the merger hears of owners due a merge)

    def _insert_rows(self, conn: Any, rows: list[tuple[object, ...]]) -> list[int]:
        # One statement for the whole Add. Its rows take their ids from the sequence in the order of
        # VALUES, so the ids ascending are the messages in order (RETURNING's order is not promised).
        values = ", ".join(["(" + ", ".join("?" * len(rows[0])) + ")"] * len(rows))
        got = conn.execute(f"INSERT INTO messages ({INSERT_COLUMNS}) VALUES {values} RETURNING id",
                           [x for row in rows for x in row]).fetchall()
        return sorted(r[0] for r in got)

    def _index(self, ids: list[int]) -> None:
        self.storage._add_batch(self.by_ids(ids))

    def append(self, agent: str, conversation_id: str, messages: list[NewMessage], *, owner: str | None = None,
               trigger_source: str = "chat", finish_reason: str | None = None, memoryless: bool = False,
               request_id: str | None = None, now_ms: int) -> list[int]:
        with self.holding(agent, owner_column(owner)):
            ids = super().append(agent, conversation_id, messages, owner=owner, trigger_source=trigger_source,
                                 finish_reason=finish_reason, memoryless=memoryless, request_id=request_id,
                                 now_ms=now_ms)
            self._index(ids)
        return ids

    def append_once(self, request_id: str, body_hash: str, response: str, agent: str, conversation_id: str,
                    messages: list[NewMessage], *, owner: str | None = None, trigger_source: str = "chat",
                    now_ms: int) -> OnceResult:
        for attempt in range(_RETRIES):
            try:
                with self.holding(agent, owner_column(owner)):
                    result = super().append_once(request_id, body_hash, response, agent, conversation_id, messages,
                                                 owner=owner, trigger_source=trigger_source, now_ms=now_ms)
                    if not result.replayed:
                        self._index(result.ids)
                return result
            except pg_errors.UniqueViolation:
                # Another writer (one not holding this owner's lock: another agent with this owner
                # name) committed the same request id first: run again, and replay or refuse it.
                if attempt == _RETRIES - 1:
                    raise
        raise AssertionError("unreachable")


class PgFactStore(FactStore):
    """Facts and fact jobs in PostgreSQL; jobs are claimed under a lease (see the module text)."""

    poll_s = 30.0

    def __init__(self, checkout: Checkout, storage: PgStorage, now_ms: Callable[[], int], *,
                 lease_ms: int = LEASE_MS) -> None:
        self.path = None  # type: ignore[assignment]
        self._lock = checkout  # type: ignore[assignment]
        self._conn = ConnProxy(checkout)  # type: ignore[assignment]
        self.storage = storage
        self.now_ms = now_ms
        self.lease_ms = lease_ms
        self.token = uuid.uuid4().hex  # this store's claims (one per daemon)

    def close(self) -> None:
        pass

    def claim(self) -> FactJob | None:
        now = self.now_ms()
        with self._lock:
            row = self._conn.execute(
                "UPDATE aml_fact_jobs SET claimed_by = ?, lease_until_ms = ? WHERE id = ("
                "SELECT id FROM aml_fact_jobs WHERE status = 'pending'"
                " AND (lease_until_ms IS NULL OR lease_until_ms < ?) ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)"
                " RETURNING *",
                (self.token, now + self.lease_ms, now)).fetchone()
        return _job(row) if row is not None else None

    def finish(self, job: FactJob, facts: list[tuple[str, list[int], int]], *, now_ms: int) -> None:
        found: list[Fact] = []
        with self._lock, immediate(self._conn, self._lock) as conn:
            lock_owner(conn, job.agent, owner_column(job.owner))
            row = conn.execute("SELECT status, claimed_by FROM aml_fact_jobs WHERE id = ? FOR UPDATE",
                               (job.id,)).fetchone()
            # Deleted with its user, or taken by another daemon once the lease ended (it stores them).
            if row is None or row["status"] != "pending" or row["claimed_by"] != self.token:
                return

            for text, src, ts in facts:
                clean = redact(text)
                cur = conn.execute(
                    "INSERT INTO aml_facts (agent, owner, conversation_id, text, source_ids, ts_ms, job_id, created_ms)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (job.agent, owner_column(job.owner), job.conversation_id, clean, json.dumps(src), ts, job.id,
                     now_ms))
                assert cur.lastrowid is not None
                found.append(Fact(cur.lastrowid, job.agent, job.owner, job.conversation_id, clean, tuple(src), ts))
            conn.execute("UPDATE aml_fact_jobs SET status = 'done', attempts = attempts + 1, error = NULL,"
                         " updated_ms = ?, claimed_by = NULL, lease_until_ms = NULL WHERE id = ?", (now_ms, job.id))
            self.storage._add_facts(found)  # indexed in the same transaction
        self.storage.committed()

    def release(self, job: FactJob) -> None:
        """Our claim on `job` given up, its attempts as they were: any daemon takes it now."""
        with self._lock:
            self._conn.execute("UPDATE aml_fact_jobs SET claimed_by = NULL, lease_until_ms = NULL"
                               " WHERE id = ? AND claimed_by = ?", (job.id, self.token))

    def fail(self, job: FactJob, error: str, *, retry: bool, now_ms: int) -> None:
        status = "pending" if retry and job.attempts + 1 < MAX_ATTEMPTS else "failed"
        with self._lock:
            self._conn.execute(
                "UPDATE aml_fact_jobs SET status = ?, attempts = attempts + 1, error = ?, updated_ms = ?,"
                " claimed_by = NULL, lease_until_ms = NULL WHERE id = ? AND claimed_by = ?",
                (status, error[:2000], now_ms, job.id, self.token))
