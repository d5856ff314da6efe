"""Per-message search over the conversation log, in `workspace/.mateclaw/messages.db`.

Derived data: everything is rebuilt from `log.db` by `rebuild(log)`, and `sync(log)` catches up on
whatever the log holds beyond the stored watermark (so a crash between the log commit and indexing
loses nothing - the next sync indexes it). Its own file so it never contends with the workspace
file index in `index.db`.

An Add answers once its messages are in the log (`sync_later`: a thread of this index folds them in
afterwards); whatever reads the index for an answer calls `catch_up(log)` first, which indexes the
log's tail itself when that thread has not yet: so a message is searchable once acknowledged.

`MessageIndex` composes the three parts: `storage` (the SQLite tables, written from the log and the
fact store, the postings among them: messages/postings.py), `disk_view` (what one search reads of
those tables, through a cache bounded in bytes) and `ranking` (BM25F and the conversation-aware
boosts, pure functions of a view and a query).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mateclaw_mem.db import WalCheckpoints, immediate, no_busy_wait, owner_column
from mateclaw_mem.index.dense import Embedder
from mateclaw_mem.index.messages import postings
from mateclaw_mem.index.messages.dense import MessageVectors
from mateclaw_mem.index.messages.disk_view import ByteCache, open_view
from mateclaw_mem.index.messages.index_process import IndexProcess, apply_wrote
from mateclaw_mem.index.messages.ranking import Ranking, rank
from mateclaw_mem.index.messages.rewrite import rewrite_docs
from mateclaw_mem.index.messages.storage import MessageStorage, delete_owner
from mateclaw_mem.index.messages.worker import Worker
from mateclaw_mem.index.sources import FactSource, MessageSource

log = logging.getLogger(__name__)

DEFAULT_CACHE_BYTES = 64 << 20  # `aml.cache-bytes`


# Not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__, ~2 us a hit
# against ~0.7 - a tenth of a small user's search at 100 hits (nothing changes or hashes a Hit).
@dataclass(slots=True)
class Hit:
    id: int
    agent: str
    owner: str | None
    conversation_id: str
    role: str
    speaker: str | None
    content: str
    ts_ms: int
    score: float


class MessageIndex:
    """Thread-safe (one connection behind a lock); `sync` is idempotent and crash-safe."""

    batch_bodies = False  # DiskView's: a query costs microseconds here

    def __init__(self, db_path: Path, ranking: Ranking | None = None, *, embedder: Embedder | None = None,
                 dense_weight: float = 0.0, cache_bytes: int = DEFAULT_CACHE_BYTES, log_db: Path | None = None,
                 index_process: bool = False) -> None:
        """`log_db`: the conversation log this file indexes, whose messages' text the hits carry
        (storage.MessageStorage; None: `log.db` beside `db_path`). `index_process`: Adds are indexed
        by a child process (`aml.index-process`, messages/index_process.py), not a thread of this one."""
        self.path = db_path
        self.ranking = ranking or Ranking()
        self._storage = MessageStorage(db_path, log_db)
        self._lock = self._storage.lock
        # Postings and document rows read by searches, bounded in bytes; never needed for an answer.
        self.cache = ByteCache(cache_bytes)
        self._storage.cache = self.cache
        # Embeddings configured: turn vectors fused into the ranking (messages/dense.py); else None
        # and the model-free ranking runs exactly as without this code.
        self.dense = MessageVectors(self._storage, embedder, dense_weight) if embedder and dense_weight > 0 else None
        self._indexer = _Indexer(self, process=index_process)

    @property
    def lock(self) -> threading.RLock:
        """The lock every use of the index holds (`without_waiting` callers take it first)."""
        return self._lock

    def without_waiting(self) -> AbstractContextManager[None]:
        """Hold `lock` for this: a locked index file raises at once (db.no_busy_wait)."""
        return no_busy_wait(self._storage._conn)

    def hand_checkpoints_to(self, checkpoints: WalCheckpoints) -> None:
        """Let `checkpoints` checkpoint the index file in the background (see db.WalCheckpoints)."""
        checkpoints.adopt(self._storage._conn, self._lock, self.path)
        self._storage.checkpoints = checkpoints

    def redacted_on_migration(self) -> int | None:
        """Documents the one-time migration redacted in place (for `status`); None: not run."""
        return self._storage.redacted_on_migration()

    def stale_tokenizer(self) -> str | None:
        """The tokenizer this index was built with when it is not the current one, else None."""
        return self._storage.stale_tokenizer()

    def watermark(self) -> int:
        return self._storage.watermark()

    def sync(self, log: MessageSource, *, batch: int = 1000, committed: Callable[[], None] | None = None) -> int:
        """Index every log message after the watermark; returns how many were indexed. `committed`
        is called after each batch's commit."""
        return self._storage.sync(log, batch=batch, committed=committed)

    # How far (in log ids: about messages) this process's Adds may run ahead of the index. The
    # indexing is deferred, not saved: Adds sent back to back are answered four times faster than
    # they are indexed, and the first search after them catches up on whatever is left (~0.8 s
    # after 400 LoCoMo Adds without a bound). Past the bound an Add indexes what is over it before
    # answering, as every Add did before; ~200 messages is ~10 Adds, ~35 ms for that first search.
    MAX_LAG = 200

    # How long an Add past `MAX_LAG` waits for the index process to catch up before indexing itself.
    LAG_WAIT = 5.0

    def sync_later(self, log: MessageSource, logged_to: int = 0, *, wait: bool = True) -> None:
        """`sync` off this call's path, soon (an Add, once its messages - up to id `logged_to` - are
        in the log); first, here (unless not `wait`), whatever puts the index more than `MAX_LAG`
        behind: the index process's to do while this waits, else done here."""
        self._indexer.logged(logged_to)
        self._indexer.want(log)
        if wait and logged_to - self._storage.indexed_to > self.MAX_LAG:
            upto = logged_to - self.MAX_LAG
            if not self._indexer.wait_indexed(upto, self.LAG_WAIT):
                self._storage.sync(log, batch=_Indexer.BATCH, upto=upto)

    def lagging(self, messages: int) -> bool:
        """Whether an Add of `messages` would index before answering (`sync_later`): one on the event
        loop must not (AmlService.add_json_now), so it goes to a worker thread. (Another process's
        Adds between, which move the ids on, can still make it index a little there.)"""
        return self.lag() + messages > self.MAX_LAG

    def lag(self) -> int:
        """How far (in log ids) this process's Adds are ahead of the index, as last seen."""
        return self._indexer.logged_to - self._storage.indexed_to

    def catch_up(self, log: MessageSource) -> int:
        """`sync` when the log holds anything past the watermark (before every read that answers
        from the index: an acknowledged Add is searchable even while `sync_later` has not run). Two
        index seeks when nothing is due. Returns how many were indexed here.

        While the index process is indexing this process's Adds, this waits for it first (briefly:
        it is one sync behind at most) rather than indexing beside it: the search then finds what the
        child wrote already told to its cache, instead of a version it does not know (a cold search)."""
        if not log.since(self.watermark(), limit=1):
            return 0
        if self._indexer.wait_indexed(self._indexer.logged_to, self.LAG_WAIT) \
                and not log.since(self.watermark(), limit=1):
            return 0  # (the child did it all; another process's Adds would be left, and done below)
        return self.sync(log)

    def sync_facts(self, facts: FactSource, *, batch: int = 1000) -> int:
        """Index every stored fact after the fact watermark (call after `sync`)."""
        return self._storage.sync_facts(facts, batch=batch)

    def rebuild(self, log: MessageSource, facts: FactSource | None = None, *, batch: int = 1000) -> int:
        """Index the whole log (and the facts) again, built aside and swapped in at once."""
        done = self._storage.rebuild(log, facts, batch=batch)
        self.cache.clear()  # (a new generation: nothing cached would be read again anyway)
        return done

    def rewrite(self, agent: str, owner: str | None, changes: dict[int, str]) -> int:
        """Documents whose log text was rewritten in place (a forget), {doc id: new text}: turns by
        message id, facts by FACT_BASE + fact id. Returns how many documents changed."""
        if not changes:
            return 0
        with self._lock:
            with immediate(self._storage._conn, self._lock) as conn:
                done = rewrite_docs(conn, changes)
                # Other processes' views hold the old words: a new generation makes them parse
                # afresh (the counts and last ids a rewrite leaves alone would not).
                conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('generation', ?)", (uuid.uuid4().hex,))
                postings.derive(conn, agent, owner, cache=self.cache)  # other words: the owner's postings afresh
            self._storage.committed()
        return done

    # ------------------------------------------------------------------ search

    def search(
        self,
        agent: str,
        owner: str | None,
        query: str,
        *,
        limit: int,
        options: Iterable[str] = (),
    ) -> list[Hit]:
        """The owner's messages best matching `query`, best first, at most `limit` (owner None:
        the agent's messages that have no owner; "" is taken to mean the same)."""
        if limit <= 0:
            return []
        self._searching()
        owner = owner or None
        q = None
        if self.dense is not None:
            try:  # before taking the lock: the embedding call is the slow part
                q = self.dense.query(query)
            except Exception as exc:
                log.warning("AML search: embedding the query failed (%s); keyword ranking only", exc)
        # The index's one connection serves this search under the lock; a search reads only its
        # terms' postings and its candidates' rows (messages/disk_view.py), milliseconds at any history.
        with self._lock:
            if self._storage._standin:  # (the log had no table yet when this index was opened)
                self._storage.texts()
            conn = self._storage._conn
            # One read transaction: every statement of the search sees the same snapshot, so a merge
            # committed meanwhile (this process's merger or another process's) is seen wholly or
            # not at all - never its segments beside the delta rows it folded in.
            # (The dense side and the hits read documents, which no merge touches; the dense side
            # may write its vectors: after the read transaction.)
            conn.execute("BEGIN")
            try:
                view = open_view(conn, agent, owner_column(owner), self.cache, batch_bodies=self.batch_bodies)
                if view is None:
                    return []
                top = rank(view, query, options, self.ranking, limit=limit)
            finally:
                conn.execute("COMMIT")
            if q is not None and self.dense is not None:
                top = self.dense.fuse(agent, owner, view.contents(), q, top, limit)
            rows = view.hit_rows([i for _, i in top])
        # (By position, in `Hit`'s order: keywords were ~0.35 us more a hit, up to 100 a search.)
        return [Hit(i, agent, owner, r[1], r[2], r[3], r[4], r[5], round(s, 6))
                for s, i in top if (r := rows.get(i)) is not None]

    def _searching(self) -> None:
        """At each search's start: an idle index process ends now (`_Indexer.searched`)."""
        self._indexer.searched()

    def delete_owner(self, agent: str, owner: str) -> int:
        """Every document of one owner deleted (conversations/aml_users.py); how many."""
        return delete_owner(self.path, agent, owner)

    def close(self) -> None:
        self._indexer.stop()
        self._storage.close()


class _Indexer(Worker):
    """`MessageIndex.sync` off the Add's path, started by the first `want`: indexing an Add's 20
    turns is ~3 ms of Python, ten times what storing them in the log costs, and the Add need not
    wait for it (`catch_up` makes every read index what this has not yet). A kill loses nothing:
    the log holds the messages, and the next start (or read) indexes them.

    With `process` (`aml.index-process`), a stream of Adds is indexed by a child process
    (messages/index_process.py), started once this thread has spent `BUSY` of the last `WINDOW`
    seconds indexing: from then on this thread only wakes it, and indexes itself again after it
    died. A few Adds a minute (a desktop assistant) never start one: indexing them here costs a few
    milliseconds, a child a third of a second of start-up. The child ends after `IDLE` s without
    an Add."""

    # Log messages per write transaction. An Add past the lag bound waits for the batch under way
    # (the storage's lock is taken per batch): 60, not 200, so that wait stays a few ms (back-to-back
    # LoCoMo Adds: p95 8.8 -> 7.0 ms, as before the thread made way for Adds) for ~10% more CPU.
    BATCH = 60
    WINDOW, BUSY = 1.0, 0.2  # s: a child process once indexing here took BUSY s of the last WINDOW
    # s without an Add before the child process ends: its memory counts against the daemon's cache
    # while it runs (runtime/malloc.bound_cache), and a new stream starts another in ~0.3 s.
    IDLE = 2.0
    # ... or after this long, once a search finds it caught up (`searched`): while it lives its memory
    # counts against the daemon's byte cache (runtime/malloc.bound_cache), and the searches that follow
    # a stream of Adds (an import, then questions) found the cache squeezed to a few MB for those 2 s.
    SEARCH_QUIET = 0.1
    RETRY = 60.0  # s after a child process died unasked before another is started
    name = "aml-index"

    def __init__(self, index: MessageIndex, *, process: bool = False) -> None:
        super().__init__()
        self.index = index
        self._log: MessageSource | None = None
        self.logged_to = 0  # the last log id an Add of this process handed over
        self.process = process
        self._child: IndexProcess | None = None
        self._source: MessageSource | None = None  # the log last handed over (the child's wake-ups)
        self._last_want = 0.0
        self._searched = False  # a search found the child idle (`searched`): it ends now
        self._died_at = -self.RETRY
        self._window_at, self._busy = 0.0, 0.0  # the current window's start, and the s indexed here in it
        self._progress = threading.Condition()  # notified at each watermark the child reports, each batch here
        self._syncing = False  # this thread is indexing (an Add past the lag bound waits for its batches)

    def logged(self, last_id: int) -> None:
        with self._cv:  # (Adds on several threads: no smaller id written over a larger one)
            self.logged_to = max(self.logged_to, last_id)

    def want(self, source: MessageSource) -> None:
        self._last_want = time.monotonic()
        self._searched = False
        child = self._child
        if child is not None and child.ready and source is self._source and child.poke():
            return  # (no wake-up of this thread: the child reads the log itself)
        with self._cv:
            self._log = self._source = source
            self._wake()

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._log is None and not self._stop:
                    left = self.idle_left()
                    if left is not None and left <= 0:
                        break
                    self._cv.wait(left)
                if self._stop:
                    return
                source, self._log = self._log, None
            if source is None:  # idle: the child ends (`_exited` is told, as expected)
                self._end_child()
                continue
            child = self._child_for(source)
            if child is not None and child.ready and child.poke():
                continue
            t0, cpu = time.monotonic(), time.thread_time()
            self._syncing = True
            try:
                self.index.sync(source, batch=self.BATCH, committed=self._progressed)
            except Exception:  # derived data: the next Add, search or start catches up
                log.exception("indexing the conversation log's tail failed")
            finally:
                self._syncing = False
                self._progressed()
            if time.monotonic() - self._window_at > self.WINDOW:
                self._window_at, self._busy = t0, 0.0
            # Its CPU, not the time it took: the pauses it makes for Adds (worker.give_way) would
            # have counted, and started a child for a burst of 50 Adds (its start then slowed them).
            self._busy += time.thread_time() - cpu

    def _progressed(self) -> None:
        with self._progress:
            self._progress.notify_all()

    def courteous(self) -> bool:
        """It makes way for requests (worker.give_way) only while the index is less than half its lag
        bound behind: making way through a burst, it fell behind until Adds past the bound waited for
        whole batches of its indexing (1,000-message burst: Add p95 3 -> 20 ms)."""
        return self.index.lag() < self.index.MAX_LAG // 2

    def idle_left(self) -> float | None:
        """s until the child has gone `IDLE` s without an Add (None: no child). Counted from the last
        Add, not from this thread's last wake-up: an Add wakes the child, not this thread, and waiting
        `IDLE` from whenever it last woke kept a child up to twice `IDLE` after a stream's end."""
        if self._child is None:
            return None
        return (self.SEARCH_QUIET if self._searched else self.IDLE) - (time.monotonic() - self._last_want)

    def searched(self) -> None:
        """A search is under way: a child that has indexed every Add of this process and had none for
        `SEARCH_QUIET` s ends now, not `IDLE` s after the last Add (a stream of Adds resumed starts
        another, as after `IDLE`). Cheap when there is no child: a search calls it every time."""
        child = self._child
        if (child is None or self._searched or not child.ready
                or self.index._storage.indexed_to < self.logged_to):
            return
        with self._cv:
            self._searched = True
            self._wake()

    # -- the child process ---------------------------------------------------------------------------

    def _child_for(self, source: MessageSource) -> IndexProcess | None:
        """The child indexing `source` (started here if need be), or None: not configured, another
        log than the index's own (a test's), or one died less than `RETRY` s ago."""
        if not self.process:
            return None
        if self._child is not None:
            return self._child
        path = getattr(source, "path", None)
        storage = self.index._storage
        if not isinstance(path, Path) or path.resolve() != storage.log_db.resolve():
            return None
        if self._busy < self.BUSY or time.monotonic() - self._died_at < self.RETRY:
            return None
        child = IndexProcess(self.index.path, storage.log_db, self._heard, self._exited)
        try:
            child.start()
        except Exception as exc:  # (no interpreter to run: an embedded one, a sandbox that forbids it)
            log.warning("the index process could not start (%s); indexing on the daemon's own thread", exc)
            self._died_at = time.monotonic()
            return None
        with self._cv:
            self._child = child
        return child

    def _heard(self, msg: dict[str, Any]) -> None:
        """A message of the child (its reader thread)."""
        if "wrote" in msg:
            apply_wrote(self.index.cache, msg["wrote"])
        if "to" in msg:
            storage = self.index._storage
            storage.indexed_to = max(storage.indexed_to, int(msg["to"]))
            with self._progress:
                self._progress.notify_all()
        if msg.get("ready"):
            with self._cv:  # what was handed over while it started is its first sync
                if self._source is not None and not self._stop:
                    self._log = self._source
                    self._wake()

    def _exited(self, child: IndexProcess, code: int | None, expected: bool) -> None:
        with self._cv:
            if self._child is not child:
                return  # (an idle one ended after its successor started)
            self._child = None
            if not expected:
                log.warning("the index process ended (exit %s); indexing on the daemon's own thread, another"
                            " process in %g s", code, self.RETRY)
                self._died_at = time.monotonic()
                if self._source is not None and not self._stop:
                    self._log = self._source  # what it had not done, done here
                    self._wake()
        with self._progress:
            self._progress.notify_all()

    def _end_child(self) -> None:
        with self._cv:
            child, self._child = self._child, None
        if child is not None:
            child.stop()

    def wait_indexed(self, upto: int, timeout: float) -> bool:
        """Wait (up to `timeout` s) for the child, or this thread while it is indexing, to bring the
        index to `upto`; False at once when neither is at it (the caller indexes), or when it did not
        get there in time. (Waiting for this thread's batches rather than for the storage's lock: a
        thread that lets a lock go and takes it again at once keeps it from whoever waits for it.)"""
        storage = self.index._storage
        deadline = time.monotonic() + timeout
        with self._progress:
            while storage.indexed_to < upto:
                left = deadline - time.monotonic()
                working = self._syncing or (self._child is not None and self._child.ready)
                if not working or left <= 0:
                    return False
                self._progress.wait(left)
        return True

    def stop(self) -> None:
        super().stop()
        self._end_child()
