"""The dialect seam: the Add/Search store's SQL modules, written for `sqlite3`, run on PostgreSQL.

Why a seam and not a second copy of every statement: the ranking is held to one set of statements
(conversations/log.py, facts.py, index/messages/{storage,postings,delta,disk_view}.py) - a copy per
dialect would drift, and the differential test (tests/test_pg_store.py) proves they rank alike only
while they are the same code. What differs is small and listed here:

- placeholders (`?` -> `%s`), rows readable by position and by name (`sqlite3.Row`), `lastrowid`
  (a `RETURNING` on the tables with a generated key), `INSERT OR REPLACE/IGNORE` (`ON CONFLICT`
  on each table's key, `_CONFLICT`), `GROUP_CONCAT`;
- `BEGIN` (SQLite's deferred read transaction: one snapshot for every statement of a search) is
  `REPEATABLE READ READ ONLY`; `BEGIN IMMEDIATE` (a writer) is `READ COMMITTED` - a writer takes
  its owner's transaction lock first (`lock_owner`) and must then read what the previous holder
  committed, which a snapshot taken before the wait would not show;
- a transaction begun inside another joins it (SQLite would refuse; PostgreSQL would warn and the
  inner COMMIT end the outer): `PgLog.holding` makes a delete of a user's log and index one commit;
- the few statements that name SQLite's catalogue or its pragmas (`_STATEMENTS`: a pragma with no
  meaning here answers nothing).

Connections come from a `psycopg_pool.ConnectionPool`; `Checkout` is what the SQLite classes use
as their lock: entering it binds one pooled connection to the thread (re-entrant), and `ConnProxy`
(their `_conn`) forwards to it. A database out of reach, or a connection lost mid-call, raises
`StoreUnavailableError` naming what failed; the pool replaces broken connections by itself.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any, ClassVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row
from psycopg_pool import ConnectionPool, PoolTimeout

from mateclaw_mem.errors import InvalidInputError, StoreUnavailableError

# The key columns `INSERT OR REPLACE` replaces on (SQLite: the table's PRIMARY KEY or UNIQUE).
_CONFLICT = {
    "meta": ("key",), "postings": ("okey", "term", "first"), "pdocs": ("okey", "seg"), "pfeat": ("id",),
    "pspeakers": ("okey", "speaker"), "requests": ("owner", "request_id"),
}
# Tables whose key PostgreSQL generates: an INSERT returns it (sqlite3's `cursor.lastrowid`).
_GENERATED = {"messages": "id", "powners": "okey", "pdelta": "id", "aml_facts": "id", "aml_fact_jobs": "id"}
_TABLES = "SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema()"
# SQLite statements with another spelling here; None: nothing to do (the answer is no rows).
_STATEMENTS: dict[str, str | None] = {
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?": _TABLES + " AND tablename = ?",
    "SELECT name FROM sqlite_master WHERE type = 'table'": _TABLES,
    "SELECT 1 FROM sqlite_master WHERE name = 'meta'": _TABLES + " AND tablename = 'meta'",
    "PRAGMA secure_delete = ON": None,
    "PRAGMA wal_checkpoint(TRUNCATE)": None,
    "PRAGMA busy_timeout=0": None,
    "BEGIN": "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
    "BEGIN IMMEDIATE": "BEGIN ISOLATION LEVEL READ COMMITTED",
}
_OR = re.compile(r"^\s*INSERT OR (REPLACE|IGNORE) INTO (\w+)\s*\(([^)]*)\)", re.S)
_INSERT = re.compile(r"^\s*INSERT INTO (\w+)\b")
_IN_LIST = re.compile(r"\bIN \((%s(?:\s*,\s*%s)*)\)")


def _any_arrays(pg: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    """`x IN (%s, %s, ...)` as `x = ANY(%s)`: one statement text whatever the list's length, so the
    server plans it once per connection (psycopg prepares a statement run 5 times) instead of at every
    call - planning was most of a short lookup's cost. Returns the text and, per list, (index of its
    first parameter, how many) for `fold`."""
    groups: list[tuple[int, int]] = []
    out, at, seen = [], 0, 0
    for m in _IN_LIST.finditer(pg):
        seen += pg.count("%s", at, m.start())
        n = m.group(1).count("%s")
        groups.append((seen, n))
        out.append(pg[at : m.start()] + "= ANY(%s)")
        seen += n
        at = m.end()
    out.append(pg[at:])
    return "".join(out), tuple(groups)


def fold(params: Sequence[Any], groups: tuple[tuple[int, int], ...]) -> list[Any]:
    """The parameters with each IN list's values as one list (`_any_arrays`)."""
    out = list(params)
    for start, n in reversed(groups):
        out[start : start + n] = [out[start : start + n]]
    return out


@lru_cache(maxsize=4096)
def translate(sql: str) -> tuple[str | None, bool, tuple[tuple[int, int], ...]]:
    """(PostgreSQL text or None for a no-op, whether it returns a generated key, its IN lists)."""
    pg, returns = _translate(sql)
    if pg is None:
        return None, returns, ()
    text, groups = _any_arrays(pg)
    return text, returns, groups


def _translate(sql: str) -> tuple[str | None, bool]:
    if sql in _STATEMENTS:
        return _STATEMENTS[sql], False
    if sql.lstrip().upper().startswith(("PRAGMA", "BEGIN")) or "sqlite_master" in sql:
        raise NotImplementedError(f"no PostgreSQL spelling of {sql!r} (conversations/pg/connection.py)")
    out = sql.replace("%", "%%").replace("?", "%s")
    out = re.sub(r"GROUP_CONCAT\(DISTINCT (\w+)\)", r"string_agg(DISTINCT \1, ',')", out)
    m = _OR.match(out)
    if m is not None:
        kind, table, cols = m.groups()
        out = "INSERT INTO" + out[m.start(2) - 1 :]
        if kind == "IGNORE":
            return out + " ON CONFLICT DO NOTHING", False
        keys = _CONFLICT[table]
        rest = [c.strip() for c in cols.split(",") if c.strip() not in keys]
        return out + f" ON CONFLICT ({', '.join(keys)}) DO UPDATE SET " + ", ".join(
            f"{c} = EXCLUDED.{c}" for c in rest), False
    m = _INSERT.match(out)
    if m is not None and m.group(1) in _GENERATED and "RETURNING" not in out.upper() and "ON CONFLICT" not in out:
        return out + f" RETURNING {_GENERATED[m.group(1)]}", True
    return out, False


class Row(tuple):
    """A row read by position or by column name, as `sqlite3.Row` is (a subclass per column list)."""

    __slots__ = ()
    _index: ClassVar[dict[str, int]] = {}

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


@lru_cache(maxsize=1024)
def _row_class(names: tuple[str, ...]) -> type[Row]:
    return type("Row", (Row,), {"__slots__": (), "_index": {n: i for i, n in enumerate(names)}})


def named_row(cursor: Any) -> Any:
    desc = cursor.description
    if desc is None:
        return tuple
    return _row_class(tuple(c.name for c in desc))


_PASSWORD_KV = re.compile(r"(?i)\bpassword\s*=\s*('(?:[^'\\]|\\.)*'?|\S+)")
_URL_PASSWORD = re.compile(r"://[^/@:\s]*:([^@/\s]*)@")
_QUOTED_PASSWORD = re.compile(r'(?i)"password[^"]*"')


def scrub(text: str, dsn: str) -> str:
    """`text` (a message of psycopg or libpq about `dsn`) without the DSN's password: libpq's parse
    errors quote the fragment they choke on, which may be the password itself."""
    from urllib.parse import unquote

    from psycopg.conninfo import conninfo_to_dict

    from mateclaw_mem.redaction import redact

    secrets = {m.group(1).strip("'") for m in _PASSWORD_KV.finditer(dsn)}
    secrets |= {v for m in _URL_PASSWORD.finditer(dsn) for v in (m.group(1), unquote(m.group(1)))}
    try:
        secrets.add(str(conninfo_to_dict(dsn).get("password") or ""))
    except psycopg.Error:
        pass
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 3:  # (shorter would blank out ordinary words; such a password is no secret anyway)
            text = text.replace(secret, "[REDACTED:password]")
    return redact(_QUOTED_PASSWORD.sub('"[REDACTED:password]"', text))


def unavailable(exc: BaseException, what: str = "PostgreSQL") -> StoreUnavailableError:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return StoreUnavailableError(f"{what} is out of reach: {text}")


class Cursor:
    """The part of `sqlite3.Cursor` the store's modules use (`row_factory = None`: plain tuples)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.row_factory: Any = named_row
        self.lastrowid: int | None = None
        self._cur: psycopg.Cursor[Any] | None = None
        self.rowcount = -1

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Cursor:
        self._cur, self.lastrowid = None, None
        pg, returns, groups = translate(sql)
        if pg is None:
            return self
        if groups:
            params = fold(params, groups) if not isinstance(params, dict) else params
        cur = self._conn.run(pg, params, self.row_factory or tuple_row)
        if cur is None:  # a nested BEGIN/COMMIT/ROLLBACK, joined to the outer transaction
            return self
        self._cur, self.rowcount = cur, cur.rowcount
        if returns:
            row = cur.fetchone()
            self.lastrowid = row[0] if row is not None else None
        return self

    def fetchone(self) -> Any:
        return self._cur.fetchone() if self._cur is not None and self._cur.description else None

    def fetchall(self) -> list[Any]:
        return self._cur.fetchall() if self._cur is not None and self._cur.description else []

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class Connection:
    """One pooled psycopg connection as the store's modules use a `sqlite3.Connection`."""

    def __init__(self, raw: psycopg.Connection[Any], checkout: Checkout | None = None) -> None:
        self.raw = raw
        self.checkout = checkout
        self.nested = 0  # transactions begun inside the one open (joined to it)

    def cursor(self) -> Cursor:
        return Cursor(self)

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Cursor:
        return Cursor(self).execute(sql, params)

    def executemany(self, sql: str, seq: Sequence[Sequence[Any]] | Iterator[Sequence[Any]]) -> None:
        rows = list(seq)
        if not rows:
            return
        pg, _, groups = translate(sql)
        assert pg is not None and not groups
        try:
            with self.raw.cursor() as cur:
                cur.executemany(pg, rows)
        except psycopg.Error as exc:
            raise self._failed(exc) from exc

    def run(self, pg: str, params: Sequence[Any] | dict[str, Any], row_factory: Any) -> psycopg.Cursor[Any] | None:
        verb = pg.split(None, 1)[0].upper()
        in_tx = self.raw.info.transaction_status != TransactionStatus.IDLE
        if verb == "BEGIN" and in_tx:
            self.nested += 1
            return None
        if verb in ("COMMIT", "ROLLBACK") and self.nested:
            self.nested -= 1
            return None
        try:
            cur = self.raw.cursor(row_factory=row_factory)
            cur.execute(pg, params or None)
            return cur
        except psycopg.Error as exc:
            raise self._failed(exc) from exc

    def _failed(self, exc: psycopg.Error) -> BaseException:
        if self.raw.broken or self.raw.closed or isinstance(exc, pg_errors.AdminShutdown | pg_errors.ConnectionFailure):
            lost = unavailable(exc, "PostgreSQL (connection lost mid-call)")
            if self.checkout is not None:
                self.checkout.last_error = str(lost)
            return lost
        if isinstance(exc, pg_errors.UndefinedTable | pg_errors.UndefinedColumn):
            # A newer mateclaw-mem started meanwhile and migrated the tables this daemon's statements name
            # (a rolling upgrade): a 503 sends the balancer to an upgraded daemon, where a 500 would not.
            lost = StoreUnavailableError("the PostgreSQL store's tables are no longer those this mateclaw-mem knows"
                                         " (a newer version migrated them?): upgrade or restart this daemon"
                                         f" ({' '.join(str(exc).splitlines()[0].split())})")
            if self.checkout is not None:
                self.checkout.last_error = str(lost)
            return lost
        if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
            # A primary turned replica (a failover under way) or a database set read-only: the write is
            # not this request's fault and may succeed on a retry - a 503 with the reason, not a 500.
            lost = StoreUnavailableError("PostgreSQL refuses writes (a read-only database: a replica, or a primary"
                                         f" being failed over): {' '.join(str(exc).split())}")
            if self.checkout is not None:
                self.checkout.last_error = str(lost)
            return lost
        if isinstance(exc, psycopg.DataError) and "NUL" in str(exc):
            return InvalidInputError("text holds a NUL character (\\u0000), which PostgreSQL cannot store")
        return exc

    def close(self) -> None:  # the pool owns it
        pass


class Checkout:
    """The lock of the PostgreSQL store's classes: entering it binds a pooled connection to this
    thread until the outermost exit (re-entrant, like the RLock it stands for). Threads do not wait
    for each other here: writers of one owner wait in the database (`lock_owner`).

    With `latest` (the newest migration this code knows), the schema's version is read again at an
    outermost entry at most every `SCHEMA_EVERY` seconds, and a schema a newer mateclaw-mem migrated
    is refused (503) until it is checked again: some migrations change what this code reads without
    removing anything it names (migrations 5-7 moved the messages' text), so its statements would not
    fail - its answers would quietly lack what moved. A balancer's health checks come seconds apart;
    this closes the gap to a second."""

    SCHEMA_EVERY = 1.0

    def __init__(self, pool: ConnectionPool, timeout: float, latest: int | None = None) -> None:
        self.pool = pool
        self.timeout = timeout
        self.latest = latest
        self._local = threading.local()
        self.last_error: str | None = None  # the last time the database was out of reach (`pg_health`)
        self._schema_at = -float("inf")
        self.newer: int | None = None  # the schema's version when a newer mateclaw-mem migrated it

    def current(self) -> Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            raise RuntimeError("a PostgreSQL store connection used outside its Checkout (its lock)")
        return conn

    def __enter__(self) -> Checkout:
        depth = getattr(self._local, "depth", 0)
        if not depth:
            try:
                raw = self.pool.getconn(timeout=self.timeout)
            except PoolTimeout as exc:
                lost = unavailable(exc, f"PostgreSQL (no connection within {self.timeout:g} s)")
                self.last_error = str(lost)
                raise lost from exc
            self._local.conn = conn = Connection(raw, self)
            if self.latest is not None:
                try:
                    self._check_schema(conn)
                except BaseException:
                    self._local.conn = None
                    self.pool.putconn(raw)
                    raise
        self._local.depth = depth + 1
        return self

    def _check_schema(self, conn: Connection) -> None:
        """Refuse a schema newer than `latest` (StoreUnavailableError: a 503), read at most every
        SCHEMA_EVERY seconds."""
        now = time.monotonic()
        if now - self._schema_at >= self.SCHEMA_EVERY:
            try:
                row = conn.raw.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
            except psycopg.Error as exc:
                raise conn._failed(exc) from exc
            self._schema_at = now
            version = int(row[0]) if row is not None else 0
            self.newer = version if self.latest is not None and version > self.latest else None
        if self.newer is not None:
            lost = StoreUnavailableError(f"the PostgreSQL store's schema is version {self.newer}, newer than this"
                                         f" mateclaw-mem knows ({self.latest}): a newer version migrated it;"
                                         " upgrade or restart this daemon")
            self.last_error = str(lost)
            raise lost

    def __exit__(self, *exc: object) -> None:
        self._local.depth -= 1
        if self._local.depth:
            return
        conn: Connection = self._local.conn
        self._local.conn = None
        conn.nested = 0
        self.pool.putconn(conn.raw)  # (the pool rolls back a transaction left open, drops a broken one)

    def acquire(self, blocking: bool = True) -> bool:
        # Without waiting: never (`AmlService.add_json_now` then hands the Add to a worker thread): a
        # PostgreSQL write may wait for another daemon's write of the same owner, never on an event loop.
        if not blocking:
            return False
        self.__enter__()
        return True

    def release(self) -> None:
        self.__exit__(None, None, None)


class ConnProxy:
    """`_conn` of the store's classes: the connection their `Checkout` bound to this thread."""

    def __init__(self, checkout: Checkout) -> None:
        self._checkout = checkout

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Cursor:
        return self._checkout.current().execute(sql, params)

    def executemany(self, sql: str, seq: Any) -> None:
        self._checkout.current().executemany(sql, seq)

    def cursor(self) -> Cursor:
        return self._checkout.current().cursor()

    def close(self) -> None:
        pass


def owner_key(agent: str, owner: str) -> int:
    """The transaction lock of one owner's writers (a signed 64-bit number; a collision only makes
    two owners wait for each other)."""
    return int.from_bytes(hashlib.sha256(f"{agent}\x00{owner}".encode()).digest()[:8], "big", signed=True)


def lock_owner(conn: Any, agent: str, owner: str) -> None:
    """Hold off every other writer of this owner (any daemon) until this transaction ends: Adds,
    merges, fact results and deletes of one owner follow each other; other owners' go on."""
    conn.execute("SELECT pg_advisory_xact_lock(?)", (owner_key(agent, owner),))
