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
import uuid
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from mateclaw_mem.db import WalCheckpoints, immediate, no_busy_wait, owner_column
from mateclaw_mem.index.dense import Embedder
from mateclaw_mem.index.messages import postings
from mateclaw_mem.index.messages.dense import MessageVectors
from mateclaw_mem.index.messages.disk_view import ByteCache, open_view
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
                 dense_weight: float = 0.0, cache_bytes: int = DEFAULT_CACHE_BYTES, log_db: Path | None = None) -> None:
        """`log_db`: the conversation log this file indexes, whose messages' text the hits carry
        (storage.MessageStorage; None: `log.db` beside `db_path`)."""
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
        self._indexer = _Indexer(self)

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

    def sync(self, log: MessageSource, *, batch: int = 1000) -> int:
        """Index every log message after the watermark; returns how many were indexed."""
        return self._storage.sync(log, batch=batch)

    # How far (in log ids: about messages) this process's Adds may run ahead of the index. The
    # indexing is deferred, not saved: Adds sent back to back are answered four times faster than
    # they are indexed, and the first search after them catches up on whatever is left (~0.8 s
    # after 400 LoCoMo Adds without a bound). Past the bound an Add indexes what is over it before
    # answering, as every Add did before; ~200 messages is ~10 Adds, ~35 ms for that first search.
    MAX_LAG = 200

    def sync_later(self, log: MessageSource, logged_to: int = 0, *, wait: bool = True) -> None:
        """`sync` on this index's own thread, soon (an Add, once its messages - up to id `logged_to` -
        are in the log); first, here (unless not `wait`), whatever puts the index more than
        `MAX_LAG` behind."""
        self._indexer.logged(logged_to)
        if wait and logged_to - self._storage.indexed_to > self.MAX_LAG:
            self._storage.sync(log, batch=_Indexer.BATCH, upto=logged_to - self.MAX_LAG)
        self._indexer.want(log)

    def lagging(self, messages: int) -> bool:
        """Whether an Add of `messages` would index before answering (`sync_later`): one on the event
        loop must not (AmlService.add_json_now), so it goes to a worker thread. (Another process's
        Adds between, which move the ids on, can still make it index a little there.)"""
        return self._indexer.logged_to + messages - self._storage.indexed_to > self.MAX_LAG

    def catch_up(self, log: MessageSource) -> int:
        """`sync` when the log holds anything past the watermark (before every read that answers
        from the index: an acknowledged Add is searchable even while `sync_later` has not run). Two
        index seeks when nothing is due. Returns how many were indexed here."""
        return self.sync(log) if log.since(self.watermark(), limit=1) else 0

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
        return [Hit(id=i, agent=agent, owner=owner, conversation_id=r[1], role=r[2], speaker=r[3], content=r[4],
                    ts_ms=r[5], score=round(s, 6)) for s, i in top if (r := rows.get(i)) is not None]

    def delete_owner(self, agent: str, owner: str) -> int:
        """Every document of one owner deleted (conversations/aml_users.py); how many."""
        return delete_owner(self.path, agent, owner)

    def close(self) -> None:
        self._indexer.stop()
        self._storage.close()


class _Indexer(Worker):
    """`MessageIndex.sync` on a thread of its own, started by the first `want`: indexing an Add's 20
    turns is ~3 ms of Python, ten times what storing them in the log costs, and the Add need not
    wait for it (`catch_up` makes every read index what this thread has not yet). A kill loses
    nothing: the log holds the messages, and the next start (or read) indexes them."""

    BATCH = 200  # log messages per write transaction
    name = "aml-index"

    def __init__(self, index: MessageIndex) -> None:
        super().__init__()
        self.index = index
        self._log: MessageSource | None = None
        self.logged_to = 0  # the last log id an Add of this process handed over

    def logged(self, last_id: int) -> None:
        with self._cv:  # (Adds on several threads: no smaller id written over a larger one)
            self.logged_to = max(self.logged_to, last_id)

    def want(self, source: MessageSource) -> None:
        with self._cv:
            self._log = source
            self._wake()

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._log is None and not self._stop:
                    self._cv.wait()
                if self._stop or self._log is None:
                    return
                source, self._log = self._log, None
            try:
                self.index.sync(source, batch=self.BATCH)
            except Exception:  # derived data: the next Add, search or start catches up
                log.exception("indexing the conversation log's tail failed")
