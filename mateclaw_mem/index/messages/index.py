"""Per-message search over the conversation log, in `workspace/.mateclaw/messages.db`.

Derived data: everything is rebuilt from `log.db` by `rebuild(log)`, and `sync(log)` catches up on
whatever the log holds beyond the stored watermark (so a crash between the log commit and indexing
loses nothing - the next sync indexes it). Its own file so it never contends with the workspace
file index in `index.db`.

`MessageIndex` composes the three parts: `storage` (the SQLite tables, written from the log and the
fact store), `view` (each owner's documents parsed into memory, kept up to date incrementally: the
candidates are the postings of the query terms) and `ranking` (BM25F and the conversation-aware
boosts, pure functions of a view and a query).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from mateclaw_mem.db import WalCheckpoints, immediate, no_busy_wait
from mateclaw_mem.index.dense import Embedder
from mateclaw_mem.index.messages.dense import MessageVectors
from mateclaw_mem.index.messages.ranking import Ranking, rank
from mateclaw_mem.index.messages.rewrite import rewrite_docs
from mateclaw_mem.index.messages.storage import FACT_BASE, MessageStorage
from mateclaw_mem.index.messages.turns import parse_doc
from mateclaw_mem.index.messages.view import OwnerView
from mateclaw_mem.index.sources import FactSource, MessageSource

log = logging.getLogger(__name__)

# A view parsed aside sleeps a moment every this many docs (~0.5 ms of work). A thread waiting for
# the interpreter (an Add, between two SQLite calls) otherwise waits out most of the 5 ms switch
# interval at every call it makes: at 30,000 turns an Add during the parse took 45 ms at the median
# (21-25 ms with these pauses and 500-row reads; ~1.3 ms with nothing parsing), for ~10% more parse.
_YIELD_EVERY = 128


def _yield() -> None:
    time.sleep(0.0001)  # sleep(0) gives the interpreter back only to a thread that already asked for it


@dataclass(frozen=True)
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

    _MAX_VIEWS = 64  # owners kept parsed in memory (least recently used evicted)
    _READ_BATCH = 500  # documents read per hold of the lock while a view is parsed aside
    # `warm_recent` stops adding owners past this many turns in all (the latest owner is always
    # parsed): a view holds ~10 KB a turn, and a server of many long histories would otherwise fill
    # its memory at every start with views nobody may search before they are evicted.
    _WARM_TURNS = 60_000
    _WARM_OWNERS = 8

    def __init__(self, db_path: Path, ranking: Ranking | None = None, *, embedder: Embedder | None = None,
                 dense_weight: float = 0.0) -> None:
        self.path = db_path
        self.ranking = ranking or Ranking()
        self._storage = MessageStorage(db_path)
        self._lock = self._storage.lock
        self._views: OrderedDict[tuple[str, str | None], OwnerView] = OrderedDict()
        self._parsing: dict[tuple[str, str | None], threading.Event] = {}  # views `warm` is parsing, set when done
        # Embeddings configured: turn vectors fused into the ranking (messages/dense.py); else None
        # and the model-free ranking runs exactly as without this code.
        self.dense = MessageVectors(self._storage, embedder, dense_weight) if embedder and dense_weight > 0 else None

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

    def sync_facts(self, facts: FactSource, *, batch: int = 1000) -> int:
        """Index every stored fact after the fact watermark (call after `sync`)."""
        return self._storage.sync_facts(facts, batch=batch)

    def rebuild(self, log: MessageSource, facts: FactSource | None = None, *, batch: int = 1000) -> int:
        """Index the whole log (and the facts) again, built aside and swapped in at once."""
        done = self._storage.rebuild(log, facts, batch=batch)
        with self._lock:
            self._views.clear()  # a new generation: every view would be parsed afresh anyway
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
            self._storage.committed()
            self._views.pop((agent, owner or None), None)  # same counts, other words: parse afresh
        return done

    # ------------------------------------------------------------------ views

    def warm(self, agent: str, owner: str | None, stop: threading.Event | None = None) -> bool:
        """Parse the owner's view if it is not in memory, outside the lock: a long history takes
        seconds (2-3 s at 30,000 turns), during which Adds and every other owner's searches go on.
        A second caller for the same owner waits for the first one's view instead of parsing too.
        Returns whether this call parsed one (False: already there, nothing stored, or `stop` set)."""
        key = (agent, owner or None)
        if self._lock._is_owned():  # type: ignore[attr-defined]  # (threading.Condition asks RLocks the same)
            return False  # a caller holding the lock would wait for a parse that needs it: `_view` parses
        with self._lock:
            if key in self._views:
                return False
            parsing = self._parsing.get(key)
            if parsing is None:
                parsing = self._parsing[key] = threading.Event()
                mine = True
            else:
                mine = False
        if not mine:
            parsing.wait()
            return False
        view = None
        try:
            view = self._parse_aside(*key, stop)
        finally:
            try:
                with self._lock:
                    del self._parsing[key]
                    # Not when the index was rebuilt or rewritten meanwhile: `_view` parses it afresh.
                    if view is not None and key not in self._views and \
                            view.generation == self._storage.summary(*key)["generation"]:
                        self._install(key, view)
            finally:
                parsing.set()  # whatever happened: a waiter goes on (and parses, if nothing was installed)
        return view is not None

    def warm_recent(self, stop: threading.Event | None = None) -> int:
        """`warm` the owners with the latest messages, up to `_WARM_OWNERS` of them and `_WARM_TURNS`
        turns in all (the daemon runs this in the background after it starts: a search right after a
        restart finds its view parsed, or waits only for the rest of it). Returns how many views were
        parsed."""
        with self._lock:
            owners = self._storage._conn.execute(
                "SELECT agent, owner, COUNT(*) AS n FROM docs WHERE id < ? GROUP BY agent, owner"
                " ORDER BY MAX(id) DESC LIMIT ?", (FACT_BASE, min(self._WARM_OWNERS, self._MAX_VIEWS))).fetchall()
        done = turns = 0
        for k, (agent, owner, n) in enumerate(owners):
            turns += n
            if (stop is not None and stop.is_set()) or (k and turns > self._WARM_TURNS):
                break
            done += self.warm(agent, owner or None, stop)
        return done

    def _parse_aside(self, agent: str, owner: str | None, stop: threading.Event | None) -> OwnerView | None:
        """A new view of the owner's documents up to the last ones committed when it starts, read a
        batch per hold of the lock and parsed without it. What is added meanwhile (and the tail turns
        whose `nb` field it grew) the next `_view` folds in, as after any Add."""
        store = self._storage
        with self._lock:
            row = store.summary(agent, owner)
        if not row["last"] and row["last_fact"] == FACT_BASE:
            return None
        view = OwnerView()
        view.generation = row["generation"]
        for after, last in ((0, row["last"]), (FACT_BASE, row["last_fact"])):  # the turns, then the facts
            while after < last:
                if stop is not None and stop.is_set():
                    return None
                with self._lock:
                    rows = store.doc_rows(agent, owner, "d.id > ? AND d.id <= ?", (after, last), self._READ_BATCH)
                if not rows:
                    break
                # Folded in a batch at a time, as Adds are: each batch's per-turn counts are freed (the
                # postings hold them) before the next is parsed, so the parse's peak is one batch's.
                docs = []
                for k in range(0, len(rows), _YIELD_EVERY):
                    docs += [parse_doc(r) for r in rows[k : k + _YIELD_EVERY]]
                    _yield()
                view.apply(docs)
                _yield()
                after = rows[-1]["id"]
        return view  # stamp None: the next `_view` checks it against the file

    def _install(self, key: tuple[str, str | None], view: OwnerView) -> None:
        self._views[key] = view
        while len(self._views) > self._MAX_VIEWS:
            self._views.popitem(last=False)

    # ------------------------------------------------------------------ search

    def _view(self, agent: str, owner: str | None) -> OwnerView | None:
        """The owner's parsed documents, brought up to date. Call with the lock held."""
        key = (agent, owner)
        view = self._views.get(key)
        store = self._storage
        # Nothing committed since the view was last checked (by us: own writes; by any other
        # connection: data_version): skip the per-owner count query, most searches take this path.
        stamp = store.stamp()
        if view is not None and view.stamp == stamp:
            self._views.move_to_end(key)
            return view
        row = store.summary(agent, owner)
        if not row["last"] and row["last_fact"] == FACT_BASE:
            return None
        if view is not None and view.generation != row["generation"]:
            view = None  # rebuilt or rewritten (perhaps by another process): parse afresh
        if view is not None and (view.last_id, view.last_fact) == (row["last"], row["last_fact"]):
            view.stamp = stamp
            self._views.move_to_end(key)
            return view
        if view is not None and row["last"] >= view.last_id and row["last_fact"] >= view.last_fact:
            # Incremental: the rows after the view's last ids (two index ranges), plus each touched
            # conversation's previous tail turn (its `nb` field grew when the next turn arrived).
            new = [parse_doc(r) for r in (
                store.doc_rows(agent, owner, "d.id > ? AND d.id < ?", (view.last_id, FACT_BASE))
                + store.doc_rows(agent, owner, "d.id > ?", (view.last_fact,)))]
            tails = {view.tail[c] for c in {d.conversation_id for d in new if d.id < FACT_BASE} if c in view.tail}
            marks = ",".join("?" * len(tails))
            grown = [parse_doc(r) for r in store.doc_rows(agent, owner, f"d.id IN ({marks})", tuple(tails))
                     ] if tails else []
            view.apply(grown + new)
            view.stamp = stamp
            self._views.move_to_end(key)
            return view
        # Fewer documents than the view holds without a new generation (or another process rewrote
        # the index since `warm`): start over, here.
        view = OwnerView()
        view.generation = row["generation"]
        view.apply([parse_doc(r) for r in store.doc_rows(agent, owner, "1", ())])
        view.stamp = stamp
        self._install(key, view)
        return view

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
        self.warm(agent, owner)  # a view not in memory is parsed without the lock
        # The rest of the search holds the lock: the view is updated in place by the next search
        # after an Add, and ranking is pure Python (GIL-bound), so there is no parallelism to lose.
        with self._lock:
            view = self._view(agent, owner)
            if view is None:
                return []
            top = rank(view, query, options, self.ranking, limit=limit)
            if q is not None and self.dense is not None:
                top = self.dense.fuse(agent, owner, view, q, top, limit)
            return [self._hit(view, agent, owner, s, i) for s, i in top]

    @staticmethod
    def _hit(view: OwnerView, agent: str, owner: str | None, score: float, doc_id: int) -> Hit:
        d = view.by_id[doc_id]
        return Hit(id=doc_id, agent=agent, owner=owner, conversation_id=d.conversation_id, role=d.role,
                   speaker=d.speaker, content=d.content, ts_ms=d.ts_ms, score=round(score, 6))

    def close(self) -> None:
        self._storage.close()

