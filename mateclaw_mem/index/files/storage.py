"""The SQLite side of the file index: `workspace/.mateclaw/index.db` (WAL, FTS5), its connections
and its row writes.

Tables:

- `files`: one row per indexed memory file with the mtime, size and SHA-256 it had when indexed
  (what reconcile compares against the disk).
- `chunks`: the searchable pieces (see `index/chunker.py`) plus conversation messages
  (`kind = 'conversation'`), with agent, owner, rel, title and line range. Not the turns AML Add
  logged (`AML_TRIGGER`): those live once in the log and once in the message index, which the file
  search reads for them (`index/message_hits.py`); copies an older version made are dropped once
  (`ingest.drop_aml_copies`).
- `fts`: FTS5 over our own tokens (`index/tokenizer.py`) in three columns: `title`, `body`, and
  `tag` - hashed agent/owner/kind tokens, so that an unranked search (one made of very common
  terms) filters inside the full-text index and stops after `LIMIT` rows; a ranked search checks
  the chunk rows instead, before its `LIMIT` (see `query.match`).
- `vectors`: optional embeddings keyed by (chunk text hash, model), so a rebuild keeps them and a
  new embedding model simply finds none of its own (stale vectors are never mixed in).
- `meta`: the conversation-log watermark, the tokenizer version, the last sync and rebuild times.

Owners: `None` is "no owner" everywhere above this module; the `owner` columns store it as ""
(`owner_column` on the way in, `owner_of` on the way out).
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from mateclaw_mem.db import connect, immediate, migrated, owner_column, run_once
from mateclaw_mem.index.chunker import CONVERSATION, daily_date, file_kind, scopes_of
from mateclaw_mem.index.sources import AML_TRIGGER, SourcedMessage
from mateclaw_mem.index.tokenizer import TOKENIZER_VERSION, tokenize
from mateclaw_mem.redaction import redact

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock

T = TypeVar("T")

_READ_RETRIES = 6
_SWAP_ERRORS = ("vtable constructor failed", "no such table", "database schema has changed")
_REDACTED = "redacted:index.db"  # `meta` marker (and count) of the one-time redaction in place


@dataclass(frozen=True)
class IndexedFile:
    agent: str
    owner: str | None
    rel: str
    mtime: float
    size: int
    sha: str


def owner_of(column: str) -> str | None:
    return column or None


def tag(prefix: str, value: str) -> str:
    """A single unicode61 token standing for an agent / owner / kind value."""
    return prefix + hashlib.blake2b(value.encode("utf-8"), digest_size=8).hexdigest()


def tags(agent: str, owner: str | None, kind: str) -> str:
    return " ".join([tag("a", agent), tag("o", owner_column(owner)), *(tag("s", scope) for scope in scopes_of(kind))])


def chunk_sha(title: str, text: str) -> str:
    return hashlib.sha256(f"{title}\n{text}".encode()).hexdigest()[:32]


def schema(s: str) -> str:
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
{scope_trigger(s, u)}
CREATE VIRTUAL TABLE IF NOT EXISTS fts{s} USING fts5(title, body, tag, tokenize='unicode61');
"""


def scope_trigger(s: str, u: str) -> str:
    # Every (agent, owner, kind) that has ever had a chunk (a superset: rows are not removed when
    # their chunks go, only when a rebuild recounts). A search whose scopes cover all of them needs
    # no per-match scope check (query.match). A trigger, so every writer keeps it, of any version.
    return (f"CREATE TRIGGER IF NOT EXISTS chunk_scope_{u} AFTER INSERT ON chunks{s} BEGIN"
            " INSERT OR IGNORE INTO chunk_scopes (agent, owner, kind) VALUES (new.agent, new.owner, new.kind); END;")


# True while `chunks` has the trigger above (an older version's rebuild, or a hand, may drop it):
# the census is trusted only then. An SQL expression, so a query can test it in its own snapshot.
CENSUS_KEPT = ("EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'chunks'"
               " AND name LIKE 'chunk\\_scope\\_%' ESCAPE '\\')")


_STATIC = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunk_scopes (agent TEXT NOT NULL, owner TEXT NOT NULL, kind TEXT NOT NULL,
                                         PRIMARY KEY (agent, owner, kind)) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS fts_vocab USING fts5vocab('fts', 'row');
CREATE TABLE IF NOT EXISTS vectors (sha TEXT NOT NULL, model TEXT NOT NULL, vec BLOB NOT NULL,
                                    PRIMARY KEY (sha, model)) WITHOUT ROWID;
"""


class FileStorage:
    """Thread-safe. Writes go through one connection under a lock; each reading thread has its own
    connection so searches never wait for an ingest or a rebuild batch."""

    def __init__(self, path: Path, clock: Clock) -> None:
        self.path = path
        self.clock = clock
        self.write_lock = threading.RLock()
        self.local = threading.local()  # per reading thread: its connection (and cached stats)
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._closed = False
        self.w = self._open()
        with self.write_lock:
            # Lets a rebuild hand the old tables' pages back. `connect` has already switched the file
            # to WAL, which writes its header, so the setting needs a VACUUM to apply (instant while
            # the file is empty; an existing index gets it after its next rebuild).
            self.w.execute("PRAGMA auto_vacuum = INCREMENTAL")
            if self.w.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0:
                self.w.execute("VACUUM")
            self.w.executescript(_STATIC)
            if not self._table_exists(self.w, "files"):
                self.w.executescript(schema(""))
            elif not self.w.execute(f"SELECT {CENSUS_KEPT}").fetchone()[0]:  # made before the census: count it
                with self.tx() as conn:
                    conn.execute(scope_trigger("", uuid.uuid4().hex[:8]))
                    self.recount_scopes(conn)
            if self.w.execute("SELECT 1 FROM chunks LIMIT 1").fetchone() is None:
                with self.tx() as conn:
                    self.set_tokenizer(conn)
        run_once(self.w, self.write_lock, _REDACTED, self._redact_stored)

    @staticmethod
    def recount_scopes(conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM chunk_scopes")
        conn.execute("INSERT INTO chunk_scopes (agent, owner, kind) SELECT DISTINCT agent, owner, kind FROM chunks")

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
        return migrated(self.reader(), _REDACTED).get("")

    @staticmethod
    def set_tokenizer(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('tokenizer', ?)", (TOKENIZER_VERSION,))

    def stale_tokenizer(self) -> str | None:
        """The tokenizer this index was built with when it is not the current one (its tokens
        would silently miss the current query tokens: rebuild), else None."""
        row = self.reader().execute("SELECT value FROM meta WHERE key = 'tokenizer'").fetchone()
        if row is not None and row["value"] == TOKENIZER_VERSION:
            return None
        if self.reader().execute("SELECT 1 FROM chunks LIMIT 1").fetchone() is None:
            return None
        return row["value"] if row is not None else "unversioned"

    # -- connections -----------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        conn = connect(self.path)
        with self._conns_lock:
            self._conns.append(conn)
        return conn

    def reader(self) -> sqlite3.Connection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self._open()
            self.local.conn = conn
        return conn

    def tx(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return immediate(self.w, self.write_lock)

    def read(self, sql: str, params: Iterable = ()) -> list[sqlite3.Row]:
        """A read that survives a rebuild's table swap.

        A statement prepared just before the swap commits can find the FTS5 table gone when it runs
        ("vtable constructor failed", "no such table"); SQLite re-prepares ordinary tables itself but
        not this case. The next attempt sees the new tables, so a short retry is the whole fix."""
        for attempt in range(_READ_RETRIES):
            try:
                return self.reader().execute(sql, tuple(params)).fetchall()
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

    def now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)

    # -- meta ------------------------------------------------------------------------------------

    def mark_synced(self, conn: sqlite3.Connection | None = None) -> None:
        """Remember (in the index, so every process sees it) when the index last caught up with the disk."""
        sql = "INSERT OR REPLACE INTO meta (key, value) VALUES ('last_sync_ms', ?)"
        if conn is not None:
            conn.execute(sql, (str(self.now_ms()),))
        else:
            with self.tx() as c:
                c.execute(sql, (str(self.now_ms()),))

    def meta_ms(self, key: str) -> int | None:
        row = self.reader().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row["value"]) if row else None

    @staticmethod
    def watermark(conn: sqlite3.Connection, key: str = "messages_watermark") -> int:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row["value"]) if row else 0

    # -- files -----------------------------------------------------------------------------------

    def indexed_files(self, agent: str | None = None) -> dict[tuple[str, str | None, str], IndexedFile]:
        sql = "SELECT agent, owner, rel, mtime, size, sha FROM files"
        params: tuple = ()
        if agent:
            sql += " WHERE agent = ?"
            params = (agent,)
        rows = self.reader().execute(sql, params).fetchall()
        return {(r["agent"], owner_of(r["owner"]), r["rel"]): IndexedFile(r["agent"], owner_of(r["owner"]), r["rel"],
                                                                          r["mtime"], r["size"], r["sha"])
                for r in rows}

    def file_row(self, agent: str, owner: str | None, rel: str) -> sqlite3.Row | None:
        return self.reader().execute(
            "SELECT id, mtime, size, sha FROM files WHERE agent = ? AND owner = ? AND rel = ?",
            (agent, owner_column(owner), rel),
        ).fetchone()

    def chunk_count(self, file_id: int) -> int:
        conn = self.reader()
        chunks = conn.execute("SELECT COUNT(*) FROM chunks WHERE file_id = ?", (file_id,)).fetchone()[0]
        in_fts = conn.execute(
            "SELECT COUNT(*) FROM fts WHERE rowid IN (SELECT id FROM chunks WHERE file_id = ?)", (file_id,)
        ).fetchone()[0]
        return chunks if chunks == in_fts else -1

    @staticmethod
    def delete_file(conn: sqlite3.Connection, s: str, agent: str, owner: str | None, rel: str) -> bool:
        row = conn.execute(
            f"SELECT id FROM files{s} WHERE agent = ? AND owner = ? AND rel = ?", (agent, owner_column(owner), rel)
        ).fetchone()
        if row is None:
            return False
        conn.execute(f"DELETE FROM fts{s} WHERE rowid IN (SELECT id FROM chunks{s} WHERE file_id = ?)", (row["id"],))
        conn.execute(f"DELETE FROM chunks{s} WHERE file_id = ?", (row["id"],))
        conn.execute(f"DELETE FROM files{s} WHERE id = ?", (row["id"],))
        return True

    def insert_file(
        self, conn: sqlite3.Connection, s: str, agent: str, owner: str | None, rel: str, mtime: float, size: int,
        sha: str, chunks: list,
    ) -> None:
        kind = file_kind(rel)
        cur = conn.execute(
            f"INSERT INTO files{s} (agent, owner, rel, kind, mtime, size, sha, indexed_ms)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (agent, owner_column(owner), rel, kind, mtime, size, sha, self.now_ms()),
        )
        self._insert_chunks(conn, s, cur.lastrowid, agent, owner, rel, chunks)

    def update_file(
        self, conn: sqlite3.Connection, file_id: int, agent: str, owner: str | None, rel: str, mtime: float,
        size: int, sha: str, chunks: list,
    ) -> int:
        """Bring an indexed file's rows to `chunks` touching only the sections that changed: a hand
        edit of one section of a long file tokenizes and writes that section, not the file. A
        section kept as it was keeps its row (only its line numbers follow the edit). Returns how
        many chunks were written."""
        old: dict[str, list[sqlite3.Row]] = {}
        for r in conn.execute("SELECT id, sha, line_start, line_end FROM chunks WHERE file_id = ? ORDER BY id",
                              (file_id,)):
            old.setdefault(r["sha"], []).append(r)
        fresh = []
        for ch in chunks:
            kept = old.get(chunk_sha(ch.title, ch.text))
            if not kept:
                fresh.append(ch)
                continue
            r = kept.pop(0)
            if (r["line_start"], r["line_end"]) != (ch.line_start, ch.line_end):
                conn.execute("UPDATE chunks SET line_start = ?, line_end = ? WHERE id = ?",
                             (ch.line_start, ch.line_end, r["id"]))
        gone = [(r["id"],) for rows in old.values() for r in rows]
        conn.executemany("DELETE FROM fts WHERE rowid = ?", gone)
        conn.executemany("DELETE FROM chunks WHERE id = ?", gone)
        conn.execute("UPDATE files SET mtime = ?, size = ?, sha = ?, indexed_ms = ? WHERE id = ?",
                     (mtime, size, sha, self.now_ms(), file_id))
        self._insert_chunks(conn, "", file_id, agent, owner, rel, fresh)
        return len(fresh)

    def insert_chunks(self, conn: sqlite3.Connection, file_id: int, agent: str, owner: str | None, rel: str,
                      chunks: list) -> None:
        """More chunks of an indexed file (an oversized one is written a part at a time)."""
        self._insert_chunks(conn, "", file_id, agent, owner, rel, chunks)

    def _insert_chunks(
        self, conn: sqlite3.Connection, s: str, file_id: int | None, agent: str, owner: str | None, rel: str,
        chunks: list,
    ) -> None:
        kind = file_kind(rel)
        day = daily_date(rel)
        file_tags = tags(agent, owner, kind)
        for ch in chunks:
            title_tokens, body_tokens = tokenize(ch.title), tokenize(ch.text)
            cur = conn.execute(
                f"INSERT INTO chunks{s} (file_id, agent, owner, rel, kind, title, line_start, line_end, text, sha,"
                " ntok, day) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (file_id, agent, owner_column(owner), rel, kind, ch.title, ch.line_start, ch.line_end, ch.text,
                 chunk_sha(ch.title, ch.text), len(title_tokens) + len(body_tokens), day.isoformat() if day else None),
            )
            conn.execute(
                f"INSERT INTO fts{s} (rowid, title, body, tag) VALUES (?, ?, ?, ?)",
                (cur.lastrowid, " ".join(title_tokens), " ".join(body_tokens), file_tags),
            )

    @staticmethod
    def insert_messages(conn: sqlite3.Connection, s: str, messages: Iterable[SourcedMessage]) -> int:
        n = 0
        for m in messages:
            # A memoryless conversation asked not to be remembered: it is not searchable either.
            # An Add/Search turn is searched in the message index, its one derived copy.
            if m.memoryless or not m.content.strip() or m.trigger_source == AML_TRIGGER:
                continue
            rel = f"conversations/{m.conversation_id}"
            title = f"{m.role} message {m.id}"  # for display only: not tokenized, never matched
            body_tokens = tokenize(m.content)
            cur = conn.execute(
                f"INSERT INTO chunks{s} (file_id, agent, owner, rel, kind, title, line_start, line_end, text, sha,"
                " ntok, day, ts_ms, conversation_id, message_id)"
                " VALUES (NULL, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?, NULL, ?, ?, ?)",
                (m.agent, owner_column(m.owner), rel, CONVERSATION, title, m.content, chunk_sha("", m.content),
                 len(body_tokens), m.ts_ms, m.conversation_id, m.id),
            )
            conn.execute(
                f"INSERT INTO fts{s} (rowid, title, body, tag) VALUES (?, '', ?, ?)",
                (cur.lastrowid, " ".join(body_tokens), tags(m.agent, m.owner, CONVERSATION)),
            )
            n += 1
        return n

    # -- vectors and status ----------------------------------------------------------------------

    def vectors(self, shas: list[str], model: str) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        conn = self.reader()
        for i in range(0, len(shas), 500):
            part = shas[i : i + 500]
            marks = ",".join("?" * len(part))
            for r in conn.execute(f"SELECT sha, vec FROM vectors WHERE model = ? AND sha IN ({marks})", [model, *part]):
                out[r["sha"]] = r["vec"]
        return out

    def put_vectors(self, model: str, items: list[tuple[str, bytes]]) -> None:
        with self.tx() as conn:
            conn.executemany("INSERT OR REPLACE INTO vectors (sha, model, vec) VALUES (?, ?, ?)",
                             [(sha, model, vec) for sha, vec in items])

    def vector_counts(self) -> dict[str, int]:
        return {r["model"]: r["n"] for r in self.reader().execute(
            "SELECT model, COUNT(*) AS n FROM vectors GROUP BY model")}

    def until_changed(self, name: str, compute: Callable[[], T]) -> T:
        """`compute()`, kept under `name` per reading connection until the database changes:
        `data_version` moves on any other connection's commit, and readers never write."""
        conn = self.reader()
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        cached = getattr(self.local, name, None)
        if cached is not None and cached[0] is conn and cached[1] == version:
            return cached[2]
        value = compute()
        setattr(self.local, name, (conn, version, value))
        return value

    def counts(self) -> dict[str, int]:
        """Files, file chunks and message chunks, until the database changes: counting by kind reads
        every chunk row, and /health and `status` ask on every call."""
        def count() -> dict[str, int]:
            conn = self.reader()
            files = conn.execute("SELECT COUNT(*) FROM files").fetchone()[0]
            chunks = conn.execute("SELECT COUNT(*) FROM chunks WHERE kind != ?", (CONVERSATION,)).fetchone()[0]
            messages = conn.execute("SELECT COUNT(*) FROM chunks WHERE kind = ?", (CONVERSATION,)).fetchone()[0]
            return {"files": files, "chunks": chunks, "messages": messages}

        return dict(self.until_changed("counts", count))
