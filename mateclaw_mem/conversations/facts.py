"""Source-bound facts for AML search (model mode), stored in `log.db` next to the messages.

Raw messages are the truth; facts are a second path into them. Each Add (with a model configured)
queues one extraction job keyed by its request id, in log.db, so a job survives a restart and a
retried Add does not queue it twice. A worker (`FactExtractor.start`, a daemon thread) or a caller
(`run_pending`) takes jobs in order: the model reads the chunk's messages with a few earlier turns
of the session, returns facts that cite the messages they come from, and the facts are stored and
indexed. A failing model never fails the Add: the job is marked failed with the error (retried a
bounded number of times when the error is retryable) and the messages stay searchable as they are.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mateclaw_mem.clock import Clock
from mateclaw_mem.conversations.log import ConversationLog, StoredMessage
from mateclaw_mem.db import SharedConnection, owner_column, run_once
from mateclaw_mem.errors import MateclawError, ModelError
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.index.messages.storage import split_speaker
from mateclaw_mem.llm.failures import record_failure
from mateclaw_mem.llm.prompts.aml_facts import AmlFactsResult, SourceMessage, build_messages, check_sources
from mateclaw_mem.redaction import redact
from mateclaw_mem.workspace.walk import normalise_owner

if TYPE_CHECKING:  # the client (and `openai`, ~0.3 s to import) only where a model is configured
    from mateclaw_mem.llm.client import ModelClient

log = logging.getLogger(__name__)

_JOBS_TABLE = """
CREATE TABLE IF NOT EXISTS {name} (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id TEXT NOT NULL,          -- unique per user (UNIQUE below), as Add's idempotency is
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    message_ids TEXT NOT NULL,         -- JSON list of the chunk's log message ids
    status TEXT NOT NULL,              -- pending | done | failed
    attempts INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    UNIQUE (agent, owner, request_id)
);
"""
_SCHEMA = ("""
CREATE TABLE IF NOT EXISTS aml_facts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    text TEXT NOT NULL,
    source_ids TEXT NOT NULL,          -- JSON list of log message ids, first = main source
    ts_ms INTEGER NOT NULL,            -- time of the first source message
    job_id INTEGER NOT NULL,
    created_ms INTEGER NOT NULL
);
"""
           + _JOBS_TABLE.format(name="aml_fact_jobs")
           + "CREATE INDEX IF NOT EXISTS aml_fact_jobs_by_status ON aml_fact_jobs (status, id);\n")

# Files made before jobs were keyed per user had `request_id` UNIQUE across all users: a second
# user's Add with the same request_id got no job, so no facts. Rebuilt once with the per-user key.
_JOBS_PER_USER = "migrated:aml-fact-jobs-per-user"


def _jobs_per_user(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'aml_fact_jobs'").fetchone()
    if row is None or "UNIQUE (agent, owner, request_id)" in row[0]:
        return 0
    conn.execute(_JOBS_TABLE.format(name="aml_fact_jobs_new"))
    columns = ("id, request_id, agent, owner, conversation_id, message_ids, status, attempts, error, created_ms,"
               " updated_ms")
    n = conn.execute(f"INSERT INTO aml_fact_jobs_new ({columns}) SELECT {columns} FROM aml_fact_jobs").rowcount
    conn.execute("DROP TABLE aml_fact_jobs")
    conn.execute("ALTER TABLE aml_fact_jobs_new RENAME TO aml_fact_jobs")
    conn.execute("CREATE INDEX IF NOT EXISTS aml_fact_jobs_by_status ON aml_fact_jobs (status, id)")
    return n


CONTEXT_TURNS = 6  # earlier turns of the session shown to the model (who is "he", what "it" is)
MAX_ATTEMPTS = 3  # a retryable model error (rate limit, 5xx, timeout) is tried this often in all
_WEEKDAY = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass(frozen=True)
class Fact:
    id: int
    agent: str
    owner: str | None
    conversation_id: str
    text: str
    source_ids: tuple[int, ...]
    ts_ms: int


@dataclass(frozen=True)
class FactJob:
    id: int
    request_id: str
    agent: str
    owner: str | None
    conversation_id: str
    message_ids: tuple[int, ...]
    status: str
    attempts: int
    error: str | None


class FactStore(SharedConnection):
    """Facts and extraction jobs in log.db. Thread-safe: one connection behind a lock."""

    # How often the worker looks for jobs nobody woke it for (None: only when woken - every job of
    # this file is queued by this process; the PostgreSQL store's are queued by any daemon, and a
    # dead daemon's come back when their lease ends).
    poll_s: float | None = None

    def __init__(self, db_path: Path) -> None:
        super().__init__(db_path, _SCHEMA)
        run_once(self._conn, self._lock, _JOBS_PER_USER, _jobs_per_user)

    def enqueue(
        self, request_id: str, agent: str, owner: str | None, conversation_id: str, message_ids: list[int], *,
        now_ms: int,
    ) -> bool:
        """Queue extraction for one Add; False when that request already has a job (a retry)."""
        with self._lock:
            cur = self._conn.execute(
                "INSERT OR IGNORE INTO aml_fact_jobs (request_id, agent, owner, conversation_id, message_ids,"
                " status, created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?)",
                (request_id, agent, owner_column(owner), conversation_id, json.dumps(message_ids), now_ms, now_ms),
            )
            return cur.rowcount == 1

    def pending(self, *, limit: int = 100) -> list[FactJob]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM aml_fact_jobs WHERE status = 'pending' ORDER BY id LIMIT ?", (limit,)
            ).fetchall()
        return [_job(r) for r in rows]

    def claim(self) -> FactJob | None:
        """The next job to run (the oldest pending), or None. One process runs this file's jobs;
        the PostgreSQL store's claim is a lease several daemons share (conversations/pg/store.py)."""
        jobs = self.pending(limit=1)
        return jobs[0] if jobs else None

    def job(self, request_id: str, owner: str | None = None) -> FactJob | None:
        with self._lock:
            row = self._conn.execute("SELECT * FROM aml_fact_jobs WHERE request_id = ? AND owner = ?",
                                     (request_id, owner_column(owner))).fetchone()
        return _job(row) if row else None

    def finish(self, job: FactJob, facts: list[tuple[str, list[int], int]], *, now_ms: int) -> None:
        """Store the job's facts ((text, source ids, ts_ms) each) and mark it done, atomically.

        Fact texts are the model's words: redacted here, the one way into `aml_facts`, so AML search
        never returns a secret the model echoed or made up."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                # A job whose user was deleted while the model was answering (conversations/aml_users.py
                # deletes the jobs with the messages) stores nothing: its facts are that user's words.
                if self._conn.execute("SELECT 1 FROM aml_fact_jobs WHERE id = ?", (job.id,)).fetchone() is None:
                    facts = []
                self._conn.executemany(
                    "INSERT INTO aml_facts (agent, owner, conversation_id, text, source_ids, ts_ms, job_id,"
                    " created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [(job.agent, owner_column(job.owner), job.conversation_id, redact(text), json.dumps(src), ts,
                      job.id, now_ms) for text, src, ts in facts],
                )
                self._conn.execute(
                    "UPDATE aml_fact_jobs SET status = 'done', attempts = attempts + 1, error = NULL,"
                    " updated_ms = ? WHERE id = ?",
                    (now_ms, job.id),
                )
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def release(self, job: FactJob) -> None:
        """`job` left to the next run, its attempts as they were (a claim here takes no lease: the job
        is still pending)."""

    def fail(self, job: FactJob, error: str, *, retry: bool, now_ms: int) -> None:
        """Record the error; the job stays pending when `retry` and attempts remain."""
        status = "pending" if retry and job.attempts + 1 < MAX_ATTEMPTS else "failed"
        with self._lock:
            self._conn.execute(
                "UPDATE aml_fact_jobs SET status = ?, attempts = attempts + 1, error = ?, updated_ms = ?"
                " WHERE id = ?",
                (status, error[:2000], now_ms, job.id),
            )

    def facts_since(self, after_id: int, *, limit: int = 1000) -> list[Fact]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM aml_facts WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit)
            ).fetchall()
        return [
            Fact(r["id"], r["agent"], normalise_owner(r["owner"]), r["conversation_id"], r["text"],
                 tuple(json.loads(r["source_ids"])), r["ts_ms"])
            for r in rows
        ]

    def counts(self) -> dict[str, int]:
        """Jobs by status plus the number of facts (for status pages and tests)."""
        with self._lock:
            out = {r["status"]: r["n"] for r in self._conn.execute(
                "SELECT status, COUNT(*) AS n FROM aml_fact_jobs GROUP BY status")}
            out["facts"] = self._conn.execute("SELECT COUNT(*) AS n FROM aml_facts").fetchone()["n"]
        return out



def _job(r: sqlite3.Row) -> FactJob:
    return FactJob(r["id"], r["request_id"], r["agent"], normalise_owner(r["owner"]), r["conversation_id"],
                   tuple(json.loads(r["message_ids"])), r["status"], r["attempts"], r["error"])


def _source(ref: int, m: StoredMessage, new: bool) -> SourceMessage:
    d = datetime.fromtimestamp(m.ts_ms / 1000, tz=UTC)
    speaker, text = split_speaker(m.content)
    return SourceMessage(ref, f"{d:%Y-%m-%d} ({_WEEKDAY[d.weekday()]})", speaker or m.role, text, new)


class FactExtractor:
    """Runs queued extraction jobs: model call, facts stored, facts indexed."""

    def __init__(
        self,
        store: FactStore,
        log: ConversationLog,
        index: MessageIndex,
        model: Callable[[], ModelClient | None],
        clock: Clock,
    ) -> None:
        self.store = store
        self.log = log
        self.index = index
        # The shared client as a provider (runtime/build/types.ModelProvider), asked at the first job:
        # building the service neither builds the client nor imports `openai`.
        self.model = model
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._run_lock = threading.Lock()  # one runner at a time (worker thread or a caller)

    def _now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)

    def enqueue(self, request_id: str, agent: str, owner: str | None, conversation_id: str, ids: list[int]) -> None:
        if ids and self.store.enqueue(request_id, agent, owner, conversation_id, ids, now_ms=self._now_ms()):
            self._wake.set()

    def run_pending(self, *, limit: int | None = None) -> int:
        """Process queued jobs now (in this thread); returns how many jobs were attempted."""
        done = 0
        with self._run_lock:
            while limit is None or done < limit:
                job = self.store.claim()
                if job is None:
                    break
                done += 1
                if not self._run(job):
                    break  # the model client is shutting down: the rest wait for the next start
        return done

    def _run(self, job: FactJob) -> bool:
        """Run one claimed job; False when the daemon's stop cancelled its model call (the job is
        released, its attempts as they were: a restart must not use up a job's tries)."""
        msgs = self.log.by_ids(list(job.message_ids))
        if not msgs:
            self.store.fail(job, "the job's messages are not in the log", retry=False, now_ms=self._now_ms())
            return True
        context = self.log.before(job.agent, job.conversation_id, msgs[0].id, owner=job.owner, limit=CONTEXT_TURNS)
        shown = [(m, False) for m in context] + [(m, True) for m in msgs]
        sources = [_source(ref, m, new) for ref, (m, new) in enumerate(shown, 1)]
        by_ref = {ref: m for ref, (m, _) in enumerate(shown, 1)}
        client = self.model()
        if client is None:  # built in model mode only; a provider without one keeps the job for a model
            self.store.fail(job, "no model is configured", retry=True, now_ms=self._now_ms())
            return True
        try:
            result = client.chat_json(
                build_messages(sources), AmlFactsResult, step="aml_facts", check=check_sources(set(by_ref))
            )
        except ModelError as exc:
            if exc.kind == "cancelled":
                log.info("AML fact extraction for request %s cut short by the stop; it runs again at the next start",
                         job.request_id)
                self.store.release(job)
                return False
            log.warning("AML fact extraction failed for request %s: %s", job.request_id, exc.message)
            self.store.fail(job, f"{exc.kind}: {exc.message}", retry=exc.retryable, now_ms=self._now_ms())
            record_failure(client, "aml_facts", exc.kind, exc.message, agent=job.agent, owner=job.owner)
            return True
        facts = []
        for f in result.facts:
            ids = [by_ref[r].id for r in dict.fromkeys(f.sources)]
            facts.append((f.text, ids, by_ref[f.sources[0]].ts_ms))
        self.store.finish(job, facts, now_ms=self._now_ms())
        try:
            self.index.catch_up(self.log)  # a fact takes its speaker from its source turn's document
            self.index.sync_facts(self.store)
        except MateclawError as exc:  # derived data: the next sync catches up
            log.warning("indexing AML facts failed: %s", exc.message)
        return True

    # -- background worker ---------------------------------------------------------------------

    def start(self) -> None:
        """Run jobs in a daemon thread as they are queued (the daemon calls this; tests need not)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="aml-facts", daemon=True)
        self._thread.start()
        self._wake.set()  # jobs left from before a restart

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.store.poll_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.run_pending()
            except Exception:  # never let one bad job kill the worker
                log.exception("AML fact worker")

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def close(self) -> None:
        self.stop()
