"""Rows read back out of a damaged SQLite file (`mateclaw-mem doctor --salvage FILE`), and the ids a
fresh copy of it must continue after.

The damaged file is never changed: it is copied (with its WAL) into a temp folder first. A copy
whose 100-byte header is unreadable (zeroed, overwritten) gets a standard one written over it, which
is often all that was wrong: the pages after it are intact. Then every table is read in rowid order;
where a page is unreadable the read skips past it (a search for the first rowid after it that can be
read) and goes on, so one bad page costs the rows on it, not the rest of the table. Rows go into the
live database with `INSERT OR IGNORE`: a row the live file already has (same key) is kept as it is.
"""

from __future__ import annotations

import shutil
import sqlite3
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mateclaw_mem.db import connect, is_damage

_MAGIC = b"SQLite format 3\x00"
_PAGE_SIZES = (4096, 1024, 2048, 8192, 16384, 32768, 65536, 512)  # ours first: SQLite's default
_BATCH = 500
_MAX_ROWID = (1 << 63) - 1


@dataclass
class TableReport:
    read: int = 0  # rows read from the damaged file
    copied: int = 0  # of those, rows the live database did not have
    unreadable_ranges: int = 0  # runs of rows lost to unreadable pages
    error: str | None = None  # why the table could not be read at all

    @property
    def already_there(self) -> int:
        return self.read - self.copied


@dataclass
class SalvageReport:
    source: str
    into: str
    header_rewritten: bool = False
    schema_error: str | None = None  # the file's table list could not be read: nothing could be
    tables: dict[str, TableReport] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # derived tables, rebuilt instead of copied

    @property
    def read(self) -> int:
        return sum(t.read for t in self.tables.values())

    @property
    def copied(self) -> int:
        return sum(t.copied for t in self.tables.values())

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "into": self.into, "header_rewritten": self.header_rewritten,
                "schema_error": self.schema_error, "read": self.read, "copied": self.copied,
                "tables": {name: {**asdict(t), "already_there": t.already_there} for name, t in self.tables.items()},
                "skipped": self.skipped}


@contextmanager
def readable_copy(src: Path) -> Iterator[tuple[sqlite3.Connection | None, bool, str | None]]:
    """(connection to a temp copy of `src` and its WAL, whether its header was rewritten, why its
    schema cannot be read) - the connection is None when no header makes the schema readable."""
    with tempfile.TemporaryDirectory(prefix="mateclaw-salvage-") as tmp:
        copy = Path(tmp) / "copy.db"
        shutil.copyfile(src, copy)
        wal = Path(f"{src}-wal")
        if wal.exists():
            shutil.copyfile(wal, Path(f"{copy}-wal"))
        conn, error = _open(copy)
        rewritten = False
        if conn is None:
            original = copy.read_bytes()[:100]
            for size in _PAGE_SIZES:
                _write_header(copy, size, wal=wal.exists())
                conn, _ = _open(copy)
                if conn is not None:
                    rewritten = True
                    break
            else:
                with copy.open("r+b") as fh:
                    fh.write(original)
        try:
            yield conn, rewritten, None if conn is not None else error
        finally:
            if conn is not None:
                conn.close()


def _open(path: Path) -> tuple[sqlite3.Connection | None, str | None]:
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn, None
    except sqlite3.DatabaseError as exc:
        conn.close()
        return None, str(exc)


def _write_header(path: Path, page_size: int, *, wal: bool) -> None:
    """A standard header (sqlite.org/fileformat2.html#the_database_header) for a file whose own is
    lost: the page count from the file's size, no free-page list (pages it held are ignored), UTF-8,
    schema format 4. Everything else SQLite needs is in the pages, from page 1's b-tree on."""
    pages = path.stat().st_size // page_size
    version = 2 if wal else 1  # 2: WAL, so SQLite reads the committed pages the WAL still holds
    header = (_MAGIC + struct.pack(">H", page_size if page_size < 65536 else 1)
              + bytes([version, version, 0, 64, 32, 32])
              + struct.pack(">IIIIIIIIIIII", 1, pages, 0, 0, 1, 4, 0, 0, 1, 0, 0, 0)
              + bytes(20) + struct.pack(">II", 1, sqlite3.sqlite_version_info[0] * 1000000
                                        + sqlite3.sqlite_version_info[1] * 1000 + sqlite3.sqlite_version_info[2]))
    with path.open("r+b") as fh:
        fh.write(header)


def _tables(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(name, CREATE statement) of the ordinary tables, without virtual tables and their shadows."""
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
                        " ORDER BY rootpage").fetchall()
    virtual = [name for name, sql in rows if (sql or "").upper().startswith("CREATE VIRTUAL")]
    return [(name, sql) for name, sql in rows if name not in virtual
            and not any(name.startswith(f"{v}_") for v in virtual)]


def _names(cols: list[str]) -> str:
    return ", ".join(f'"{c}"' for c in cols)


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]


def _rows(conn: sqlite3.Connection, table: str, cols: list[str], report: TableReport) -> Iterator[tuple]:
    """Every readable row in rowid order. A scan stops at an unreadable page; the next readable
    rowid after it is found by seeking (a seek reads only the pages on its way down), exponentially
    then by bisection, and the scan goes on from there."""
    query = f'SELECT rowid, {_names(cols)} FROM "{table}" WHERE rowid >= ? ORDER BY rowid'
    after = -_MAX_ROWID - 1  # the last rowid read; `>= after + 1`, not `> after`: the seek for `>` lands
    while after < _MAX_ROWID:  # on the page that holds `after`, which may be the bad one
        try:
            for row in conn.execute(query, (after + 1,)):
                after = row[0]
                yield row[1:]
            return
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):
                raise
        # sqlite3 steps one row ahead of the one it hands out: the last row before a bad page fails
        # with it. Read alone (LIMIT 1 stops there), it may come back.
        try:
            row = conn.execute(f"{query} LIMIT 1", (after + 1,)).fetchone()
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):
                raise
        else:
            if row is None:
                return
            after = row[0]
            yield row[1:]
            continue
        report.unreadable_ranges += 1
        resume = _next_readable(conn, table, after)
        if resume is None:
            return
        after = resume - 1


def _readable_from(conn: sqlite3.Connection, table: str, rowid: int) -> bool | None:
    """Whether a scan from `rowid` reads its first row (None: nothing at or after it)."""
    try:
        row = conn.execute(f'SELECT * FROM "{table}" WHERE rowid >= ? ORDER BY rowid LIMIT 1', (rowid,)).fetchone()
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        return False
    return None if row is None else True


def _next_readable(conn: sqlite3.Connection, table: str, bad: int) -> int | None:
    """The smallest rowid > `bad` from which a scan reads again, or None when nothing after it can."""
    low, step = bad, 1
    while True:  # the rows of one page are consecutive: double the stride until past the bad page
        probe = min(bad + step, _MAX_ROWID)
        found = _readable_from(conn, table, probe)
        if found is None:
            return None
        if found:
            break
        if probe == _MAX_ROWID:
            return None
        low, step = probe, step * 2
    high = probe  # readable from `high`, not from `low`: bisect the boundary
    while high - low > 1:
        mid = (low + high) // 2
        if _readable_from(conn, table, mid):
            high = mid
        else:
            low = mid
    return high


def salvage(src: Path, into: Path, *, skip: tuple[str, ...] = ()) -> SalvageReport:
    """Copy every readable row of `src` (a damaged file) into the database `into`, table by table,
    `INSERT OR IGNORE`. Tables `into` lacks are created from `src`'s own statements; tables in `skip`
    (derived ones, rebuilt from their source instead) are left out."""
    report = SalvageReport(str(src), str(into))
    with readable_copy(src) as (source, rewritten, error):
        report.header_rewritten = rewritten
        if source is None:
            report.schema_error = error
            return report
        try:
            tables = _tables(source)
        except sqlite3.DatabaseError as exc:
            report.schema_error = str(exc)
            return report
        target = connect(into)
        target.execute("PRAGMA foreign_keys=OFF")  # a child row may come before its parent
        try:
            for name, sql in tables:
                if name in skip:
                    report.skipped.append(name)
                    continue
                report.tables[name] = _copy_table(source, target, name, sql)
        finally:
            target.close()
    return report


def _copy_table(source: sqlite3.Connection, target: sqlite3.Connection, name: str, sql: str) -> TableReport:
    table = TableReport()
    try:
        if not _columns(target, name):
            target.execute(sql)  # this version's own schema: the service adds what it needs on open
        cols = [c for c in _columns(source, name) if c in set(_columns(target, name))]
    except sqlite3.DatabaseError as exc:
        table.error = str(exc)
        return table
    insert = f'INSERT OR IGNORE INTO "{name}" ({_names(cols)}) VALUES ({", ".join("?" for _ in cols)})'
    batch: list[tuple] = []
    try:
        for row in _rows(source, name, cols, table):
            batch.append(row)
            if len(batch) >= _BATCH:
                table.copied += _insert(target, insert, batch)
                table.read += len(batch)
                batch = []
    except sqlite3.DatabaseError as exc:  # not damage (that is skipped past): say it, keep what was read
        table.error = str(exc)
    if batch:
        table.copied += _insert(target, insert, batch)
        table.read += len(batch)
    return table


def _insert(conn: sqlite3.Connection, sql: str, rows: list[tuple]) -> int:
    before = conn.total_changes
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(sql, rows)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return conn.total_changes - before


def sequences(src: Path) -> dict[str, int] | None:
    """The AUTOINCREMENT counters of a damaged file (its `sqlite_sequence`, else the largest rowid
    of each such table that can be read), or None when its schema cannot be read at all. A fresh
    file continues after them, so ids stay unique and rows salvaged later keep their own."""
    with readable_copy(src) as (conn, _, _):
        if conn is None:
            return None
        out: dict[str, int] = {}
        try:
            tables = _tables(conn)
        except sqlite3.DatabaseError:
            return None
        with _suppress_damage():
            out.update((name, int(seq)) for name, seq in conn.execute("SELECT name, seq FROM sqlite_sequence"))
        for name, sql in tables:
            if "AUTOINCREMENT" not in (sql or "").upper():
                continue
            with _suppress_damage():
                top = conn.execute(f'SELECT max(rowid) FROM "{name}"').fetchone()[0]
                if top is not None:
                    out[name] = max(out.get(name, 0), int(top))
        return out


@contextmanager
def _suppress_damage() -> Iterator[None]:
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc) and "no such table" not in str(exc):
            raise


def seed(path: Path, counters: dict[str, int]) -> None:
    """A new, empty database at `path` whose AUTOINCREMENT counters start at `counters`: SQLite
    keeps them in `sqlite_sequence` by table name, and uses a row that is there when the service
    creates its table and inserts its first row."""
    conn = connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TABLE _seed (id INTEGER PRIMARY KEY AUTOINCREMENT)")  # makes sqlite_sequence
        conn.execute("DROP TABLE _seed")
        conn.executemany("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", sorted(counters.items()))
        conn.execute("COMMIT")
    finally:
        conn.close()
