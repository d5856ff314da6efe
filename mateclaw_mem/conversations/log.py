"""The conversation log: every message as it was said, in `workspace/.mateclaw/log.db`.

Every message as it was said, except its secrets: content is redacted before it is logged
(`mateclaw_mem.redaction`), so no reader of the log - search, context, recall, AML - can return a
key or a password. A log written by an older version that stored raw text is redacted in place once,
when it is first opened (`REDACTED`: marker and count in `meta`, shown by `status`).

A log, not derived data: nothing here is rebuilt from anything else, so rows are only ever
appended. Search indexes (`index/messages/`) are derived from it and can be rebuilt.

Idempotency records (request id -> body hash, response) live in the same database and are written
in the same transaction as the messages they describe: a retried request either sees the record
(and replays the response) or the messages were never committed. There is no window in which a
retry can append the messages a second time.

"No owner" is None in every signature and every row read back, and "" in the `owner` columns (a
NOT NULL key part): `owner_column` converts on the way in, `normalise_owner` on the way out.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mateclaw_mem.db import SharedConnection, migrated, owner_column, run_once
from mateclaw_mem.errors import ConflictError
from mateclaw_mem.redaction import redact
from mateclaw_mem.workspace.walk import normalise_owner

INSERT_COLUMNS = ("agent, owner, conversation_id, role, content, ts_ms, trigger_source, finish_reason, memoryless,"
                  " request_id, created_ms, attachments")
_INSERT_MESSAGE = f"INSERT INTO messages ({INSERT_COLUMNS}) VALUES ({', '.join('?' * 12)})"
REDACTED = "redacted:"  # `meta` marker prefix of the one-time redaction of stored rows
# Text columns of log.db that hold what people and models said. aml_facts belongs to
# conversations.facts.FactStore but lives in this file: the log's migration covers the whole file.
_REDACT_COLUMNS = (("messages", "content"), ("aml_facts", "text"))

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    conversation_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    ts_ms INTEGER NOT NULL,
    trigger_source TEXT NOT NULL DEFAULT 'chat',
    finish_reason TEXT,
    memoryless INTEGER NOT NULL DEFAULT 0,
    request_id TEXT,
    created_ms INTEGER NOT NULL,
    attachments TEXT
);
CREATE INDEX IF NOT EXISTS messages_by_conversation
    ON messages (agent, owner, conversation_id, id);
CREATE TABLE IF NOT EXISTS attachment_blobs (
    message_id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (message_id, position)
);
CREATE INDEX IF NOT EXISTS attachment_blobs_by_hash ON attachment_blobs (agent, owner, sha256);
CREATE TABLE IF NOT EXISTS requests (
    owner TEXT NOT NULL,
    request_id TEXT NOT NULL,
    body_hash TEXT NOT NULL,
    response TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (owner, request_id)
);
"""

# Request ids are the caller's, so they are unique per owner (an AML user_id), never across owners:
# in one namespace for everyone, one user's id made another's Add answer 409. Older logs kept them in
# `idempotency`, keyed by request id alone; its rows move over once, with the owner of their messages.
_MIGRATE_REQUESTS = """
INSERT OR IGNORE INTO requests (owner, request_id, body_hash, response, created_ms)
    SELECT COALESCE((SELECT m.owner FROM messages m WHERE m.request_id = i.request_id LIMIT 1), ''),
           i.request_id, i.body_hash, i.response, i.created_ms
    FROM idempotency i;
DROP TABLE idempotency;
"""


# Non-text parts of a message (AML content parts: image references, `conversations.parts`), as a JSON
# list, NULL for a message of text only. Added after the first release: older logs gain the column.
_ADD_ATTACHMENTS = "ALTER TABLE messages ADD COLUMN attachments TEXT"


# Not frozen: an AML Add makes 20, and a frozen dataclass's __init__ sets each field through
# object.__setattr__ (~0.6 us a message against ~0.15; nothing hashes or changes one).
@dataclass(slots=True)
class NewMessage:
    role: str
    content: str
    ts_ms: int | None = None  # None: the time of the append
    # Non-text parts, each a JSON object with a "type" (already redacted and bounded by the caller).
    attachments: tuple[Mapping[str, Any], ...] = ()
    # Bytes kept for some of them (AML images with `aml.images: keep`): (position in `attachments`,
    # sha256, bytes), in `attachment_blobs`, written in the message's transaction.
    blobs: tuple[tuple[int, str, bytes], ...] = ()


@dataclass(frozen=True)
class StoredMessage:
    id: int
    agent: str
    owner: str | None
    conversation_id: str
    role: str
    content: str
    ts_ms: int
    trigger_source: str
    finish_reason: str | None
    memoryless: bool
    request_id: str | None
    attachments: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class OnceResult:
    """What `append_once` did: `replayed` means the request id was seen before with this body."""

    ids: list[int]
    response: str
    replayed: bool


def _row_to_message(row: sqlite3.Row) -> StoredMessage:
    return StoredMessage(
        id=row["id"],
        agent=row["agent"],
        owner=normalise_owner(row["owner"]),
        conversation_id=row["conversation_id"],
        role=row["role"],
        content=row["content"],
        ts_ms=row["ts_ms"],
        trigger_source=row["trigger_source"],
        finish_reason=row["finish_reason"],
        memoryless=bool(row["memoryless"]),
        request_id=row["request_id"],
        attachments=tuple(json.loads(row["attachments"])) if row["attachments"] else (),
    )


class ConversationLog(SharedConnection):
    """Append-only message log. Thread-safe: one connection guarded by a lock.

    One connection rather than one per thread because every operation is a few milliseconds and
    SQLite serialises writers anyway; across processes, `BEGIN IMMEDIATE` plus the busy timeout
    from `db.connect` keeps writers from interleaving.
    """

    # KiB of SQLite page cache for this connection (its default is 2,000): an append touches the b-trees'
    # interior pages and a few leaves, and the rest of the cache only held what earlier Adds wrote - 2 MB
    # of the daemon's RSS after 100k messages of Adds, taken from the search cache's room (runtime/malloc.py).
    # An append of 20 messages costs the same: p50 239-256 us at 256 KiB vs 243-257 at the default.
    CACHE_KIB = 256

    def __init__(self, db_path: Path) -> None:
        super().__init__(db_path, _SCHEMA)
        self._conn.execute(f"PRAGMA cache_size = -{self.CACHE_KIB}")
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'idempotency'").fetchone():
                for statement in filter(str.strip, _MIGRATE_REQUESTS.split(";")):
                    conn.execute(statement)
            if "attachments" not in {r["name"] for r in conn.execute("PRAGMA table_info(messages)")}:
                conn.execute(_ADD_ATTACHMENTS)
            # Partial, so it costs nothing for text: `has_attachments` at start-up reads it, not the table.
            conn.execute("CREATE INDEX IF NOT EXISTS messages_with_attachments ON messages (agent)"
                         " WHERE attachments IS NOT NULL")
        run_once(self._conn, self._lock, REDACTED + "log.db", _redact_stored)

    def holding(self, agent: str, owner: str) -> AbstractContextManager[object]:
        """Within: this owner's writes are one transaction that other writers of the owner wait
        for (the PostgreSQL store, conversations/pg/: log and index in one database). Here nothing:
        the log and the index are two files, and their locks (held by the caller) keep this process's
        Adds out; another process's Add lands before or after, and its index catches up by `sync`."""
        return nullcontext()

    def redacted_on_migration(self) -> dict[str, int]:
        """Rows the one-time migration redacted in place, per table (for `status`)."""
        with self._lock:
            return migrated(self._conn, REDACTED + "log.db:")

    def _insert(
        self,
        conn: sqlite3.Connection,
        agent: str,
        conversation_id: str,
        messages: list[NewMessage],
        *,
        owner: str | None,
        trigger_source: str,
        finish_reason: str | None,
        memoryless: bool,
        request_id: str | None,
        now_ms: int,
    ) -> list[int]:
        key = owner_column(owner)
        ids = self._insert_rows(conn, [
            (agent, key, conversation_id, m.role, redact(m.content), m.ts_ms if m.ts_ms is not None else now_ms,
             trigger_source, finish_reason, int(memoryless), request_id, now_ms,
             json.dumps(list(m.attachments), ensure_ascii=False) if m.attachments else None)
            for m in messages])
        conn.executemany(
            "INSERT INTO attachment_blobs (message_id, position, agent, owner, sha256, data) VALUES (?, ?, ?, ?, ?, ?)",
            [(mid, pos, agent, key, sha, data) for mid, m in zip(ids, messages, strict=True)
             for pos, sha, data in m.blobs])
        return ids

    def _insert_rows(self, conn: sqlite3.Connection, rows: list[tuple[object, ...]]) -> list[int]:
        """Insert `messages` rows (`INSERT_COLUMNS`, in order); their ids in order (the PostgreSQL
        store inserts them in one statement: one round trip, not one per message)."""
        ids: list[int] = []
        for row in rows:
            cur = conn.execute(_INSERT_MESSAGE, row)
            assert cur.lastrowid is not None
            ids.append(cur.lastrowid)
        return ids

    def append(
        self,
        agent: str,
        conversation_id: str,
        messages: list[NewMessage],
        *,
        owner: str | None = None,
        trigger_source: str = "chat",
        finish_reason: str | None = None,
        memoryless: bool = False,
        request_id: str | None = None,
        now_ms: int,
    ) -> list[int]:
        """Append `messages` in one transaction; returns their ids in order."""
        with self._write() as conn:
            return self._insert(
                conn,
                agent,
                conversation_id,
                messages,
                owner=owner,
                trigger_source=trigger_source,
                finish_reason=finish_reason,
                memoryless=memoryless,
                request_id=request_id,
                now_ms=now_ms,
            )

    def append_once(
        self,
        request_id: str,
        body_hash: str,
        response: str,
        agent: str,
        conversation_id: str,
        messages: list[NewMessage],
        *,
        owner: str | None = None,
        trigger_source: str = "chat",
        now_ms: int,
    ) -> OnceResult:
        """Append unless `owner` already sent `request_id`: same body -> replay, other body ->
        ConflictError. Another owner's request with the same id is a request of its own.
        `body_hash` must cover `conversation_id` (a replay looks its messages up there).

        The check and the insert share one IMMEDIATE transaction, so two concurrent deliveries
        of the same request cannot both append.
        """
        key = owner_column(owner)
        with self._write() as conn:
            row = conn.execute(
                "SELECT body_hash, response FROM requests WHERE owner = ? AND request_id = ?", (key, request_id)
            ).fetchone()
            if row is not None:
                if row["body_hash"] != body_hash:
                    raise ConflictError(
                        "request_id was already used with a different body; use a new request_id"
                    )
                # Same body hash, so same conversation: the conversation narrows the scan to the
                # `messages_by_conversation` index instead of every message of the owner.
                ids = [
                    r["id"]
                    for r in conn.execute(
                        "SELECT id FROM messages WHERE agent = ? AND owner = ? AND conversation_id = ?"
                        " AND request_id = ? ORDER BY id",
                        (agent, key, conversation_id, request_id),
                    )
                ]
                return OnceResult(ids=ids, response=row["response"], replayed=True)
            ids = self._insert(
                conn,
                agent,
                conversation_id,
                messages,
                owner=owner,
                trigger_source=trigger_source,
                finish_reason=None,
                memoryless=False,
                request_id=request_id,
                now_ms=now_ms,
            )
            conn.execute(
                "INSERT INTO requests (owner, request_id, body_hash, response, created_ms)"
                " VALUES (?, ?, ?, ?, ?)",
                (key, request_id, body_hash, response, now_ms),
            )
            return OnceResult(ids=ids, response=response, replayed=False)

    def messages(
        self,
        agent: str,
        conversation_id: str,
        *,
        owner: str | None = None,
        after_id: int = 0,
        limit: int | None = None,
    ) -> list[StoredMessage]:
        """One conversation's messages in append order, starting after `after_id`."""
        sql = (
            "SELECT * FROM messages WHERE agent = ? AND owner = ? AND conversation_id = ? AND id > ?"
            " ORDER BY id"
        )
        params: list[object] = [agent, owner_column(owner), conversation_id, after_id]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._lock:
            return [_row_to_message(r) for r in self._conn.execute(sql, params)]

    def by_ids(self, ids: list[int]) -> list[StoredMessage]:
        """The messages with these ids (those that exist), in id order."""
        if not ids:
            return []
        with self._lock:
            rows = self._conn.execute(
                f"SELECT * FROM messages WHERE id IN ({','.join('?' * len(ids))}) ORDER BY id", ids
            ).fetchall()
        return [_row_to_message(r) for r in rows]

    def attachments(self, ids: list[int]) -> dict[int, tuple[dict[str, Any], ...]]:
        """The non-text parts of those of these messages that have any, by id."""
        if not ids:
            return {}
        with self._lock:
            rows = self._conn.execute(
                f"SELECT id, attachments FROM messages WHERE id IN ({','.join('?' * len(ids))})"
                " AND attachments IS NOT NULL", ids
            ).fetchall()
        return {r["id"]: tuple(json.loads(r["attachments"])) for r in rows}

    def blobs(self, message_id: int, budget: int) -> dict[int, bytes]:
        """The kept bytes of one message's attachments, by position, in order while they fit in `budget`
        bytes (sizes are read first: an answer's images are never all loaded to be cut afterwards)."""
        with self._lock:
            sizes = self._conn.execute("SELECT position, length(data) AS n FROM attachment_blobs WHERE message_id = ?"
                                       " ORDER BY position", (message_id,)).fetchall()
            wanted = []
            for r in sizes:
                if r["n"] <= budget:
                    wanted.append(r["position"])
                    budget -= r["n"]
            if not wanted:
                return {}
            rows = self._conn.execute(
                f"SELECT position, data FROM attachment_blobs WHERE message_id = ? AND position IN"
                f" ({','.join('?' * len(wanted))})", (message_id, *wanted)).fetchall()
        return {r["position"]: r["data"] for r in rows}

    def with_blob(self, agent: str, owner: str, hashes: list[str], limit: int) -> list[int]:
        """Ids of this owner's messages holding a kept attachment with one of these SHA-256s, newest first."""
        if not hashes:
            return []
        with self._lock:
            rows = self._conn.execute(
                f"SELECT DISTINCT message_id FROM attachment_blobs WHERE agent = ? AND owner = ? AND sha256 IN"
                f" ({','.join('?' * len(hashes))}) ORDER BY message_id DESC LIMIT ?",
                (agent, owner_column(owner), *hashes, limit)).fetchall()
        return [r["message_id"] for r in rows]

    def has_attachments(self, agent: str) -> bool:
        with self._lock:
            return self._conn.execute(
                "SELECT 1 FROM messages WHERE agent = ? AND attachments IS NOT NULL LIMIT 1", (agent,)
            ).fetchone() is not None

    def before(
        self, agent: str, conversation_id: str, before_id: int, *, owner: str | None = None, limit: int
    ) -> list[StoredMessage]:
        """Up to `limit` messages of one conversation just before `before_id`, in append order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM messages WHERE agent = ? AND owner = ? AND conversation_id = ? AND id < ?"
                " ORDER BY id DESC LIMIT ?",
                (agent, owner_column(owner), conversation_id, before_id, limit),
            ).fetchall()
        return [_row_to_message(r) for r in reversed(rows)]

    def around(self, agent: str, owner: str | None, ids: list[int], n: int
               ) -> dict[int, tuple[list[StoredMessage], list[StoredMessage]]]:
        """For each of these messages (of this agent and owner), up to `n` messages of its conversation
        just before it and just after it, in conversation order (AML evidence windows)."""
        out: dict[int, tuple[list[StoredMessage], list[StoredMessage]]] = {}
        key = (agent, owner_column(owner))
        mine = "agent = ? AND owner = ? AND conversation_id = ?"
        with self._lock:
            for mid in ids:
                row = self._conn.execute(
                    "SELECT conversation_id FROM messages WHERE id = ? AND agent = ? AND owner = ?", (mid, *key)
                ).fetchone()
                if row is None:
                    continue
                where = (*key, row["conversation_id"], mid, n)
                before = self._conn.execute(f"SELECT * FROM messages WHERE {mine} AND id < ? ORDER BY id DESC LIMIT ?",
                                            where).fetchall()
                after = self._conn.execute(f"SELECT * FROM messages WHERE {mine} AND id > ? ORDER BY id LIMIT ?",
                                           where).fetchall()
                out[mid] = ([_row_to_message(r) for r in reversed(before)], [_row_to_message(r) for r in after])
        return out

    def since(self, after_id: int, *, limit: int = 1000) -> list[StoredMessage]:
        """Messages of every conversation with id > `after_id`, in id order (for index catch-up)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM messages WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit)
            ).fetchall()
        return [_row_to_message(r) for r in rows]

    def since_kept(self, after_id: int, *, skip_source: str,
                   limit: int = 1000) -> tuple[list[StoredMessage], int]:
        """`since`, leaving out the messages `skip_source` logged (SQLite skips them: never made into
        Python objects), and the id the log was read up to: the last one returned when `limit` were,
        else the last id of the log. The file index reads the log so, past the Add/Search turns it
        keeps no copy of: its catch-up read every one of them, seconds of the daemon's CPU after a
        stream of Adds (issue 36)."""
        with self._lock:
            # Read first: every message at or below it is committed (ids are given under SQLite's one
            # write lock, so a transaction still open holds only ids above it).
            upto = self._conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0]
            rows = self._conn.execute(
                "SELECT * FROM messages WHERE id > ? AND id <= ? AND trigger_source IS NOT ? ORDER BY id LIMIT ?",
                (after_id, upto, skip_source, limit)).fetchall()
        kept = [_row_to_message(r) for r in rows]
        return kept, (kept[-1].id if len(kept) == limit else max(upto, after_id))

    def conversation_flags(self, agent: str, conversation_id: str, owner: str | None = None) -> dict:
        """Facts about a conversation that gate post-chat work (memoryless, sources, size)."""
        with self._lock:
            row = self._conn.execute(
                "SELECT COUNT(*) AS n, MAX(memoryless) AS memoryless,"
                " GROUP_CONCAT(DISTINCT trigger_source) AS sources, MAX(id) AS last_id"
                " FROM messages WHERE agent = ? AND owner = ? AND conversation_id = ?",
                (agent, owner_column(owner), conversation_id),
            ).fetchone()
        return {
            "message_count": row["n"],
            "memoryless": bool(row["memoryless"] or 0),
            "trigger_sources": sorted((row["sources"] or "").split(",")) if row["sources"] else [],
            "last_id": row["last_id"] or 0,
        }

    def memoryless_among(self, agent: str, owner: str | None, conversation_ids: Iterable[str]) -> set[str]:
        """Which of these conversations are memoryless: one query for a prompt's recalled messages."""
        ids = sorted(set(conversation_ids))
        if not ids:
            return set()
        marks = ",".join("?" * len(ids))
        with self._lock:
            rows = self._conn.execute(
                f"SELECT DISTINCT conversation_id FROM messages WHERE agent = ? AND owner = ? AND memoryless = 1"
                f" AND conversation_id IN ({marks})", (agent, owner_column(owner), *ids)).fetchall()
        return {r["conversation_id"] for r in rows}

    def rewrite(self, agent: str, owner: str | None, fn: Callable[[str], str]) -> dict[str, dict[int, str]]:
        """Rewrite one owner's stored text in place where `fn` changes it: a forget (the person asked
        for the words to go, so the log gives them up too - like the redaction of secrets). Covers
        the messages and the AML facts in this file; returns {table: {id: new text}}."""
        out: dict[str, dict[int, str]] = {}
        with self._lock:  # the old words overwritten on disk too, not left in free pages or the WAL
            self._conn.execute("PRAGMA secure_delete = ON")
        with self._write() as conn:
            for table, column in _REDACT_COLUMNS:
                if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone():
                    rows = conn.execute(f"SELECT id, {column} AS text FROM {table} WHERE agent = ? AND owner = ?",
                                        (agent, owner_column(owner))).fetchall()
                    out[table] = {r["id"]: new for r in rows if (new := fn(r["text"])) != r["text"]}
                    conn.executemany(f"UPDATE {table} SET {column} = ? WHERE id = ?",
                                     [(t, i) for i, t in out[table].items()])
        with self._lock:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return out

    def delete_owner(self, agent: str, owner: str) -> dict[str, int]:
        """Every row of one owner of `agent` in this file deleted (a person's data on request or at
        the end of its retention, conversations/aml_users.py): their messages and kept images, the idempotency
        records of their requests, the AML facts and fact jobs, the model-step failures filed under
        them. Rows per table; the caller scrubs the file (the old pages still hold the words)."""
        key = owner_column(owner)
        mine = "agent = ? AND owner = ?"
        steps = (  # requests first: found through the messages (another face's owner of that name keeps its own)
            ("requests", "owner = ? AND request_id IN (SELECT request_id FROM messages WHERE agent = ? AND owner = ?"
                         " AND request_id IS NOT NULL)", (key, agent, key)),
            ("messages", mine, (agent, key)), ("attachment_blobs", mine, (agent, key)),
            ("aml_facts", mine, (agent, key)), ("aml_fact_jobs", mine, (agent, key)),
            ("model_step_failures", mine, (agent, key)),
        )
        out: dict[str, int] = {}
        with self._lock:
            self._conn.execute("PRAGMA secure_delete = ON")
        with self._write() as conn:
            present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            for table, where, params in steps:
                if table in present:
                    out[table] = conn.execute(f"DELETE FROM {table} WHERE {where}", params).rowcount
        return out

    def owners_idle_since(self, agent: str, before_ms: int) -> list[str]:
        """Owners of `agent` whose latest message was logged before `before_ms` (retention)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT owner FROM messages WHERE agent = ? GROUP BY owner HAVING MAX(created_ms) < ?",
                (agent, before_ms)).fetchall()
        return [r["owner"] for r in rows]


def _redact_stored(conn: sqlite3.Connection) -> int:
    """Redact, in place, what an older version logged raw; one `meta` row per table with its count."""
    total = 0
    for table, column in _REDACT_COLUMNS:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone() is None:
            continue
        changed = [
            (clean, r["id"])
            for r in conn.execute(f"SELECT id, {column} AS text FROM {table}")
            if (clean := redact(r["text"])) != r["text"]
        ]
        conn.executemany(f"UPDATE {table} SET {column} = ? WHERE id = ?", changed)
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                     (f"{REDACTED}log.db:{table}", str(len(changed))))
        total += len(changed)
    return total
