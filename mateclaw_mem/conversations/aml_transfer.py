"""`mateclaw-mem aml export|import`: an Add/Search store moved between SQLite and PostgreSQL, losslessly.

The file (docs/postgresql.md, "Moving a store") is JSON Lines, UTF-8, one record per line, gzip'd
when its name ends in `.gz` (import recognises gzip by its magic bytes, whatever the name):

    {"format": "mateclaw-aml-store", "version": 1, "agent": "aml", "source": "sqlite", "exported_ms": ...}
    {"t": "message", "id": 17, "owner": "u1", "session": "s1", "role": "user", "content": "...", "ts_ms": ...,
     "trigger_source": "aml", "finish_reason": null, "memoryless": false, "request_id": "r1",
     "created_ms": ..., "attachments": [{"type": "image", ...}] | null}
    {"t": "blob", "message_id": 17, "position": 0, "owner": "u1", "sha256": "<hex>", "data": "<base64>"}
    {"t": "request", "owner": "u1", "request_id": "r1", "body_hash": "<hex>", "response": "<the answer's JSON>",
     "created_ms": ...}
    {"t": "fact", "id": 3, "owner": ..., "session": ..., "text": ..., "source_ids": "[17, 18]", "ts_ms": ...,
     "job_id": 2, "created_ms": ...}
    {"t": "fact_job", "id": 2, "request_id": ..., "owner": ..., "session": ..., "message_ids": "[17, 18]",
     "status": "done", "attempts": 1, "error": null, "created_ms": ..., "updated_ms": ...}
    {"t": "end", "counts": {"message": 1, "blob": 1, "request": 1, "fact": 1, "fact_job": 1}}

Everything of the agent's Add/Search data that is not derived: messages with their ids (Search answers
name them: `m17`), sessions, roles, timestamps, owners and attachments; kept image bytes; idempotency
records with the body hash and the stored answer bytes (a retry after the move replays the same bytes,
a changed body is still a 409); model-mode facts (ids too: `f3`) and their jobs. The message index is
derived: import rebuilds it through the store's own path (`MessageIndex.sync`/`sync_facts`, as a
daemon's start catches up), so the ranking's tables are never copied.

Export reads in one read transaction (a consistent snapshot while daemons keep adding), page by page
by id; import writes in ONE write transaction, streaming (memory bounded by a page, not the file): a
bad line - not JSON, an unknown record, a missing or mistyped field, a blob whose bytes do not hash to
its sha256, an id already present, a record after the end or no end at all (a truncated file), counts
that disagree with the end record - rolls everything back and names the line and what is wrong.
Nothing is half imported; running it again after fixing the file is safe. Import only into a store
with no Add/Search data of the agent (moving is not merging: ids would collide).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import io
import json
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.errors import ConflictError, InvalidInputError
from mateclaw_mem.redaction import redact
from mateclaw_mem.wire import Wire

FORMAT = "mateclaw-aml-store"
VERSION = 1
PAGE = 500  # rows read or written at a time: the memory bound of both directions
MAX_LINE_BYTES = 96 << 20  # the largest record: a kept image (aml.image-max-bytes <= 64 MiB) as base64, and some
MAX_INT = 2**63 - 1
_GZIP_MAGIC = b"\x1f\x8b"

Int = StrictInt
Ms = Field(ge=0, le=MAX_INT)


class _Record(Wire):
    model_config = ConfigDict(extra="forbid", strict=True)


class Header(_Record):
    format: Literal["mateclaw-aml-store"]
    version: Literal[1]
    agent: StrictStr = Field(min_length=1)
    source: StrictStr
    exported_ms: Int = Ms


class MessageRec(_Record):
    t: Literal["message"]
    id: Int = Field(ge=1, le=MAX_INT)
    owner: StrictStr
    session: StrictStr = Field(min_length=1)
    role: StrictStr = Field(min_length=1)
    content: StrictStr
    ts_ms: Int = Ms
    trigger_source: StrictStr
    finish_reason: StrictStr | None
    memoryless: StrictBool
    request_id: StrictStr | None
    created_ms: Int = Ms
    attachments: list[dict[str, Any]] | None


class BlobRec(_Record):
    t: Literal["blob"]
    message_id: Int = Field(ge=1, le=MAX_INT)
    position: Int = Field(ge=0, le=10_000)
    owner: StrictStr
    sha256: StrictStr = Field(pattern=r"^[0-9a-f]{64}$")
    data: StrictStr


class RequestRec(_Record):
    t: Literal["request"]
    owner: StrictStr
    request_id: StrictStr = Field(min_length=1)
    body_hash: StrictStr = Field(min_length=1)
    response: StrictStr = Field(min_length=2)
    created_ms: Int = Ms


class FactRec(_Record):
    t: Literal["fact"]
    id: Int = Field(ge=1, le=MAX_INT)
    owner: StrictStr
    session: StrictStr
    text: StrictStr = Field(min_length=1)
    source_ids: StrictStr
    ts_ms: Int = Ms
    job_id: Int = Field(ge=0, le=MAX_INT)
    created_ms: Int = Ms


class FactJobRec(_Record):
    t: Literal["fact_job"]
    id: Int = Field(ge=1, le=MAX_INT)
    request_id: StrictStr = Field(min_length=1)
    owner: StrictStr
    session: StrictStr
    message_ids: StrictStr
    status: Literal["pending", "done", "failed"]
    attempts: Int = Field(ge=0, le=1_000_000)
    error: StrictStr | None
    created_ms: Int = Ms
    updated_ms: Int = Ms


class EndRec(_Record):
    t: Literal["end"]
    counts: dict[str, Int]


KINDS: dict[str, type[_Record]] = {"message": MessageRec, "blob": BlobRec, "request": RequestRec, "fact": FactRec,
                                   "fact_job": FactJobRec, "end": EndRec}
_JOB_COLUMNS = ("id, request_id, agent, owner, conversation_id, message_ids, status, attempts, error, created_ms,"
                " updated_ms")


@dataclass
class Moved:
    """What an export wrote or an import stored, per record kind."""

    counts: dict[str, int]
    agent: str

    def as_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "counts": self.counts}


# -- export --------------------------------------------------------------------------------------------


def _pages(conn: Any, select: str, params: tuple[Any, ...], keys: tuple[str, ...] = ("id",)) -> Iterator[Any]:
    """Rows of `select` (a SELECT ... WHERE ...) page by page in the order of `keys`: a keyset walk,
    so neither SQLite nor PostgreSQL hands over more than a page at once, and no OFFSET re-reads.
    Text keys compare by bytes on both (PostgreSQL's columns are COLLATE "C")."""
    after: tuple[Any, ...] | None = None
    order = ", ".join(keys)
    while True:
        if after is None:
            rows = conn.execute(f"{select} ORDER BY {order} LIMIT ?", (*params, PAGE)).fetchall()
        else:  # (a, b) > (x, y) spelled out: row values compare alike in both dialects this way
            past = " OR ".join("(" + " AND ".join([*(f"{k} = ?" for k in keys[:i]), f"{keys[i]} > ?"]) + ")"
                               for i in range(len(keys)))
            bound = tuple(v for i in range(len(keys)) for v in after[: i + 1])
            rows = conn.execute(f"{select} AND ({past}) ORDER BY {order} LIMIT ?", (*params, *bound, PAGE)).fetchall()
        yield from rows
        if len(rows) < PAGE:
            return
        after = tuple(rows[-1][k] for k in keys)


def export_store(log: ConversationLog, agent: str, out: IO[str], *, source: str, now_ms: int,
                 facts: bool = True) -> Moved:
    """Write `agent`'s Add/Search store to `out` (text, one JSON record per line), from one snapshot."""
    counts: Counter[str] = Counter()

    def emit(record: dict[str, Any]) -> None:
        out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        if record.get("t") not in (None, "end"):
            counts[record["t"]] += 1

    emit({"format": FORMAT, "version": VERSION, "agent": agent, "source": source, "exported_ms": now_ms})
    conn = log._conn
    with log.lock:
        conn.execute("BEGIN")  # one snapshot for every page below (PostgreSQL: REPEATABLE READ)
        try:
            for r in _pages(conn, "SELECT * FROM messages WHERE agent = ?", (agent,)):
                emit({"t": "message", "id": r["id"], "owner": r["owner"], "session": r["conversation_id"],
                      "role": r["role"], "content": r["content"], "ts_ms": r["ts_ms"],
                      "trigger_source": r["trigger_source"], "finish_reason": r["finish_reason"],
                      "memoryless": bool(r["memoryless"]), "request_id": r["request_id"],
                      "created_ms": r["created_ms"],
                      "attachments": json.loads(r["attachments"]) if r["attachments"] else None})
            for r in _pages(conn, "SELECT * FROM attachment_blobs WHERE agent = ?", (agent,),
                            ("message_id", "position")):
                emit({"t": "blob", "message_id": r["message_id"], "position": r["position"], "owner": r["owner"],
                      "sha256": r["sha256"], "data": base64.b64encode(bytes(r["data"])).decode("ascii")})
            # The idempotency records of this agent's Adds (the table is keyed by owner and request id; a
            # chat import's records, under other agents, stay behind).
            for r in _pages(conn, "SELECT * FROM requests WHERE EXISTS (SELECT 1 FROM messages m WHERE m.agent = ?"
                            " AND m.owner = requests.owner AND m.request_id = requests.request_id)", (agent,),
                            ("owner", "request_id")):
                emit({"t": "request", "owner": r["owner"], "request_id": r["request_id"],
                      "body_hash": r["body_hash"], "response": r["response"], "created_ms": r["created_ms"]})
            if facts:  # (the fact tables exist: opening the store's FactStore makes them)
                for r in _pages(conn, "SELECT * FROM aml_facts WHERE agent = ?", (agent,)):
                    emit({"t": "fact", "id": r["id"], "owner": r["owner"], "session": r["conversation_id"],
                          "text": r["text"], "source_ids": r["source_ids"], "ts_ms": r["ts_ms"],
                          "job_id": r["job_id"], "created_ms": r["created_ms"]})
                for r in _pages(conn, f"SELECT {_JOB_COLUMNS} FROM aml_fact_jobs WHERE agent = ?", (agent,)):
                    emit({"t": "fact_job", "id": r["id"], "request_id": r["request_id"], "owner": r["owner"],
                          "session": r["conversation_id"], "message_ids": r["message_ids"], "status": r["status"],
                          "attempts": r["attempts"], "error": r["error"], "created_ms": r["created_ms"],
                          "updated_ms": r["updated_ms"]})
        finally:
            conn.execute("COMMIT")
    emit({"t": "end", "counts": dict(counts)})
    return Moved(dict(counts), agent)


def open_out(path: Path, *, compress: bool) -> IO[str]:
    """The export's file, gzip'd or not (the caller writes beside the final name, then renames)."""
    if compress:
        return io.TextIOWrapper(gzip.open(path, "wb", compresslevel=6), encoding="utf-8", newline="\n")
    return path.open("w", encoding="utf-8", newline="\n")


# -- import --------------------------------------------------------------------------------------------


def read_lines(raw: IO[bytes], max_line: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of a plain or gzip'd file, each line bounded (a hostile 10 GB line is an
    error naming its number, not a memory blow-up)."""
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    stream: Any = gzip.GzipFile(fileobj=raw) if head == _GZIP_MAGIC else raw
    number = 0
    try:
        while True:
            line = stream.readline(max_line + 1)
            if not line:
                return
            number += 1
            if len(line) > max_line:
                raise InvalidInputError(f"line {number}: longer than {max_line} bytes")
            yield number, line
    except (OSError, EOFError, zlib.error) as exc:  # gzip: a damaged or cut stream
        raise InvalidInputError(f"line {number + 1}: the gzip stream is damaged or cut short ({exc})") from None


def _parse(number: int, line: bytes, expect: type[_Record] | None = None) -> _Record:
    try:
        data = json.loads(line)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidInputError(f"line {number}: not a JSON object ({exc})") from None
    except RecursionError:  # (a hostile file's [[[[...]]]]: no record of ours nests deeper than a few levels)
        raise InvalidInputError(f"line {number}: nested too deeply to be a record of this format") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"line {number}: not a JSON object")
    if expect is None:
        kind = data.get("t")
        expect = KINDS.get(kind) if isinstance(kind, str) else None
        if expect is None:
            raise InvalidInputError(f"line {number}: unknown record type {kind!r} (expected one of {', '.join(KINDS)})")
    try:
        return expect.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise InvalidInputError(f"line {number}: {where}: {first['msg']}{more}") from None


@dataclass
class InTransaction:
    """What a store whose index lives beside its log (PostgreSQL) indexes inside the import's own
    transaction, as its Adds do: each page of message ids, then the facts. None for SQLite, whose
    message index is another file the caller rebuilds after the commit."""

    messages: Callable[[list[int]], None]
    facts: Callable[[], None]
    committed: Callable[[], None]


def import_store(log: ConversationLog, agent: str, raw: IO[bytes], *, backend: str,
                 index: InTransaction | None = None) -> Moved:
    """Stream the file into `log`'s database in one write transaction (with `index`, the index's
    rows in it too). Raises InvalidInputError naming the line (nothing written), ConflictError when
    the store already holds the agent's data."""
    lines = read_lines(raw)
    first = next(lines, None)
    if first is None:
        raise InvalidInputError("line 1: the file is empty (expected the mateclaw-aml-store header)")
    header = _parse(first[0], first[1], Header)
    assert isinstance(header, Header)
    if header.agent != agent:
        raise InvalidInputError(f"line 1: the file holds agent {header.agent!r}'s store, this store serves {agent!r}"
                                f" (set aml-agent: {header.agent} to import it)")
    counts: Counter[str] = Counter()
    pending: dict[str, list[tuple[Any, ...]]] = {}
    end: EndRec | None = None
    last = first[0]
    with log._write() as conn:
        _require_empty(conn, agent)
        for number, line in lines:
            last = number
            if not line.strip():
                continue
            if end is not None:
                raise InvalidInputError(f"line {number}: a record after the end record")
            record = _parse(number, line)
            if isinstance(record, EndRec):
                end = record
                continue
            kind, row = _row(number, record, agent)
            pending.setdefault(kind, []).append((number, *row))
            counts[kind] += 1
            if sum(map(len, pending.values())) >= PAGE:
                _flush(conn, pending, index)
        _flush(conn, pending, index)
        if end is None:
            raise InvalidInputError(f"line {last}: the file ends without its end record (cut short?); nothing imported")
        if dict(end.counts) != {k: v for k, v in counts.items() if v}:
            raise InvalidInputError(f"line {last}: the end record counts {dict(end.counts)} but the file holds "
                                    f"{dict(counts)}; nothing imported")
        _missing_messages(conn, agent)
        if index is not None:
            index.facts()
        if backend == "postgresql":
            # Explicit ids went in: the identity sequences continue after them, or the next Add collides.
            for table in ("messages", "aml_facts", "aml_fact_jobs"):
                conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                             f" GREATEST((SELECT MAX(id) FROM {table}), 1))")
    if index is not None:
        index.committed()
    return Moved(dict(counts), agent)


def _require_empty(conn: Any, agent: str) -> None:
    held = conn.execute("SELECT COUNT(*) AS n FROM messages WHERE agent = ?", (agent,)).fetchone()["n"]
    if held:
        raise ConflictError(f"this store already holds {held} Add/Search message(s) of agent {agent!r}: import only "
                            "into an empty store (moving is not merging - message ids would collide)")


_INSERTS = {
    "message": "INSERT INTO messages (id, agent, owner, conversation_id, role, content, ts_ms, trigger_source,"
               " finish_reason, memoryless, request_id, created_ms, attachments)"
               " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "blob": "INSERT INTO attachment_blobs (message_id, position, agent, owner, sha256, data) VALUES (?, ?, ?, ?, ?, ?)",
    "request": "INSERT INTO requests (owner, request_id, body_hash, response, created_ms) VALUES (?, ?, ?, ?, ?)",
    "fact": "INSERT INTO aml_facts (id, agent, owner, conversation_id, text, source_ids, ts_ms, job_id, created_ms)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "fact_job": f"INSERT INTO aml_fact_jobs ({_JOB_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
}


def _row(number: int, record: _Record, agent: str) -> tuple[str, tuple[Any, ...]]:
    if isinstance(record, MessageRec):
        if not record.content.strip():
            raise InvalidInputError(f"line {number}: content is empty")
        attachments = None
        if record.attachments:
            if any(not isinstance(a.get("type"), str) for a in record.attachments):
                raise InvalidInputError(f"line {number}: attachments: each needs a string 'type'")
            attachments = json.dumps(record.attachments, ensure_ascii=False)
        # Redacted as every append is: an exported log already is (unchanged), a hand-made file is made so.
        return "message", (record.id, agent, record.owner, record.session, record.role, redact(record.content),
                           record.ts_ms, record.trigger_source, record.finish_reason, int(record.memoryless),
                           record.request_id, record.created_ms, attachments)
    if isinstance(record, BlobRec):
        try:
            data = base64.b64decode(record.data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInputError(f"line {number}: data is not base64") from None
        if hashlib.sha256(data).hexdigest() != record.sha256:
            raise InvalidInputError(f"line {number}: the blob's bytes do not hash to its sha256")
        return "blob", (record.message_id, record.position, agent, record.owner, record.sha256, data)
    if isinstance(record, RequestRec):
        return "request", (record.owner, record.request_id, record.body_hash, record.response, record.created_ms)
    if isinstance(record, FactRec):
        _id_list(number, "source_ids", record.source_ids)
        return "fact", (record.id, agent, record.owner, record.session, redact(record.text), record.source_ids,
                        record.ts_ms, record.job_id, record.created_ms)
    assert isinstance(record, FactJobRec)
    _id_list(number, "message_ids", record.message_ids)
    return "fact_job", (record.id, record.request_id, agent, record.owner, record.session, record.message_ids,
                        record.status, record.attempts, record.error, record.created_ms, record.updated_ms)


def _id_list(number: int, name: str, text: str) -> None:
    try:
        ids = json.loads(text)
    except (ValueError, RecursionError):
        ids = None
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InvalidInputError(f"line {number}: {name} must be a JSON list of message ids")


def _flush(conn: Any, pending: dict[str, list[tuple[Any, ...]]], index: InTransaction | None) -> None:
    """Insert what is pending, in dependency order (a blob's message first). A row the store refuses
    (an id present twice) is named by its line: inserted one at a time to find it, only then."""
    for kind in ("message", "blob", "request", "fact_job", "fact"):
        rows = pending.pop(kind, [])
        if not rows:
            continue
        # A savepoint per page: a refused row leaves the transaction usable (PostgreSQL aborts it
        # otherwise), so the page can be tried row by row to name the line.
        conn.execute("SAVEPOINT page")
        try:
            conn.executemany(_INSERTS[kind], [r[1:] for r in rows])
        except Exception as exc:
            if not _refused(exc):
                raise
            conn.execute("ROLLBACK TO SAVEPOINT page")
            line, why = _offender(conn, kind, rows, exc)
            raise InvalidInputError(f"line {line}: {why}; nothing imported") from None
        conn.execute("RELEASE SAVEPOINT page")
        if kind == "message" and index is not None:
            index.messages([r[1] for r in rows])


def _refused(exc: BaseException) -> bool:
    """A row the store refuses (a key taken or repeated; text PostgreSQL cannot hold), as opposed to the
    store failing (those go up as they are: StoreUnavailableError and the like)."""
    return (isinstance(exc, InvalidInputError) or type(exc).__name__ in ("IntegrityError", "UniqueViolation")
            or "constraint" in str(exc).lower())


def _offender(conn: Any, kind: str, rows: list[tuple[Any, ...]], first: BaseException) -> tuple[int, str]:
    """(line, why) of the first row of `rows` the store refuses, tried one at a time (a savepoint per
    row: the failed insert leaves the transaction usable on PostgreSQL too; the caller rolls all back)."""
    for row in rows:
        conn.execute("SAVEPOINT one_row")
        try:
            conn.execute(_INSERTS[kind], row[1:])
        except Exception as exc:
            conn.execute("ROLLBACK TO SAVEPOINT one_row")
            if not _refused(exc):
                raise
            if isinstance(exc, InvalidInputError):
                return int(row[0]), exc.message
            return int(row[0]), (f"this {kind}'s id or key is taken in the store (another agent's conversation?)"
                                 " or repeats in the file")
        conn.execute("RELEASE SAVEPOINT one_row")  # kept: a later row of the page may repeat this one
    return int(rows[0][0]), str(first)


def _missing_messages(conn: Any, agent: str) -> None:
    """Every blob belongs to a message of the file (checked once, in SQL, rather than by a set of ids)."""
    row = conn.execute("SELECT b.message_id AS id FROM attachment_blobs b WHERE b.agent = ? AND NOT EXISTS"
                       " (SELECT 1 FROM messages m WHERE m.id = b.message_id AND m.agent = ?) LIMIT 1",
                       (agent, agent)).fetchone()
    if row is not None:
        raise InvalidInputError(f"a blob names message {row['id']}, which the file does not hold; nothing imported")
