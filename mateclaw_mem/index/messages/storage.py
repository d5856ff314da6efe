"""The SQLite side of the message index: the `docs` table in `messages.db` (and the postings,
messages/postings.py), kept in step with the conversation log (and the fact store), and the rebuild
built aside.

Each message is one document with fields (all tokenized by `index.tokenizer`; no table keeps them:
messages/docfields.py makes them again from the text and the conversation's neighbours):

- `body`: the message's own text (without its "Speaker:" prefix).
- `ctx`:  the turn just before it, when that turn is another speaker's question - an answer such
  as "Luna and Oliver!" shares no words with "What are your cats called?".
- `nb`:   the neighbouring turns (previous and next), low weight, for recall.
- `dt`:   month, year and weekday of the message time, so "in May 2023" can match.

Owners: `None` is "no owner" everywhere above this module; the tables store it as "" (`owner_column`).

One copy of each turn (issue 36.2): its text is the log's. log.db is attached to this file's
connection (as `log`: read here, never written) and `docs.content` is '' for a turn; a document's
text is read through `docfields.TEXT`. A fact keeps its text here (the fact store is another file).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from mateclaw_mem.db import WalCheckpoints, connect, immediate, migrated, owner_column, run_once
from mateclaw_mem.index.messages import docfields, postings
from mateclaw_mem.index.messages.delta import pack_segment, unpack_segment
from mateclaw_mem.index.messages.docfields import body_tokens, date_tokens
from mateclaw_mem.index.messages.fields import FACT_BASE, _is_question, split_speaker
from mateclaw_mem.index.messages.worker import Worker, give_way
from mateclaw_mem.index.sources import FactSource, LoggedMessage, MessageSource, StoredFact
from mateclaw_mem.index.tokenizer import TOKENIZER_VERSION, tokenize
from mateclaw_mem.redaction import redact

log = logging.getLogger(__name__)

_META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"


def _tables(s: str = "") -> str:
    """The derived tables; `s` is a suffix for a copy built aside (see `MessageStorage.rebuild`)."""
    return f"""
CREATE TABLE IF NOT EXISTS docs{s} (
    id INTEGER PRIMARY KEY,            -- the log's message id
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    role TEXT NOT NULL,
    speaker TEXT,                      -- parsed "Name:" prefix, NULL when there was none
    content TEXT NOT NULL,             -- '': the log's message of this id (docfields.TEXT); a fact's text
    ts_ms INTEGER NOT NULL,
    is_question INTEGER NOT NULL,
    body_len INTEGER NOT NULL,
    ctx_len INTEGER NOT NULL,
    nb_len INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS docs_by_conversation{s} ON docs{s} (agent, owner, conversation_id, id);
"""


_SCHEMA = _META + _tables()
_REDACTED = "redacted:messages.db"  # `meta` marker (and count) of the one-time redaction in place
_POSTINGS = "migrated:postings-2"  # `meta` marker (and count) of the one-time build of the postings
# Older files kept every document's field tokens in a table `fts` (an FTS5 table at first, a plain
# one later) that search no longer read: dropped once (its freed pages zeroed: `run_once`), then the
# file compacted. Nothing has to be rebuilt: the fields follow from `docs` (docfields.py).
_NO_FTS = "migrated:no-fts"
# Segments written before they were stored gap-encoded and narrow in one blob (`delta.pack_segment`):
# read as they are, and rewritten once so an older file shrinks too (then compacted).
_PACKED = "migrated:packed-postings"
# Files that kept a copy of every turn's text in `docs.content`: emptied where the log holds the same
# text (checked row by row), then the file compacted; a turn whose log text differs keeps its own.
_ONE_COPY = "migrated:text-from-log"
# An index of the documents by (agent, owner, id) that only a rebuild of one owner's postings read
# (30 B a message): dropped once; the conversation index answers (agent, owner) and `postings.derive`
# orders the ids itself.
_NO_OWNER_INDEX = "migrated:no-docs-by-owner"
LOG_PAGE_CACHE_KIB = 256  # SQLite's page cache for the attached log (`_attach_log`; its default is ~2,000)


@dataclass(frozen=True)
class _Turn:
    """A stored turn fed back through `_add_batch` (fits `LoggedMessage`)."""

    id: int
    agent: str
    owner: str
    conversation_id: str
    role: str
    content: str
    ts_ms: int
    memoryless: bool = False


@dataclass
class _Pending:
    """A row being indexed in this batch (its `nb` may still grow when the next turn arrives)."""

    msg: LoggedMessage
    speaker: str | None
    body: list[str]
    ctx: list[str]
    nb: list[str]
    is_question: bool


class _Merger(Worker):
    """Folds owners' unmerged posting rows (messages/delta.py) into their segments on a thread of
    its own, so no Add pays for a merge: at a quiet moment (no write for `QUIET` s, or after
    `PATIENCE` s of steady writes), one owner per write transaction - a search reads the rows and
    the segments in one snapshot, before or after it, and a kill leaves the rows unmerged."""

    QUIET, PATIENCE = 0.02, 0.5
    name = "aml-merge"

    def __init__(self, storage: MessageStorage) -> None:
        super().__init__()
        self.storage = storage
        self._due: dict[int, float] = {}  # okey -> when it was found due

    def want(self, okeys: set[int]) -> None:
        with self._cv:
            if self._stop:
                return
            now = time.monotonic()
            for k in okeys:
                self._due.setdefault(k, now)
            self._wake()

    def _next(self) -> int | None:
        with self._cv:
            while not self._due and not self._stop:
                self._cv.wait()
            if self._stop:
                return None
            okey, since = min(self._due.items(), key=lambda kv: kv[1])
            while not self._stop:
                now = time.monotonic()
                if now - self.storage.last_write >= self.QUIET or now - since >= self.PATIENCE:
                    break
                self._cv.wait(self.QUIET)
            self._due.pop(okey, None)
            return None if self._stop else okey

    def _run(self) -> None:
        while (okey := self._next()) is not None:
            st = self.storage
            try:
                with st.lock:
                    if self._stop:
                        return
                    st.merge_one(okey)
            except Exception:  # the rows stay unmerged (searches read them); the next Add asks again
                log.exception("merging the postings of owner %s failed", okey)

    def run_now(self) -> None:
        """Every due merge at once, on the caller's thread (before a close; and tests)."""
        while True:
            with self._cv:
                if not self._due:
                    return
                okey = min(self._due, key=self._due.__getitem__)
                del self._due[okey]
            self.storage.merge_one(okey)


class MessageStorage:
    """One connection behind an RLock (`lock`, shared with the in-memory views); `sync` is
    idempotent and crash-safe."""

    def __init__(self, db_path: Path, log_db: Path | None = None) -> None:
        self.path = db_path
        self.lock = threading.RLock()
        self._conn = connect(db_path, uri=True)
        # The conversation log whose turns this file indexes: the documents' text is read from it.
        # Read-only: a write transaction here then takes no write lock on the log (an Add's append
        # would wait for this file's writers). A log not made yet is an empty database until it is.
        self.log_db = log_db if log_db is not None else db_path.with_name("log.db")
        if not self.log_db.exists():  # (not a touch of an existing one: its mtime is left alone)
            self.log_db.touch(exist_ok=True)
        self._attach_log(self.log_db)
        self._standin = False
        self.texts()
        self.writes = 0  # commits through this connection (data_version only counts others')
        # The watermark as this process last saw it (another process's sync may have moved it on):
        # what the Add path reads to bound the index's lag without a query (MessageIndex.sync_later).
        self.indexed_to = 0
        self.cache: postings.Invalidate | None = None  # the search's cache, told what a write rewrote
        self._postings = False  # maintained by `_add_batch` once built (`postings.derive`, once)
        self.last_write = 0.0  # time.monotonic() of the last commit here (the merger waits for a quiet one)
        self._due: set[int] = set()  # owners whose unmerged postings a write found past the threshold
        self.merger = _Merger(self)
        with self.lock:
            # A merge of the postings (messages/delta.py) writes a few MB at once: the WAL it grows
            # is cut back to this after the next checkpoint instead of staying that size.
            self._conn.execute("PRAGMA journal_size_limit = 4194304")
            self._conn.executescript(_SCHEMA + postings.tables())
            if self._conn.execute("SELECT 1 FROM docs LIMIT 1").fetchone() is None:
                self._set_tokenizer()
        self._freed = False
        run_once(self._conn, self.lock, _NO_FTS, self._drop_fts)
        run_once(self._conn, self.lock, _PACKED, self._pack)
        run_once(self._conn, self.lock, _REDACTED, self._redact_stored)
        if not self._standin:  # (a log without its table yet: at a later start)
            run_once(self._conn, self.lock, _ONE_COPY, self._one_copy)
        run_once(self._conn, self.lock, _NO_OWNER_INDEX, self._drop_owner_index)
        if self._freed or self._left_free():
            self._compact()
        # An older file's documents are folded into the postings once, in place (history-sized,
        # once ever: every later start finds the marker and goes on at once).
        run_once(self._conn, self.lock, _POSTINGS, postings.migrate)
        self._postings = True
        with self.lock:
            older = postings.has_rowid(self._conn)
        if older:  # (kept as it is: converting it is a rebuild the size of the history)
            log.info("%s keeps the older layout of its postings (a rowid table and an index); "
                     "`mateclaw-mem reindex` rebuilds it in the current one, about a tenth smaller", self.path.name)

    def texts(self) -> None:
        """Point `messages` (the documents' text, docfields.TEXT) at the attached log's table; while the
        log has none yet (a fresh workspace whose log is opened after this index), at an empty
        stand-in, dropped by the first call that finds the table (`sync`, a search)."""
        with self.lock:
            has = self._conn.execute("SELECT 1 FROM log.sqlite_master WHERE type = 'table' AND name = 'messages'"
                                     ).fetchone() is not None
            if has and self._standin:
                self._conn.execute("DROP VIEW temp.messages")
            elif not has and not self._standin:
                self._conn.execute("CREATE TEMP VIEW messages (id, content) AS SELECT 0, '' WHERE 0")
            self._standin = not has

    def follow(self, log: MessageSource) -> None:
        """Read the text from the log this index is synced from when it is another file than the one
        attached (a test's log beside an index of another name; `MessageIndex(log_db=)` names it)."""
        path = getattr(log, "path", None)
        if path is self._followed:  # (the same log as last time: no path resolved at every Add)
            path = None
        else:
            self._followed = path
        if isinstance(path, Path) and path.resolve() != self.log_db.resolve():
            with self.lock:
                self._conn.execute("DETACH DATABASE log")
                self.log_db = path
                self._standin = False  # (`texts` makes it again if the new log has no table)
                self._conn.execute("DROP VIEW IF EXISTS temp.messages")
                self._attach_log(path)
        if self._standin:
            self.texts()

    def _attach_log(self, path: Path) -> None:
        """The log read-only as `log`, with a small page cache: only read here (a hit's text, a turn's
        when indexed), and a page read again comes from the system's page cache. SQLite's default 2 MB
        was RSS beside the daemon's byte cache that its RSS budget took from it (runtime/malloc.RssBudget):
        at 100k messages of one user the 100 dev questions' entries (43.6 MB) no longer fitted. (The
        file's own cache keeps SQLite's default: this connection also writes - catch-up, merges - and a
        search waits behind those.)"""
        self._conn.execute("ATTACH DATABASE ? AS log", (f"file:{quote(str(path.resolve()))}?mode=ro",))
        self._conn.execute(f"PRAGMA log.cache_size = -{LOG_PAGE_CACHE_KIB}")

    def _one_copy(self, conn: sqlite3.Connection) -> int:
        """`_ONE_COPY`: each turn's copy of its text dropped where the log holds the same text."""
        done: int = conn.execute(
            "UPDATE docs SET content = '' WHERE id < ? AND content <> ''"
            " AND content = (SELECT m.content FROM messages m WHERE m.id = docs.id)", (FACT_BASE,)).rowcount
        self._freed = self._freed or done > 0
        return done

    def _drop_owner_index(self, conn: sqlite3.Connection) -> int:
        """`_NO_OWNER_INDEX`: the index dropped (1) or never made (0)."""
        had = conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'docs_by_owner'").fetchone()[0]
        conn.execute("DROP INDEX IF EXISTS docs_by_owner")
        self._freed = self._freed or bool(had)
        return int(had)

    def _drop_fts(self, conn: sqlite3.Connection) -> int:
        """`_NO_FTS`: the old `fts` table (FTS5 or plain) dropped, in `run_once`'s transaction."""
        had = conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'fts'").fetchone()[0]
        if had:
            conn.execute("DROP TABLE fts")
            self._freed = True
        return int(had)

    def _pack(self, conn: sqlite3.Connection) -> int:
        """`_PACKED`: every segment an older version wrote rewritten as an Add writes one now (same
        ordinals and counts, a third of the bytes); the rows rewritten."""
        done, after = 0, 0
        if not postings.has_rowid(conn):
            return 0  # (made by this version: never written in the older format)
        while rows := conn.execute("SELECT rowid, ords, packed FROM postings WHERE rowid > ?"
                                   " AND length(packed) > 0 ORDER BY rowid LIMIT 2000", (after,)).fetchall():
            conn.executemany("UPDATE postings SET ords = ?, packed = X'' WHERE rowid = ?",
                             [(pack_segment(*unpack_segment(r[1], r[2])), r[0]) for r in rows])
            done, after = done + len(rows), rows[-1][0]
        self._freed = self._freed or done > 0
        return done

    def _left_free(self) -> bool:
        """Whether a quarter of the file is free pages: a start killed between a migration that freed
        them (its marker committed) and `_compact` leaves them so, and no later start would compact."""
        with self.lock:
            free = self._conn.execute("PRAGMA main.freelist_count").fetchone()[0]
            pages = self._conn.execute("PRAGMA main.page_count").fetchone()[0]
        return bool(free * 4 >= pages > 64)

    def _compact(self) -> None:
        """The file rewritten without the pages `_drop_fts` and `_pack` freed (a third of it). Another
        process holding the file open makes this wait or give up: the pages are then only reused."""
        try:
            with self.lock:
                self._conn.execute("VACUUM")
                # (In WAL mode the rewritten file is in the WAL: the checkpoint shrinks the file itself.
                # `main`: not the attached log, whose writers this would wait for.)
                self._conn.execute("PRAGMA main.wal_checkpoint(TRUNCATE)")
        except sqlite3.OperationalError as exc:
            log.warning("messages.db not compacted after dropping its token table (%s): its free pages are reused",
                        exc)

    def _redact_stored(self, conn: sqlite3.Connection) -> int:
        """Redact, in place, what an older version indexed raw (the log holds the same turns and is
        redacted by its own migration). A turn's words also sit in its neighbours' `ctx`/`nb`
        fields, so each conversation holding a secret is indexed again whole; a fact stands alone
        (its row is rewritten the way `_add_facts` writes one).
        Returns how many documents held one."""
        dirty = [(r["id"], r["agent"], r["owner"], r["conversation_id"])
                 for r in conn.execute("SELECT id, agent, owner, conversation_id, content FROM docs")
                 if redact(r["content"]) != r["content"]]
        for doc_id, *_ in (d for d in dirty if d[0] >= FACT_BASE):
            text = redact(conn.execute("SELECT content FROM docs WHERE id = ?", (doc_id,)).fetchone()[0])
            body = tokenize(text)
            conn.execute("UPDATE docs SET content = ?, body_len = ? WHERE id = ?", (text, len(body), doc_id))
        for key in dict.fromkeys(tuple(d[1:]) for d in dirty if d[0] < FACT_BASE):
            where = "agent = ? AND owner = ? AND conversation_id = ? AND id < ?"
            turns = [_Turn(r["id"], r["agent"], r["owner"], r["conversation_id"], r["role"], redact(r["content"]),
                           r["ts_ms"])
                     for r in conn.execute(f"SELECT * FROM docs WHERE {where} ORDER BY id", (*key, FACT_BASE))]
            conn.execute(f"DELETE FROM docs WHERE {where}", (*key, FACT_BASE))
            self._add_batch(turns)
        if dirty:
            # A new generation makes other processes parse their cached views (old text) afresh.
            # (The old bytes do not linger: `run_once` runs this with secure_delete on.)
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('generation', ?)", (uuid.uuid4().hex,))
        return len(dirty)

    checkpoints: WalCheckpoints | None = None  # set by MessageIndex.hand_checkpoints_to
    _standin = False  # `messages` is an empty stand-in (`texts`); PostgreSQL's store: never
    _followed: object = None  # the path of the log `follow` last checked

    on_commit: Callable[[], None] | None = None  # the index process's: what the commit rewrote, sent on

    def committed(self, *, documents: bool = True) -> None:
        """After every commit here: `documents` changed (views parse afresh); the checkpoints' cue."""
        if self.on_commit is not None:
            self.on_commit()
        self.writes += documents
        self.last_write = time.monotonic()
        if self._due:
            due, self._due = self._due, set()
            self.merger.want(due)
        if self.checkpoints is not None:
            self.checkpoints.wrote(self.path)

    def redacted_on_migration(self) -> int | None:
        """Documents the one-time migration redacted in place (for `status`); None: not run."""
        with self.lock:
            return migrated(self._conn, _REDACTED).get("")

    def merge_one(self, okey: int) -> int:
        """Fold one owner's unmerged postings into its segments when still due, in a write
        transaction of its own (the merger's step); the entries folded."""
        with immediate(self._conn, self.lock) as conn:
            folded = postings.merge_owner(conn, okey, self.cache, above=postings.DELTA_MAX)
        if folded:
            self.committed(documents=False)
        return folded

    # ------------------------------------------------------------------ indexing

    def _set_tokenizer(self) -> None:
        with self._conn:
            self._conn.execute(
                "INSERT INTO meta (key, value) VALUES ('tokenizer', ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (TOKENIZER_VERSION,),
            )

    def stale_tokenizer(self) -> str | None:
        """The tokenizer this index was built with when it is not the current one (its tokens
        would silently miss the current query tokens: rebuild), else None."""
        with self.lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'tokenizer'").fetchone()
            if row is not None and row["value"] == TOKENIZER_VERSION:
                return None
            if self._conn.execute("SELECT 1 FROM docs LIMIT 1").fetchone() is None:
                return None
            return row["value"] if row is not None else "unversioned"

    def watermark(self) -> int:
        with self.lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
        return int(row["value"]) if row else 0

    def sync(self, log: MessageSource, *, batch: int = 1000, upto: int | None = None,
             committed: Callable[[], None] | None = None) -> int:
        """Index every log message after the watermark (`upto`: only those up to that id); returns
        how many were indexed. `committed` is called after each batch's commit, outside the lock."""
        done = 0
        self.follow(log)
        while True:
            with self.lock:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    # Read the watermark inside the write transaction: another process may have
                    # indexed since we last looked.
                    row = self._conn.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
                    mark = int(row["value"]) if row else 0
                    msgs = log.since(mark, limit=batch)
                    full = len(msgs) == batch
                    if upto is not None and msgs and msgs[-1].id > upto:
                        msgs, full = [m for m in msgs if m.id <= upto], False
                    if msgs:
                        self._add_batch(msgs)
                        mark = msgs[-1].id
                        self._conn.execute(
                            "INSERT INTO meta (key, value) VALUES ('watermark', ?)"
                            " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                            (str(mark),),
                        )
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
                self.indexed_to = max(self.indexed_to, mark)
                if msgs:
                    give_way()
                    self.committed()
                done += len(msgs)
            if committed is not None:
                committed()
            if not full:
                return done

    def rebuild(self, log: MessageSource, facts: FactSource | None = None, *, batch: int = 1000) -> int:
        """Index the whole log (and the facts, when given) again, into tables built aside and swapped
        in by one transaction: until then every search - here, or in another process sharing the
        file - reads the complete old index, never a half-built one. Returns what was indexed."""
        s = "_new"
        with self.lock:
            self._conn.executescript(f"DROP TABLE IF EXISTS docs{s};"
                                     + "".join(f"DROP TABLE IF EXISTS {t}{s};" for t in postings.TABLES)
                                     + _tables(s) + postings.tables(s))
        last, last_fact, done = 0, 0, 0
        while True:  # the bulk, in batches, releasing the lock so searches and Adds go on meanwhile
            with immediate(self._conn, self.lock):
                msgs = log.since(last, limit=batch)
                self._add_batch(msgs, s)
            if msgs:
                last, done = msgs[-1].id, done + len(msgs)
            if len(msgs) < batch:
                break
        with self.lock:
            with immediate(self._conn, self.lock):
                # Whatever was logged (and facts extracted) since the last batch, then the swap.
                while msgs := log.since(last, limit=batch):
                    self._add_batch(msgs, s)
                    last, done = msgs[-1].id, done + len(msgs)
                while facts is not None and (found := facts.facts_since(last_fact, limit=batch)):
                    self._add_facts(found, s)
                    last_fact, done = found[-1].id, done + len(found)
                conn = self._conn
                for t in ("docs", *postings.TABLES):
                    conn.execute(f"DROP TABLE IF EXISTS {t}")
                for t in postings.TABLES:
                    conn.execute(f"ALTER TABLE {t}{s} RENAME TO {t}")
                for name in ("docs_by_owner", "docs_by_conversation"):
                    conn.execute(f"DROP INDEX IF EXISTS {name}{s}")
                conn.execute(f"ALTER TABLE docs{s} RENAME TO docs")
                for statement in _tables().split(";"):
                    if "CREATE INDEX" in statement:
                        conn.execute(statement)
                conn.execute("DELETE FROM meta WHERE key NOT LIKE 'redacted:%' AND key NOT LIKE 'migrated:%'")
                conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                                 [("watermark", str(last)), ("fact_watermark", str(last_fact)),
                                  ("tokenizer", TOKENIZER_VERSION), ("generation", uuid.uuid4().hex)])
            self.committed()
        return done

    def sync_facts(self, facts: FactSource, *, batch: int = 1000) -> int:
        """Index every stored fact after the fact watermark; returns how many were indexed.

        A fact is a document like a turn (body = its text, dt = its source time) with id
        FACT_BASE + fact id; its speaker is the speaker of its first source turn, so the speaker
        boost applies to it too. Call after `sync`: the source turns must be indexed.
        """
        done = 0
        with self.lock:
            while True:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    row = self._conn.execute("SELECT value FROM meta WHERE key = 'fact_watermark'").fetchone()
                    batch_facts = facts.facts_since(int(row["value"]) if row else 0, limit=batch)
                    self._add_facts(batch_facts)
                    if batch_facts:
                        self._conn.execute(
                            "INSERT INTO meta (key, value) VALUES ('fact_watermark', ?)"
                            " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                            (str(batch_facts[-1].id),),
                        )
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
                if batch_facts:
                    self.committed()
                done += len(batch_facts)
                if len(batch_facts) < batch:
                    return done

    def _add_facts(self, found: Sequence[StoredFact], s: str = "") -> None:
        self._index(s, [FACT_BASE + f.id for f in found], self._add_fact_docs(found, s))

    def _index(self, s: str, ids: list[int], known: dict[int, tuple[list[str], ...]],
               texts: dict[int, str] | None = None, in_hand: dict[int, dict[str, Any]] | None = None) -> None:
        """The postings of these stored documents, in the same transaction (`postings.index_docs`)."""
        if self._postings or s:
            self._due |= postings.index_docs(self._conn, ids, s, self.cache, background=not s, known=known,
                                             texts=texts, in_hand=in_hand)

    def _add_fact_docs(self, found: Sequence[StoredFact], s: str) -> dict[int, tuple[list[str], ...]]:
        known: dict[int, tuple[list[str], ...]] = {}
        for f in found:
            src = self._conn.execute(
                f"SELECT speaker FROM docs{s} WHERE id = ?", (f.source_ids[0],)
            ).fetchone() if f.source_ids else None
            body = tokenize(f.text)
            self._conn.execute(
                f"INSERT INTO docs{s} (id, agent, owner, conversation_id, role, speaker, content, ts_ms,"
                " is_question, body_len, ctx_len, nb_len) VALUES (?, ?, ?, ?, 'fact', ?, ?, ?, 0, ?, 0, 0)",
                (FACT_BASE + f.id, f.agent, owner_column(f.owner), f.conversation_id, src["speaker"] if src else None,
                 f.text, f.ts_ms, len(body)),
            )
            known[FACT_BASE + f.id] = (body, [], [], date_tokens(f.ts_ms))
        return known

    def _add_batch(self, msgs: Sequence[LoggedMessage], s: str = "") -> None:
        """Index `msgs` into docs{s} and the postings; the caller holds the lock and a write transaction.
        A memoryless conversation is never indexed: it leaves no memory anywhere, recall included."""
        msgs = [m for m in msgs if not m.memoryless]
        conn = self._conn
        last: dict[tuple[str, str, str], _Pending | sqlite3.Row | None] = {}
        pending: list[_Pending] = []
        grown: dict[int, int] = {}  # already indexed turns whose next neighbour arrived now: their nb_len
        for m in msgs:
            give_way()
            key = (m.agent, owner_column(m.owner), m.conversation_id)
            if key not in last:
                last[key] = conn.execute(
                    f"SELECT d.id, d.speaker, d.is_question, {docfields.TEXT} AS content, d.nb_len FROM docs{s} d"
                    " WHERE d.agent = ? AND d.owner = ? AND d.conversation_id = ? AND d.id < ?"
                    " ORDER BY d.id DESC LIMIT 1",
                    (*key, FACT_BASE),
                ).fetchone()
            prev = last[key]
            speaker, text = split_speaker(m.content)
            doc = _Pending(m, speaker, tokenize(text), [], [], _is_question(text))
            if isinstance(prev, _Pending):
                prev_body, prev_speaker, prev_q = prev.body, prev.speaker, prev.is_question
                prev.nb.extend(doc.body)
            elif prev is not None:
                prev_body = body_tokens(prev["id"], prev["content"])
                prev_speaker, prev_q = prev["speaker"], bool(prev["is_question"])
                grown[prev["id"]] = prev["nb_len"] + len(doc.body)
            else:
                prev_body, prev_speaker, prev_q = [], None, False
            doc.nb.extend(prev_body)
            if prev_q and prev_speaker != speaker:
                doc.ctx = prev_body
            last[key] = doc
            pending.append(doc)
        for doc_id, nb_len in grown.items():
            conn.execute(f"UPDATE docs{s} SET nb_len = ? WHERE id = ?", (nb_len, doc_id))
        conn.executemany(
            f"INSERT INTO docs{s} (id, agent, owner, conversation_id, role, speaker, content, ts_ms,"
            " is_question, body_len, ctx_len, nb_len) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (p.msg.id, p.msg.agent, owner_column(p.msg.owner), p.msg.conversation_id, p.msg.role, p.speaker,
                 "", p.msg.ts_ms, int(p.is_question), len(p.body), len(p.ctx), len(p.nb))  # (the text: the log's)
                for p in pending
            ],
        )
        # The new turns' rows as `docfields.read` would give them back (not read again); the grown
        # ones are read, their neighbours' words with them (a new turn's text from `texts`: the
        # log's snapshot read here may not show it yet).
        self._index(s, [*grown, *(p.msg.id for p in pending)], {}, {p.msg.id: p.msg.content for p in pending}, {
            p.msg.id: docfields.row(p.msg.id, p.msg.agent, owner_column(p.msg.owner), p.speaker, p.is_question,
                                    p.msg.conversation_id, p.msg.role, p.msg.content, p.msg.ts_ms,
                                    (p.body, p.ctx, p.nb, date_tokens(p.msg.ts_ms)))
            for p in pending})

    # ------------------------------------------------------------------ reading (for the views)

    def stamp(self) -> tuple[int, int]:
        """(data_version, own writes): changes whenever anything was committed to the file."""
        return self._conn.execute("PRAGMA data_version").fetchone()[0], self.writes

    def doc_rows(self, agent: str, owner: str | None, where: str, params: tuple[object, ...],
                 limit: int | None = None) -> list[dict[str, Any]]:
        """One owner's documents with their field tokens, in id order (the first `limit`, None: all);
        `where` filters on `d.`."""
        return docfields.read(self._conn, f"d.agent = ? AND d.owner = ? AND {where}",
                              (agent, owner_column(owner), *params, *([limit] if limit is not None else [])),
                              tail=" ORDER BY d.id" + (" LIMIT ?" if limit is not None else ""))

    def close(self) -> None:
        self.merger.stop()
        with self.lock:
            self._conn.close()


def delete_owner(path: Path, agent: str, owner: str) -> int:
    """Every document of one owner of `agent` deleted, on a connection of its own with `secure_delete`
    (a person's data deleted: conversations/aml_users.py, which scrubs the file after). A new generation
    makes every process's view of the owner parse afresh. Returns the documents deleted. Whatever tables
    this file grows that hold an owner's words must be covered here."""
    conn = connect(path)
    try:
        conn.execute("PRAGMA secure_delete = ON")
        with immediate(conn, threading.Lock()) as c:
            return delete_owner_rows(c, agent, owner)
    finally:
        conn.close()


def delete_owner_rows(c: sqlite3.Connection, agent: str, owner: str) -> int:
    """`delete_owner`'s rows, in the caller's write transaction (the PostgreSQL store's too)."""
    key = (agent, owner_column(owner))
    postings.delete_owner(c, agent, owner)
    n: int = c.execute("DELETE FROM docs WHERE agent = ? AND owner = ?", key).rowcount
    c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('generation', ?)", (uuid.uuid4().hex,))
    return n
