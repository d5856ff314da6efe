"""The derived file index: `workspace/.mateclaw/index.db` (SQLite, WAL, FTS5).

Everything here is rebuilt from the files (and the conversation log) by `rebuild()`; nothing is
the truth. Tables:

- `files`: one row per indexed memory file with the mtime, size and SHA-256 it had when indexed
  (what reconcile compares against the disk).
- `chunks`: the searchable pieces (see `index/chunker.py`) plus conversation messages
  (`kind = 'conversation'`), with agent, owner, rel, title and line range.
- `fts`: FTS5 over our own tokens (`index/tokenizer.py`) in three columns: `title`, `body`, and
  `tag` - hashed agent/owner/kind tokens, so that an unranked search (one made of very common
  terms) filters inside the full-text index and stops after `LIMIT` rows; a ranked search checks
  the chunk rows instead, before its `LIMIT` (see `match`).
- `vectors`: optional embeddings keyed by (chunk text hash, model), so a rebuild keeps them and a
  new embedding model simply finds none of its own (stale vectors are never mixed in).
- `meta`: the conversation-log watermark.

A full rebuild builds `*_new` tables beside the live ones, in batches, and swaps them in one
transaction: searches keep reading the old tables (WAL snapshots) and never see a half-built
index. Writes made meanwhile land in the old tables; the reconcile that follows the swap re-reads
any file whose mtime or size no longer matches.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from mateclaw_mem.db import connect, immediate, migrated, run_once
from mateclaw_mem.errors import InvalidInputError, InvalidPathError
from mateclaw_mem.index.chunker import CONVERSATION, SCOPES, chunk_file, daily_date, file_kind, scopes_of
from mateclaw_mem.index.sources import LoggedMessage, MessageSource
from mateclaw_mem.index.tokenizer import TOKENIZER_VERSION, tokenize
from mateclaw_mem.redaction import redact

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.workspace.store import WorkspaceStore, WriteEvent

log = logging.getLogger(__name__)

_BATCH_FILES = 200
_AUTOMERGE = 4  # FTS5's default: what ingests after a rebuild run with
_READ_RETRIES = 6
_SWAP_ERRORS = ("vtable constructor failed", "no such table", "database schema has changed")
_REDACTED = "redacted:index.db"  # `meta` marker (and count) of the one-time redaction in place


@dataclass(frozen=True)
class DiskFile:
    agent: str
    owner: str  # "" = the agent's shared files
    rel: str
    path: Path
    mtime: float
    size: int


@dataclass(frozen=True)
class IndexedFile:
    agent: str
    owner: str
    rel: str
    mtime: float
    size: int
    sha: str


@dataclass(frozen=True)
class IngestResult:
    agent: str
    owner: str
    rel: str
    changed: bool  # the index content changed (new, edited or removed file)
    deleted: bool = False
    chunks: int = 0


@dataclass(frozen=True)
class Candidate:
    id: int
    agent: str
    owner: str
    rel: str
    kind: str
    title: str
    line_start: int
    line_end: int
    text: str
    tokens: str  # the body tokens, space-joined (for coverage)
    bm25: float  # FTS5 bm25: lower is better
    ts_ms: int | None
    conversation_id: str | None
    message_id: int | None
    sha: str
    title_tokens: str = ""  # the title tokens as indexed, space-joined ("" for a message: never matched)


@dataclass(frozen=True)
class RebuildReport:
    files: int
    chunks: int
    messages: int
    skipped: list[str]


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def tag(prefix: str, value: str) -> str:
    """A single unicode61 token standing for an agent / owner / kind value."""
    return prefix + hashlib.blake2b(value.encode("utf-8"), digest_size=8).hexdigest()


def _tags(agent: str, owner: str, kind: str) -> str:
    return " ".join([tag("a", agent), tag("o", owner), *(tag("s", scope) for scope in scopes_of(kind))])


def chunk_sha(title: str, text: str) -> str:
    return hashlib.sha256(f"{title}\n{text}".encode()).hexdigest()[:32]


def _schema(s: str) -> str:
    # Index names are global in SQLite and survive ALTER TABLE RENAME: give each build its own.
    u = uuid.uuid4().hex[:8]
    return f"""
CREATE TABLE IF NOT EXISTS files{s} (
    id INTEGER PRIMARY KEY,
    agent TEXT NOT NULL, owner TEXT NOT NULL, rel TEXT NOT NULL, kind TEXT NOT NULL,
    mtime REAL NOT NULL, size INTEGER NOT NULL, sha TEXT NOT NULL, indexed_ms INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS files_key_{u} ON files{s} (agent, owner, rel);
CREATE TABLE IF NOT EXISTS chunks{s} (
    id INTEGER PRIMARY KEY,
    file_id INTEGER,
    agent TEXT NOT NULL, owner TEXT NOT NULL, rel TEXT NOT NULL, kind TEXT NOT NULL,
    title TEXT NOT NULL, line_start INTEGER NOT NULL, line_end INTEGER NOT NULL, text TEXT NOT NULL,
    sha TEXT NOT NULL, ntok INTEGER NOT NULL, day TEXT, ts_ms INTEGER, conversation_id TEXT, message_id INTEGER
);
CREATE INDEX IF NOT EXISTS chunks_file_{u} ON chunks{s} (file_id);
CREATE VIRTUAL TABLE IF NOT EXISTS fts{s} USING fts5(title, body, tag, tokenize='unicode61');
"""


_STATIC = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS fts_vocab USING fts5vocab('fts', 'row');
CREATE TABLE IF NOT EXISTS vectors (sha TEXT NOT NULL, model TEXT NOT NULL, vec BLOB NOT NULL,
                                    PRIMARY KEY (sha, model)) WITHOUT ROWID;
"""


class FileIndex:
    """Thread-safe. Writes go through one connection under a lock; each reading thread has its own
    connection so searches never wait for an ingest or a rebuild batch."""

    def __init__(self, path: Path, store: WorkspaceStore, clock: Clock) -> None:
        self.path = path
        self.store = store
        self.clock = clock
        self._write_lock = threading.RLock()
        self._rebuild_lock = threading.Lock()
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._closed = False
        self._w = self._open()
        with self._write_lock:
            # Lets a rebuild hand the old tables' pages back. `connect` has already switched the file
            # to WAL, which writes its header, so the setting needs a VACUUM to apply (instant while
            # the file is empty; an existing index gets it after its next rebuild).
            self._w.execute("PRAGMA auto_vacuum = INCREMENTAL")
            if self._w.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0:
                self._w.execute("VACUUM")
            self._w.executescript(_STATIC)
            if not self._table_exists(self._w, "files"):
                self._w.executescript(_schema(""))
            if self._w.execute("SELECT 1 FROM chunks LIMIT 1").fetchone() is None:
                with self._tx() as conn:
                    self._set_tokenizer(conn)
        run_once(self._w, self._write_lock, _REDACTED, self._redact_stored)

    @staticmethod
    def _redact_stored(conn: sqlite3.Connection) -> int:
        """Redact, in place, the conversation messages an older version indexed raw (the log holds
        the same turns and is redacted by its own migration). Returns how many rows held a secret.
        File chunks are not touched: they are re-read from the files, which only writers change."""
        changed = [(r["id"], clean) for r in conn.execute("SELECT id, text FROM chunks WHERE kind = ?", (CONVERSATION,))
                   if (clean := redact(r["text"])) != r["text"]]
        for chunk_id, text in changed:
            tokens = tokenize(text)
            conn.execute("UPDATE chunks SET text = ?, sha = ?, ntok = ? WHERE id = ?",
                         (text, chunk_sha("", text), len(tokens), chunk_id))
            conn.execute("UPDATE fts SET body = ? WHERE rowid = ?", (" ".join(tokens), chunk_id))
        if changed:  # deleted tokens stay in FTS5's segments until they are merged: merge them now
            conn.execute("INSERT INTO fts (fts) VALUES ('optimize')")
        return len(changed)

    def redacted_on_migration(self) -> int | None:
        """Messages the one-time migration redacted in place (for `status`); None: not run."""
        return migrated(self._reader(), _REDACTED).get("")

    @staticmethod
    def _set_tokenizer(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('tokenizer', ?)", (TOKENIZER_VERSION,))

    def stale_tokenizer(self) -> str | None:
        """The tokenizer this index was built with when it is not the current one (its tokens
        would silently miss the current query tokens: rebuild), else None."""
        row = self._reader().execute("SELECT value FROM meta WHERE key = 'tokenizer'").fetchone()
        if row is not None and row["value"] == TOKENIZER_VERSION:
            return None
        if self._reader().execute("SELECT 1 FROM chunks LIMIT 1").fetchone() is None:
            return None
        return row["value"] if row is not None else "unversioned"

    # -- connections -----------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        conn = connect(self.path)
        with self._conns_lock:
            self._conns.append(conn)
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open()
            self._local.conn = conn
        return conn

    def _tx(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return immediate(self._w, self._write_lock)

    def _read(self, sql: str, params: Iterable = ()) -> list[sqlite3.Row]:
        """A read that survives a rebuild's table swap.

        A statement prepared just before the swap commits can find the FTS5 table gone when it runs
        ("vtable constructor failed", "no such table"); SQLite re-prepares ordinary tables itself but
        not this case. The next attempt sees the new tables, so a short retry is the whole fix."""
        for attempt in range(_READ_RETRIES):
            try:
                return self._reader().execute(sql, tuple(params)).fetchall()
            except sqlite3.OperationalError as exc:
                text = str(exc)
                if attempt == _READ_RETRIES - 1 or not any(m in text for m in _SWAP_ERRORS):
                    raise
                time.sleep(0.005 * (attempt + 1))
        raise AssertionError("unreachable")

    @staticmethod
    def _table_exists(conn: sqlite3.Connection, name: str) -> bool:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None

    def close(self) -> None:
        with self._conns_lock:
            self._closed = True
            for conn in self._conns:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            self._conns.clear()

    def _now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)

    def mark_synced(self, conn: sqlite3.Connection | None = None) -> None:
        """Remember (in the index, so every process sees it) when the index last caught up with the disk."""
        sql = "INSERT OR REPLACE INTO meta (key, value) VALUES ('last_sync_ms', ?)"
        if conn is not None:
            conn.execute(sql, (str(self._now_ms()),))
        else:
            with self._tx() as c:
                c.execute(sql, (str(self._now_ms()),))

    @property
    def last_sync_ms(self) -> int | None:
        row = self._reader().execute("SELECT value FROM meta WHERE key = 'last_sync_ms'").fetchone()
        return int(row["value"]) if row else None

    # -- the disk --------------------------------------------------------------------------------

    def owner_key(self, owner: str | None) -> str:
        """Owner folders exist only with owner isolation on; otherwise every file is shared ("")."""
        return owner if owner and self.store.owner_isolation else ""

    def locate(self, path: Path) -> tuple[str, str, str] | None:
        """(agent, owner, rel) of a memory file path inside the workspace, or None if it is not one."""
        try:
            parts = Path(os.path.abspath(path)).relative_to(os.path.abspath(self.store.root)).parts
        except ValueError:
            return None
        if len(parts) < 2 or any(p.startswith(".") for p in parts) or not parts[-1].endswith(".md"):
            return None
        agent, rest = parts[0], parts[1:]
        owner = ""
        if rest[0] == "owners":
            if not self.store.owner_isolation or len(rest) < 3:
                return None
            owner, rest = unquote(rest[1]), rest[2:]
        return agent, owner, "/".join(rest)

    def disk_files(self, agent: str | None = None) -> Iterator[DiskFile]:
        """Every memory file on disk (stat only, nothing read)."""
        agents = [agent] if agent else self.store.agents()
        for name in agents:
            base = self.store.root / name
            if not base.is_dir():
                continue
            for dirpath, dirnames, filenames in os.walk(base):
                rel_dir = Path(dirpath).relative_to(base)
                # Hidden folders (.git, .obsidian, editor state) hold no memory files.
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                for fn in filenames:
                    if fn.startswith(".") or not fn.endswith(".md"):
                        continue
                    where = self.locate(Path(dirpath) / fn)
                    if where is None or where[0] != name:
                        continue
                    try:
                        st = os.stat(Path(dirpath) / fn)
                    except OSError:
                        continue
                    yield DiskFile(name, where[1], where[2], Path(dirpath) / fn, st.st_mtime, st.st_size)
                if rel_dir.parts == () and not self.store.owner_isolation and "owners" in dirnames:
                    dirnames.remove("owners")

    def indexed_files(self, agent: str | None = None) -> dict[tuple[str, str, str], IndexedFile]:
        sql = "SELECT agent, owner, rel, mtime, size, sha FROM files"
        params: tuple = ()
        if agent:
            sql += " WHERE agent = ?"
            params = (agent,)
        rows = self._reader().execute(sql, params).fetchall()
        return {(r["agent"], r["owner"], r["rel"]): IndexedFile(*r) for r in rows}

    # -- ingest ----------------------------------------------------------------------------------

    def on_write(self, event: WriteEvent) -> None:
        """Store listener: the daemon's own writes go straight in (the watcher's echo is then a no-op)."""
        owner = self.owner_key(event.owner)
        if event.sha:
            current = self._file_row(event.agent, owner, event.rel)
            if current is not None and current["sha"] == event.sha:
                return
        self.ingest(event.agent, owner, event.rel)

    def _file_row(self, agent: str, owner: str, rel: str) -> sqlite3.Row | None:
        return self._reader().execute(
            "SELECT id, mtime, size, sha FROM files WHERE agent = ? AND owner = ? AND rel = ?", (agent, owner, rel)
        ).fetchone()

    def ingest(self, agent: str, owner: str, rel: str, *, verify: bool = False, force: bool = False) -> IngestResult:
        """Bring one file's index rows in line with the disk (a missing file is removed).

        By default an unchanged mtime and size means "unchanged" without reading the file; `verify`
        reads it and compares the hash and the chunk count (what a deep reconcile does); `force`
        re-chunks it regardless."""
        owner = self.owner_key(owner)
        try:
            path = self.store.path(agent, rel, owner or None)
        except InvalidPathError:
            return self.delete(agent, owner, rel)
        try:
            st = os.stat(path)  # before the read: a change after it shows up as a newer mtime later
        except OSError:
            return self.delete(agent, owner, rel)
        row = self._file_row(agent, owner, rel)
        same_stat = row is not None and row["mtime"] == st.st_mtime and row["size"] == st.st_size
        if same_stat and not (verify or force):
            return IngestResult(agent, owner, rel, changed=False)
        try:
            snap = self.store.read(agent, rel, owner=owner or None)
        except (InvalidInputError, InvalidPathError) as exc:
            log.warning("not indexing %s/%s: %s", agent, rel, exc)
            return self.delete(agent, owner, rel)
        if not snap.exists:
            return self.delete(agent, owner, rel)
        chunks = chunk_file(rel, snap.text)
        if not force and row is not None and row["sha"] == snap.sha:
            intact = not verify or self._chunk_count(row["id"]) == len(chunks)
            if intact:
                if not same_stat:
                    with self._tx() as conn:  # touched but unchanged: remember the new stat, skip the work
                        conn.execute("UPDATE files SET mtime = ?, size = ? WHERE id = ?",
                                     (st.st_mtime, st.st_size, row["id"]))
                return IngestResult(agent, owner, rel, changed=False)
        with self._tx() as conn:
            self._delete_file(conn, "", agent, owner, rel)
            self._insert_file(conn, "", agent, owner, rel, st.st_mtime, st.st_size, snap.sha, chunks)
            self.mark_synced(conn)
        return IngestResult(agent, owner, rel, changed=True, chunks=len(chunks))

    def _chunk_count(self, file_id: int) -> int:
        conn = self._reader()
        chunks = conn.execute("SELECT COUNT(*) FROM chunks WHERE file_id = ?", (file_id,)).fetchone()[0]
        in_fts = conn.execute(
            "SELECT COUNT(*) FROM fts WHERE rowid IN (SELECT id FROM chunks WHERE file_id = ?)", (file_id,)
        ).fetchone()[0]
        return chunks if chunks == in_fts else -1

    def delete(self, agent: str, owner: str, rel: str) -> IngestResult:
        owner = self.owner_key(owner)
        with self._tx() as conn:
            removed = self._delete_file(conn, "", agent, owner, rel)
            if removed:
                self.mark_synced(conn)
        return IngestResult(agent, owner, rel, changed=removed, deleted=True)

    def _delete_file(self, conn: sqlite3.Connection, s: str, agent: str, owner: str, rel: str) -> bool:
        row = conn.execute(
            f"SELECT id FROM files{s} WHERE agent = ? AND owner = ? AND rel = ?", (agent, owner, rel)
        ).fetchone()
        if row is None:
            return False
        conn.execute(f"DELETE FROM fts{s} WHERE rowid IN (SELECT id FROM chunks{s} WHERE file_id = ?)", (row["id"],))
        conn.execute(f"DELETE FROM chunks{s} WHERE file_id = ?", (row["id"],))
        conn.execute(f"DELETE FROM files{s} WHERE id = ?", (row["id"],))
        return True

    def _insert_file(
        self, conn: sqlite3.Connection, s: str, agent: str, owner: str, rel: str, mtime: float, size: int,
        sha: str, chunks: list,
    ) -> None:
        kind = file_kind(rel)
        day = daily_date(rel)
        cur = conn.execute(
            f"INSERT INTO files{s} (agent, owner, rel, kind, mtime, size, sha, indexed_ms)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (agent, owner, rel, kind, mtime, size, sha, self._now_ms()),
        )
        file_id = cur.lastrowid
        tags = _tags(agent, owner, kind)
        for ch in chunks:
            title_tokens, body_tokens = tokenize(ch.title), tokenize(ch.text)
            cur = conn.execute(
                f"INSERT INTO chunks{s} (file_id, agent, owner, rel, kind, title, line_start, line_end, text, sha,"
                " ntok, day) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (file_id, agent, owner, rel, kind, ch.title, ch.line_start, ch.line_end, ch.text,
                 chunk_sha(ch.title, ch.text), len(title_tokens) + len(body_tokens), day.isoformat() if day else None),
            )
            conn.execute(
                f"INSERT INTO fts{s} (rowid, title, body, tag) VALUES (?, ?, ?, ?)",
                (cur.lastrowid, " ".join(title_tokens), " ".join(body_tokens), tags),
            )

    # -- conversation messages -------------------------------------------------------------------

    def sync_messages(self, source: MessageSource, *, batch: int = 1000) -> int:
        """Index log messages beyond the stored watermark. Cheap when there is nothing new."""
        added = 0
        while True:
            watermark = self._watermark(self._reader())
            messages = source.since(watermark, limit=batch)
            if not messages:
                return added
            with self._tx() as conn:
                # Re-read inside the transaction: another process may have indexed these already.
                current = self._watermark(conn)
                fresh = [m for m in messages if m.id > current]
                added += self._insert_messages(conn, "", fresh)
                if fresh:
                    conn.execute(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES ('messages_watermark', ?)",
                        (str(max(m.id for m in fresh)),),
                    )
            if len(messages) < batch:
                return added

    @staticmethod
    def _watermark(conn: sqlite3.Connection, key: str = "messages_watermark") -> int:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row["value"]) if row else 0

    def _insert_messages(self, conn: sqlite3.Connection, s: str, messages: Iterable[LoggedMessage]) -> int:
        n = 0
        for m in messages:
            # A memoryless conversation asked not to be remembered: it is not searchable either.
            if m.memoryless or not m.content.strip():
                continue
            rel = f"conversations/{m.conversation_id}"
            title = f"{m.role} message {m.id}"  # for display only: not tokenized, never matched
            body_tokens = tokenize(m.content)
            cur = conn.execute(
                f"INSERT INTO chunks{s} (file_id, agent, owner, rel, kind, title, line_start, line_end, text, sha,"
                " ntok, day, ts_ms, conversation_id, message_id)"
                " VALUES (NULL, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?, NULL, ?, ?, ?)",
                (m.agent, m.owner, rel, CONVERSATION, title, m.content, chunk_sha("", m.content), len(body_tokens),
                 m.ts_ms, m.conversation_id, m.id),
            )
            tags = _tags(m.agent, m.owner, CONVERSATION)
            conn.execute(
                f"INSERT INTO fts{s} (rowid, title, body, tag) VALUES (?, '', ?, ?)",
                (cur.lastrowid, " ".join(body_tokens), tags),
            )
            n += 1
        return n

    # -- full rebuild ----------------------------------------------------------------------------

    def rebuild(
        self,
        source: MessageSource | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> RebuildReport:
        """Build every table aside and swap it in at once; searches keep working throughout."""
        if not self._rebuild_lock.acquire(blocking=False):
            from mateclaw_mem.errors import BusyError

            raise BusyError("a rebuild of the search index is already running")
        try:
            return self._rebuild(source, progress)
        finally:
            self._rebuild_lock.release()

    def _rebuild(self, source: MessageSource | None, progress: Callable[[int, int], None] | None) -> RebuildReport:
        s = "_new"
        with self._tx() as conn:
            for t in ("files", "chunks", "fts"):
                conn.execute(f"DROP TABLE IF EXISTS {t}{s}")  # a crashed earlier build
        # executescript commits implicitly; run it outside our explicit transaction.
        with self._write_lock:
            self._w.executescript(_schema(s))
            # No incremental merging while the table is only appended to: one merge at the end
            # (`optimize`) costs less than the repeated ones and leaves one segment per term.
            self._w.execute(f"INSERT INTO fts{s} (fts{s}, rank) VALUES ('automerge', 0)")
        files = list(self.disk_files())
        total = len(files)
        done = chunks = 0
        skipped: list[str] = []
        if progress:
            progress(0, total)
        for start in range(0, total, _BATCH_FILES):
            prepared = []
            for f in files[start : start + _BATCH_FILES]:
                try:
                    snap = self.store.read(f.agent, f.rel, owner=f.owner or None)
                except (InvalidInputError, InvalidPathError) as exc:
                    skipped.append(f"{f.agent}/{f.rel}: {exc}")
                    continue
                if snap.exists:
                    prepared.append((f, snap.sha, chunk_file(f.rel, snap.text)))
            with self._tx() as conn:
                for f, sha, file_chunks in prepared:
                    self._insert_file(conn, s, f.agent, f.owner, f.rel, f.mtime, f.size, sha, file_chunks)
                    chunks += len(file_chunks)
            done = min(total, start + _BATCH_FILES)
            if progress:
                progress(done, total)
        messages = 0
        watermark = 0
        if source is not None:
            while True:
                batch = source.since(watermark, limit=1000)
                if not batch:
                    break
                with self._tx() as conn:
                    messages += self._insert_messages(conn, s, batch)
                watermark = max(m.id for m in batch)
        with self._tx() as conn:
            conn.execute(f"INSERT INTO fts{s} (fts{s}) VALUES ('optimize')")
            conn.execute(f"INSERT INTO fts{s} (fts{s}, rank) VALUES ('automerge', {_AUTOMERGE})")
        with self._tx() as conn:
            for t in ("fts", "chunks", "files"):
                conn.execute(f"DROP TABLE IF EXISTS {t}")
                conn.execute(f"ALTER TABLE {t}{s} RENAME TO {t}")
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('messages_watermark', ?)", (str(watermark),)
            )
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('rebuilt_ms', ?)", (str(self._now_ms()),))
            self._set_tokenizer(conn)
            self.mark_synced(conn)
        # Give back the dropped tables' pages and the WAL the build grew (both as large as the index).
        with self._write_lock:
            try:
                if self._w.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
                    # A file made before auto_vacuum was applied: one full VACUUM (seconds at 100k
                    # sections) makes it incremental and gives the dropped tables back now.
                    self._w.execute("PRAGMA auto_vacuum = INCREMENTAL")
                    self._w.execute("VACUUM")
                # Through executescript: `execute` steps this pragma once, which frees a single page.
                self._w.executescript("PRAGMA incremental_vacuum;")
                self._w.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except sqlite3.Error as exc:  # the new index is in place; only disk space is not yet returned
                log.warning("could not compact %s after the rebuild: %s", self.path, exc)
        return RebuildReport(files=total - len(skipped), chunks=chunks, messages=messages, skipped=skipped)

    # -- queries ---------------------------------------------------------------------------------

    def match(
        self,
        match: str,
        *,
        agent: str,
        owners: list[str],
        scope: str,
        limit: int,
        ranked: bool = True,
        title_weight: float = 2.0,
    ) -> list[Candidate]:
        """Chunks matching an FTS5 expression, in the agent/owners/scope given, best bm25 first
        (`ranked=False`: newest rows first, without bm25; they come back with `bm25 = 0`).

        Ranked, the scope is checked on the `chunks` row of each match, not by tag tokens in the
        MATCH: FTS5's bm25 computes an IDF for every phrase of the expression by walking its whole
        doclist, and a tag is in every chunk of its agent - at 100k chunks that walk was 3/4 of a
        search. Callers keep ranked expressions small (`search.CANDIDATE_BUDGET`), so the row checks
        are bounded. Unranked, nothing is scored and a query may match most of the index, so the
        tags stay in the MATCH: FTS5 seeks through their doclists and stops after `limit` rows.

        No column filter (`{title body} : ...`) on purpose: it makes FTS5 read every position list
        (5x slower at 10k chunks), and tag tokens are 17-character hashes no query word equals."""
        if ranked:
            where = ["c.agent = ?", f"c.owner IN ({','.join('?' * len(owners))})"]
            params: list = [match, agent, *owners]
            if scope != "all":
                kinds = SCOPES[scope]
                where.append(f"c.kind IN ({','.join('?' * len(kinds))})")
                params.extend(kinds)
            params.append(limit)
            # The inner select sorts narrow (id, bm) rows; the wide columns are read for the winners only.
            sql = (
                "SELECT c.*, t.body AS tokens, t.title AS title_tokens, f.bm AS bm FROM ("
                f"  SELECT m.rowid AS id, m.bm AS bm FROM ("
                f"    SELECT rowid, bm25(fts, {float(title_weight)}, 1.0, 0.0) AS bm FROM fts WHERE fts MATCH ?"
                "  ) AS m JOIN chunks AS k ON k.id = m.rowid"
                f"  WHERE {' AND '.join(w.replace('c.', 'k.') for w in where)} ORDER BY m.bm LIMIT ?"
                ") AS f JOIN chunks AS c ON c.id = f.id JOIN fts AS t ON t.rowid = f.id ORDER BY f.bm, f.id"
            )
        else:
            filters = [_quote(tag("a", agent)), "(" + " OR ".join(_quote(tag("o", o)) for o in owners) + ")"]
            if scope != "all":
                filters.append(_quote(tag("s", scope)))
            params = [f"({match}) AND " + " AND ".join(filters), limit]
            sql = (
                "SELECT c.*, f.body AS tokens, f.title AS title_tokens, 0.0 AS bm FROM ("
                "  SELECT rowid, title, body FROM fts WHERE fts MATCH ? ORDER BY rowid DESC LIMIT ?"
                ") AS f JOIN chunks AS c ON c.id = f.rowid ORDER BY c.id DESC"
            )
        rows = self._read(sql, params)
        return [
            Candidate(
                id=r["id"], agent=r["agent"], owner=r["owner"], rel=r["rel"], kind=r["kind"], title=r["title"],
                line_start=r["line_start"], line_end=r["line_end"], text=r["text"], tokens=r["tokens"],
                bm25=r["bm"], ts_ms=r["ts_ms"], conversation_id=r["conversation_id"], message_id=r["message_id"],
                sha=r["sha"], title_tokens=r["title_tokens"],
            )
            for r in rows
        ]

    def chunks_by_ids(self, ids: list[int]) -> list[Candidate]:
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self._read(
            f"SELECT c.*, f.body AS tokens, f.title AS title_tokens FROM chunks c JOIN fts f ON f.rowid = c.id"
            f" WHERE c.id IN ({marks})", ids
        )
        return [
            Candidate(
                id=r["id"], agent=r["agent"], owner=r["owner"], rel=r["rel"], kind=r["kind"], title=r["title"],
                line_start=r["line_start"], line_end=r["line_end"], text=r["text"], tokens=r["tokens"], bm25=0.0,
                ts_ms=r["ts_ms"], conversation_id=r["conversation_id"], message_id=r["message_id"], sha=r["sha"],
                title_tokens=r["title_tokens"],
            )
            for r in rows
        ]

    def scope_chunks(self, *, agent: str, owners: list[str], kinds: list[str]) -> list[tuple[int, str, str]]:
        """(id, sha, text-for-embedding) of every chunk in a scope (dense retrieval)."""
        om, km = ",".join("?" * len(owners)), ",".join("?" * len(kinds))
        rows = self._read(
            f"SELECT id, sha, title, text FROM chunks WHERE agent = ? AND owner IN ({om}) AND kind IN ({km})",
            [agent, *owners, *kinds],
        )
        return [(r["id"], r["sha"], (r["title"] + "\n" + r["text"]).strip()) for r in rows]

    def corpus_stats(self) -> tuple[int, float]:
        """(number of chunks, average tokens per chunk), cached until the database changes."""
        conn = self._reader()
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        cached = getattr(self._local, "stats", None)
        if cached is not None and cached[0] == version:
            return cached[1]
        row = self._read("SELECT COUNT(*), AVG(ntok) FROM chunks")[0]
        stats = (int(row[0]), float(row[1] or 0.0))
        self._local.stats = (version, stats)  # data_version moves on any other connection's commit
        return stats

    def doc_freqs(self, terms: list[str]) -> dict[str, int]:
        """How many chunks hold each term (any column; tag tokens never collide with words)."""
        if not terms:
            return {}
        marks = ",".join("?" * len(terms))
        rows = self._read(f"SELECT term, doc FROM fts_vocab WHERE term IN ({marks})", terms)
        return {r["term"]: r["doc"] for r in rows}

    # -- vectors ---------------------------------------------------------------------------------

    def vectors(self, shas: list[str], model: str) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        conn = self._reader()
        for i in range(0, len(shas), 500):
            part = shas[i : i + 500]
            marks = ",".join("?" * len(part))
            for r in conn.execute(f"SELECT sha, vec FROM vectors WHERE model = ? AND sha IN ({marks})", [model, *part]):
                out[r["sha"]] = r["vec"]
        return out

    def put_vectors(self, model: str, items: list[tuple[str, bytes]]) -> None:
        with self._tx() as conn:
            conn.executemany("INSERT OR REPLACE INTO vectors (sha, model, vec) VALUES (?, ?, ?)",
                             [(sha, model, vec) for sha, vec in items])

    def vector_counts(self) -> dict[str, int]:
        return {r["model"]: r["n"] for r in self._reader().execute(
            "SELECT model, COUNT(*) AS n FROM vectors GROUP BY model")}

    # -- status ----------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        conn = self._reader()
        files = conn.execute("SELECT COUNT(*) FROM files").fetchone()[0]
        chunks = conn.execute("SELECT COUNT(*) FROM chunks WHERE kind != ?", (CONVERSATION,)).fetchone()[0]
        messages = conn.execute("SELECT COUNT(*) FROM chunks WHERE kind = ?", (CONVERSATION,)).fetchone()[0]
        return {"files": files, "chunks": chunks, "messages": messages}

    def rebuilt_ms(self) -> int | None:
        row = self._reader().execute("SELECT value FROM meta WHERE key = 'rebuilt_ms'").fetchone()
        return int(row["value"]) if row else None
