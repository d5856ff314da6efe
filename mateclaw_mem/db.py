"""SQLite connections configured the same way everywhere (WAL, busy timeout, Row factory).

Files under `workspace/.mateclaw/`, each a property of Settings:
- `log.db` (`settings.log_db`): the conversation log, extraction and dream runs, model usage,
  retrievals, AML facts, chat imports;
- `state.db` (`settings.state_db`): bookkeeping - queued extraction work, cooldowns, watermarks,
  schedules, lineage, SOUL proposals;
- `index.db` (`settings.index_db`): the file search index (derived, rebuildable);
- `messages.db` (`settings.messages_db`): the Add/Search message index (derived, rebuildable);
- `facts.db` (`settings.facts_db`): fact events and the contradiction inbox, beside the fact
  projection (derived);
- `forget.db` (`settings.forget_db`): tombstones of forgotten claims, purges due.
Table owners subclass `SharedConnection` and take their path from Settings, never join it
themselves (tests/test_settings_keys.py checks both). Which files are derived and what happens to a
damaged one: runtime/heal.py (`check` and `set_aside` here do the file work).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import IO, Any

from mateclaw_mem.errors import MateclawError

BUSY_TIMEOUT_MS = 30000


class DamagedDatabaseError(MateclawError):
    """An SQLite file that is not a database or whose pages are malformed; the message names it."""

    code = "damaged"

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: damaged database ({problem}); `mateclaw-mem doctor` sets it aside "
                         "and rebuilds it or starts a new one (the next daemon start does the same)")
        self.path = path
        self.problem = problem


def owner_column(owner: str | None) -> str:
    """The spelling of "no owner" in every `owner` column: "" (services say None; SQL keys need a value)."""
    return owner or ""


def connect(path: Path, *, check_same_thread: bool = False, uri: bool = False) -> sqlite3.Connection:
    """Raises DamagedDatabaseError naming `path` when the file is not a database (the first read of
    its header is here): bare, SQLite's "file is not a database" names no file. `uri`: an ATTACH on
    this connection takes `file:...?mode=ro` URIs (`path` itself is still a plain path)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=30, check_same_thread=check_same_thread, isolation_level=None, uri=uri)
    try:
        conn.row_factory = sqlite3.Row
        _wal(conn)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys=ON")
    except sqlite3.DatabaseError as exc:
        conn.close()
        if is_damage(exc):
            raise DamagedDatabaseError(path, str(exc)) from exc
        raise
    return conn


def _wal(conn: sqlite3.Connection, *, patience: float = 30.0) -> None:
    # Switching a new file to WAL takes an exclusive lock, and SQLite answers "database is locked"
    # at once (no busy handler) when another connection opens the same new file at that moment —
    # two services starting together. Try again until the other one has switched it.
    deadline = time.monotonic() + patience
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


@contextmanager
def immediate(conn: sqlite3.Connection, lock: threading.RLock | threading.Lock) -> Iterator[sqlite3.Connection]:
    """A write transaction on a connection shared by threads: the lock serialises this process's
    threads, BEGIN IMMEDIATE (with the busy timeout) other processes'; rolled back on any error."""
    with lock:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


@contextmanager
def no_busy_wait(conn: sqlite3.Connection) -> Iterator[None]:
    """Within: a locked database raises at once ("database is locked") instead of waiting up to
    the busy timeout. For work on the event loop that has a waiting path to fall back to. The
    caller holds the connection's lock (the setting is the connection's)."""
    conn.execute("PRAGMA busy_timeout=0")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")


def is_busy(exc: BaseException) -> bool:
    """An SQLite error that says another connection holds the lock (retry, or wait elsewhere)."""
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


_CORRUPT, _NOTADB = 11, 26  # SQLITE_CORRUPT, SQLITE_NOTADB (primary codes: the low byte of extended ones)


def is_damage(exc: BaseException) -> bool:
    """An SQLite error that says the file itself is damaged (not a database, malformed pages), as
    opposed to a busy, missing or unwritable one, which setting the file aside would not help."""
    if isinstance(exc, DamagedDatabaseError):
        return True
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_CORRUPT, _NOTADB)
    text = str(exc)
    return "not a database" in text or "malformed" in text


def check(path: Path, *, pages_up_to: int | None = None) -> str | None:
    """What is wrong with the database at `path`, or None when it opens and `PRAGMA quick_check`
    finds nothing (a missing or empty file is a new database: nothing wrong). quick_check reads
    every page of every table and index once (~0.7 ms a MB, warm), so the daemon runs it at start,
    not per request. A file larger than `pages_up_to` bytes has only its header and schema read
    (~0.3 ms: that finds a file that is not a database or whose schema is lost, not a bad page).
    A busy or unreadable file is not "damaged": None, and whoever opens it next says why."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if size == 0:
        return None
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    try:
        if pages_up_to is not None and size > pages_up_to:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return None
        found = [row[0] for row in conn.execute("PRAGMA quick_check(5)")]
    except sqlite3.DatabaseError as exc:
        return str(exc) if is_damage(exc) else None
    finally:
        conn.close()
    return None if found == ["ok"] else "; ".join(str(line) for line in found)


def set_aside(path: Path, stamp: str) -> Path:
    """Rename `path` to `<name>.damaged-<stamp>` (and its `-wal`/`-shm` to that name's, so SQLite
    opening the set-aside file still finds the WAL's committed pages); returns the new path. A name
    already taken (two in one second) gets a counter."""
    target = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    os.replace(path, target)
    for suffix in ("-wal", "-shm"):
        side = Path(f"{path}{suffix}")
        if side.exists():
            os.replace(side, Path(f"{target}{suffix}"))
    return target


# The files SQLite takes POSIX (fcntl) locks on: a database (ours are all `*.db`, set-aside ones
# `*.db.damaged-STAMP[-N]`) and its `-shm`. Never the `-wal`: WAL locks live in the `-shm`.
_LOCKED_BY_SQLITE = re.compile(r"\.db(?:\.damaged-\d{8}T\d{6}(?:-\d+)?)?(?:-shm)?$")

# Run by a child to hand a file's bytes over a pipe: a first byte 1 says it opened.
_CAT = ("import shutil, sys\ntry:\n    f = open(sys.argv[1], 'rb')\nexcept OSError:\n    sys.exit(1)\n"
        "sys.stdout.buffer.write(b'\\x01')\nshutil.copyfileobj(f, sys.stdout.buffer)\n")


def locked_by_sqlite(path: Path) -> bool:
    """Whether SQLite may hold POSIX locks on `path` (a database or its shared memory): read it only
    with `read_apart`."""
    return _LOCKED_BY_SQLITE.search(path.name) is not None


@contextmanager
def read_apart(path: Path) -> Iterator[IO[bytes]]:
    """The raw bytes of a file SQLite may have locked, read by a child process; OSError when it
    cannot be opened.

    Why a child: POSIX drops every fcntl lock a process holds on a file when the process closes ANY
    descriptor of it - SQLite's own connections keep theirs open for this reason, but a plain
    `open(db).read()` then `close()` in this process silently releases the SHARED lock that each of
    its WAL connections holds on the database. Another process (a CLI command) closing its last
    connection then gets the EXCLUSIVE lock, takes itself for the last user, checkpoints and deletes
    the `-wal` and `-shm`: this process's next connection to the file fails with "disk I/O error"
    (`PRAGMA journal_mode=WAL`, `BEGIN IMMEDIATE`) and its open ones write into the unlinked WAL,
    which nobody else reads. A child's close drops only the child's locks (it has none)."""
    if os.name == "nt":  # byte-range locks there belong to the handle, not the process
        with open(path, "rb") as fh:
            yield fh
        return
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _CAT, str(path)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    try:
        if proc.stdout.read(1) != b"\x01":
            raise OSError(f"{path}: cannot be read")
        yield proc.stdout
    finally:
        proc.stdout.close()
        if proc.poll() is None:
            proc.kill()  # the reader stopped early: the rest of the file is not wanted
        proc.wait()


META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


def run_once(
    conn: sqlite3.Connection,
    lock: threading.RLock | threading.Lock,
    marker: str,
    migrate: Callable[[sqlite3.Connection], int],
) -> None:
    """Run an in-place migration of this database once, ever: `migrate` (in one write transaction)
    returns how many rows it changed, kept in `meta` under `marker` (for `status`). The marker is
    checked again inside the transaction, so two processes opening the file never both run it.

    Runs with `secure_delete` on: a migration that rewrites text (redaction) must not leave the
    old bytes in freed pages of the file."""
    with lock:
        conn.execute(META)
        if conn.execute("SELECT 1 FROM meta WHERE key = ?", (marker,)).fetchone() is not None:
            return
        previous = conn.execute("PRAGMA secure_delete").fetchone()[0]
        conn.execute("PRAGMA secure_delete = ON")
        try:
            with immediate(conn, lock):
                if conn.execute("SELECT 1 FROM meta WHERE key = ?", (marker,)).fetchone() is not None:
                    return
                changed = migrate(conn)
                conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (marker, str(changed)))
        finally:
            conn.execute(f"PRAGMA secure_delete = {int(previous)}")


def migrated(conn: sqlite3.Connection, prefix: str) -> dict[str, int]:
    """The `run_once` markers starting with `prefix`, without it: {name: rows changed}."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone() is None:
        return {}
    rows = conn.execute("SELECT key, value FROM meta WHERE key LIKE ? || '%'", (prefix,)).fetchall()
    return {r["key"][len(prefix) :]: int(r["value"]) for r in rows}


class SharedConnection:
    """One connection shared by this process's threads behind a lock, its schema created on open.

    One connection rather than one per thread: every operation is a few milliseconds and SQLite
    serialises writers anyway; across processes, BEGIN IMMEDIATE plus the busy timeout keeps
    writers from interleaving. Subclasses read with `self._conn` under `self._lock` and write in
    `with self._write() as conn:`.
    """

    def __init__(self, db_path: Path, schema: str) -> None:
        self.path = db_path
        self._lock = threading.RLock()
        self._conn = connect(db_path)
        with self._lock:
            try:
                self._conn.executescript(schema)
            except sqlite3.DatabaseError as exc:  # a header that reads and a schema page that does not
                self._conn.close()
                if is_damage(exc):
                    raise DamagedDatabaseError(db_path, str(exc)) from exc
                raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    _checkpoints: WalCheckpoints | None = None

    @property
    def lock(self) -> threading.RLock:
        """The lock every use of the connection holds (`without_waiting` callers take it first)."""
        return self._lock

    def without_waiting(self) -> AbstractContextManager[None]:
        """Hold `lock` for this: SQLite answers "busy" at once instead of waiting for another
        process's write (see `no_busy_wait`)."""
        return no_busy_wait(self._conn)

    def hand_checkpoints_to(self, checkpoints: WalCheckpoints) -> None:
        """Let `checkpoints` checkpoint this file in the background (see WalCheckpoints)."""
        checkpoints.adopt(self._conn, self._lock, self.path)
        self._checkpoints = checkpoints

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with immediate(self._conn, self._lock) as conn:
            yield conn
        if self._checkpoints is not None:
            self._checkpoints.wrote(self.path)


class WalCheckpoints:
    """Checkpoints of busy WAL files in one background thread, instead of inside a commit.

    SQLite's automatic checkpoint runs inside whichever commit crosses 1,000 WAL pages, and with
    synchronous=NORMAL the checkpoint is where the fsyncs are: about one AML Add in a hundred
    waited 5-35 ms for it (p99 4.3 ms against 0.55 ms without). A connection handed to `adopt`
    stops checkpointing itself; its owner calls `wrote(path)` after each commit, and this thread
    runs a PASSIVE checkpoint (it never waits for readers or writers) from its own connection at
    most every `interval` seconds while there were writes, and not at all while idle.

    Durability is unchanged: a commit is in the WAL before it returns, and the WAL survives a
    kill -9 (the next open replays it). Only adopted connections stop checkpointing, and only
    between `start` and `stop`; other processes' connections keep SQLite's default.
    """

    def __init__(self, interval: float = 0.5, members: tuple[Any, ...] = ()) -> None:
        """`members`: owners of hot connections (`hand_checkpoints_to(self)`), adopted by `start`."""
        self.interval = interval
        self.members = members
        self._dirty: set[Path] = set()
        self._paths: set[Path] = set()
        self._adopted: list[tuple[sqlite3.Connection, threading.RLock | threading.Lock]] = []
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.runs = 0  # checkpoints run (for tests and status)

    def adopt(self, conn: sqlite3.Connection, lock: threading.RLock | threading.Lock, path: Path) -> None:
        """Take over `conn`'s checkpoints (call with the thread running; `lock` guards `conn`)."""
        with lock:
            conn.execute("PRAGMA wal_autocheckpoint=0")
        self._paths.add(path)
        self._adopted.append((conn, lock))

    def wrote(self, path: Path) -> None:
        """A commit to `path` happened: checkpoint it soon (cheap; called on the write path)."""
        self._dirty.add(path)
        self._wake.set()

    def start(self) -> None:
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="wal-checkpoints", daemon=True)
            self._thread.start()
            for member in self.members:
                member.hand_checkpoints_to(self)

    def stop(self) -> None:
        """Stop the thread after a last checkpoint of everything written."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None
        for conn, lock in self._adopted:  # their own checkpoints again, as before `adopt`
            with lock, contextlib.suppress(sqlite3.ProgrammingError):  # closed already
                conn.execute("PRAGMA wal_autocheckpoint=1000")
        self._adopted.clear()
        self._paths.clear()

    def _run(self) -> None:
        conns: dict[Path, sqlite3.Connection] = {}
        try:
            while True:
                self._wake.wait()
                if not self._stopping:
                    time.sleep(self.interval)  # writes in a burst share one checkpoint
                self._wake.clear()
                dirty, self._dirty = self._dirty, set()
                for path in dirty & self._paths:
                    conn = conns.get(path)
                    if conn is None:
                        conn = conns[path] = sqlite3.connect(str(path), timeout=0, isolation_level=None,
                                                             check_same_thread=False)
                    try:
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                        self.runs += 1
                    except sqlite3.Error:  # busy or gone: the next write asks again
                        self._dirty.add(path)
                if self._stopping:
                    return
        finally:
            for conn in conns.values():
                conn.close()
