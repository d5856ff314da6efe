"""Writing the file index: one file at a time (ingest, delete), the conversation log's new
messages, and the full rebuild.

A full rebuild builds `*_new` tables beside the live ones, in batches, and swaps them in one
transaction: searches keep reading the old tables (WAL snapshots) and never see a half-built
index. Writes made meanwhile land in the old tables; the reconcile that follows the swap re-reads
any file whose mtime or size no longer matches.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mateclaw_mem.db import owner_column, run_once
from mateclaw_mem.errors import InvalidInputError, InvalidPathError
from mateclaw_mem.index.chunker import Chunk, chunk_file
from mateclaw_mem.index.files.storage import FileStorage, schema
from mateclaw_mem.index.sources import AML_TRIGGER, SourcedLog
from mateclaw_mem.workspace import blobs, month_archive, oversized

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store import WorkspaceStore

log = logging.getLogger(__name__)
PART_CHARS = 262_144  # an oversized file's chunks are written in transactions of about this much text

_BATCH_FILES = 200
# `meta` marker (and count) of the one-time removal of Add/Search turns an older version copied here.
AML_COPIES_DROPPED = "dropped:aml-copies"
_AUTOMERGE = 4  # FTS5's default: what ingests after a rebuild run with


@dataclass(frozen=True)
class IngestResult:
    agent: str
    owner: str | None
    rel: str
    changed: bool  # the index content changed (new, edited or removed file)
    deleted: bool = False
    chunks: int = 0


@dataclass(frozen=True)
class RebuildReport:
    files: int
    chunks: int
    messages: int
    skipped: list[str]


def filed_owner(store: WorkspaceStore, owner: str | None) -> str | None:
    """The owner a file of `owner` is filed under: owner folders exist only with owner isolation
    on; otherwise every file is shared (None). "" is taken as None."""
    return owner if owner and store.owner_isolation else None


FileKey = tuple[str, str | None, str]  # (agent, owner, rel)


@dataclass(frozen=True)
class _Plan:
    """What one file's ingest will write, decided outside the write transaction."""

    result: IngestResult
    write: bool = False  # replace the file's rows with `chunks`
    remove: bool = False  # delete its rows (the result says whether there were any)
    row_id: int | None = None  # touched but unchanged: only remember the new stat of this row
    edit_id: int | None = None  # with `write`: rewrite only the changed sections of this row
    mtime: float = 0.0
    size: int = 0
    sha: str = ""
    chunks: list | None = None


def ingest(
    db: FileStorage, store: WorkspaceStore, agent: str, owner: str | None, rel: str, *, verify: bool = False,
    force: bool = False,
) -> IngestResult:
    """Bring one file's index rows in line with the disk (a missing file is removed).

    By default an unchanged mtime and size means "unchanged" without reading the file; `verify`
    reads it and compares the hash and the chunk count (what a deep reconcile does); `force`
    re-chunks it regardless."""
    return ingest_many(db, store, [(agent, owner, rel)], verify=verify, force=force)[0]


def ingest_many(
    db: FileStorage, store: WorkspaceStore, keys: list[FileKey], *, verify: bool = False, force: bool = False,
) -> list[IngestResult]:
    """`ingest` for several files with one write transaction (a burst of changed files): every
    file is read and chunked first, then the rows of all that changed are written at once."""
    plans = [_plan(db, store, agent, owner, rel, verify=verify, force=force) for agent, owner, rel in keys]
    if not any(p.write or p.remove or p.row_id is not None for p in plans):
        return [p.result for p in plans]
    limit = store.file_max_bytes
    results = []
    for p in plans:
        if p.write and limit and p.size > limit:
            _write_in_parts(db, p, limit)
    with db.tx() as conn:
        synced = False
        for p in plans:
            r = p.result
            if p.write and limit and p.size > limit:
                results.append(r)  # written above, a part at a time
                continue
            if p.row_id is not None:
                conn.execute("UPDATE files SET mtime = ?, size = ? WHERE id = ?", (p.mtime, p.size, p.row_id))
            elif p.remove:
                removed = db.delete_file(conn, "", r.agent, r.owner, r.rel)
                synced = synced or removed
                r = IngestResult(r.agent, r.owner, r.rel, changed=removed, deleted=True)
            elif p.write and p.edit_id is not None:
                db.update_file(conn, p.edit_id, r.agent, r.owner, r.rel, p.mtime, p.size, p.sha, p.chunks or [])
                synced = True
            elif p.write:
                db.delete_file(conn, "", r.agent, r.owner, r.rel)
                db.insert_file(conn, "", r.agent, r.owner, r.rel, p.mtime, p.size, p.sha, p.chunks or [])
                synced = True
            results.append(r)
        if synced:
            db.mark_synced(conn)
    return results


def _write_in_parts(db: FileStorage, p: _Plan, limit: int) -> None:
    """An oversized file (workspace/oversized.py) is indexed whole, in transactions of at most
    PART_CHARS of text each: the index's write lock is free between them (in one, a 50 MB file held
    it for the whole tokenizing). Until the last part the file's row has no hash and no mtime, so a
    start after a crash midway indexes it again."""
    r, chunks = p.result, p.chunks or []
    bounds, start, size = [], 0, 0
    for i, ch in enumerate(chunks):
        size += len(ch.text)
        if size >= PART_CHARS:
            bounds.append((start, i + 1))
            start, size = i + 1, 0
    if start < len(chunks) or not bounds:
        bounds.append((start, len(chunks)))
    log.warning("indexing %s/%s in %d part(s): %s", r.agent, r.rel, len(bounds),
                oversized.describe(r.rel, p.size, limit))
    with db.tx() as conn:
        db.delete_file(conn, "", r.agent, r.owner, r.rel)
        db.insert_file(conn, "", r.agent, r.owner, r.rel, 0.0, p.size, "", chunks[slice(*bounds[0])])
        file_id = conn.execute("SELECT id FROM files WHERE agent = ? AND owner = ? AND rel = ?",
                               (r.agent, owner_column(r.owner), r.rel)).fetchone()["id"]
    for lo, hi in bounds[1:]:
        with db.tx() as conn:
            if conn.execute("SELECT 1 FROM files WHERE id = ?", (file_id,)).fetchone() is None:
                return  # removed or re-indexed meanwhile: that write is newer than this one
            db.insert_chunks(conn, file_id, r.agent, r.owner, r.rel, chunks[lo:hi])
    with db.tx() as conn:
        conn.execute("UPDATE files SET mtime = ?, sha = ? WHERE id = ?", (p.mtime, p.sha, file_id))
        db.mark_synced(conn)


def _plan(
    db: FileStorage, store: WorkspaceStore, agent: str, owner: str | None, rel: str, *, verify: bool, force: bool,
) -> _Plan:
    owner = filed_owner(store, owner)
    gone = _Plan(IngestResult(agent, owner, rel, changed=False, deleted=True), remove=True)
    try:
        path = blobs.path(store, agent, rel, owner) if blobs.is_binary(rel) else store.path(agent, rel, owner)
    except InvalidPathError:
        return gone
    try:
        st = os.stat(path)  # before the read: a change after it shows up as a newer mtime later
    except OSError:
        return gone
    row = db.file_row(agent, owner, rel)
    same_stat = row is not None and row["mtime"] == st.st_mtime and row["size"] == st.st_size
    unchanged = _Plan(IngestResult(agent, owner, rel, changed=False))
    if same_stat and not (verify or force):
        return unchanged
    try:
        read = read_chunks(store, agent, owner, rel)
    except (InvalidInputError, InvalidPathError) as exc:
        log.warning("not indexing %s/%s: %s", agent, rel, exc)
        return gone
    if read is None:
        return gone
    sha, chunks = read
    if not force and row is not None and row["sha"] == sha:
        intact = not verify or db.chunk_count(row["id"]) == len(chunks)
        if intact:
            if same_stat:
                return unchanged
            # Touched but unchanged: remember the new stat, skip the work.
            return _Plan(unchanged.result, row_id=row["id"], mtime=st.st_mtime, size=st.st_size)
    # An edit of an indexed file rewrites only its changed sections; `verify` and `force` (an index
    # repaired or re-tokenized) rewrite every row of it.
    edit_id = row["id"] if row is not None and not (verify or force) else None
    return _Plan(IngestResult(agent, owner, rel, changed=True, chunks=len(chunks)), write=True, edit_id=edit_id,
                 mtime=st.st_mtime, size=st.st_size, sha=sha, chunks=chunks)


def read_chunks(store: WorkspaceStore, agent: str, owner: str | None, rel: str) -> tuple[str, list[Chunk]] | None:
    """(sha, chunks) of one file as the index holds it; None when it is gone. A month archive is read
    inside: every note it keeps is chunked as that note, titled with its path, under the archive's
    path (a hit's source). A damaged one raises InvalidInputError, so it is reported and skipped."""
    if month_archive.is_archive(rel):
        got = month_archive.read_rel(store, agent, rel, owner=owner)
        if got is None:
            return None
        return got.sha, [replace(c, title=f"{member}: {c.title}" if c.title else member)
                         for member, text in got.texts() for c in chunk_file(member, text)]
    snap = store.read(agent, rel, owner=owner)
    return (snap.sha, chunk_file(rel, snap.text)) if snap.exists else None


def delete(db: FileStorage, store: WorkspaceStore, agent: str, owner: str | None, rel: str) -> IngestResult:
    owner = filed_owner(store, owner)
    with db.tx() as conn:
        removed = db.delete_file(conn, "", agent, owner, rel)
        if removed:
            db.mark_synced(conn)
    return IngestResult(agent, owner, rel, changed=removed, deleted=True)


def sync_messages(db: FileStorage, source: SourcedLog, *, batch: int = 1000) -> int:
    """Index log messages beyond the stored watermark. Cheap when there is nothing new."""
    drop_aml_copies(db, source)
    added = 0
    while True:
        watermark = db.watermark(db.reader())
        # Add/Search turns are left out by the log itself (the message index holds them): the
        # watermark moves past them unread.
        messages, upto = source.since_kept(watermark, skip_source=AML_TRIGGER, limit=batch)
        if upto <= watermark:
            return added
        with db.tx() as conn:
            # Re-read inside the transaction: another process may have indexed these already.
            current = db.watermark(conn)
            fresh = [m for m in messages if m.id > current]
            added += db.insert_messages(conn, "", fresh)
            if upto > current:
                conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('messages_watermark', ?)", (str(upto),))
        if len(messages) < batch:
            return added


def drop_aml_copies(db: FileStorage, source: SourcedLog) -> None:
    """Once per index file: delete the copies of Add/Search turns an older version indexed here (the
    message index holds them; the file search reads them there), then give their pages back.

    The log says which turns those are (its `trigger_source`), read up to this index's watermark,
    before the write transaction; turns beyond it are never copied any more."""
    if db.reader().execute("SELECT 1 FROM meta WHERE key = ?", (AML_COPIES_DROPPED,)).fetchone() is not None:
        return
    ids: list[int] = []
    if db.reader().execute("SELECT 1 FROM chunks WHERE message_id IS NOT NULL LIMIT 1").fetchone() is not None:
        after, upto = 0, db.watermark(db.reader())
        while after < upto:
            part = source.since(after, limit=2000)
            if not part:
                break
            ids.extend(m.id for m in part if m.trigger_source == AML_TRIGGER and m.id <= upto)
            after = part[-1].id
    dropped = 0

    def drop(conn: sqlite3.Connection) -> int:
        nonlocal dropped
        for i in range(0, len(ids), 500):
            part = ids[i : i + 500]
            marks = ",".join("?" * len(part))
            conn.execute(f"DELETE FROM fts WHERE rowid IN (SELECT id FROM chunks WHERE message_id IN ({marks}))", part)
            dropped += conn.execute(f"DELETE FROM chunks WHERE message_id IN ({marks})", part).rowcount
        if dropped:  # FTS5 keeps deleted tokens in its segments until they are merged
            conn.execute("INSERT INTO fts (fts) VALUES ('optimize')")
        return dropped

    run_once(db.w, db.write_lock, AML_COPIES_DROPPED, drop)
    if dropped:
        log.info("dropped %d copies of Add/Search turns from %s (the message index holds them)", dropped, db.path)
        compact(db)


def compact(db: FileStorage) -> None:
    """Give back the pages of deleted rows and the WAL that grew with them (after a rebuild, or a
    migration that dropped many rows). Outside any transaction; holds the write lock."""
    with db.write_lock:
        try:
            if db.w.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
                # A file made before auto_vacuum was applied: one full VACUUM (seconds at 100k
                # sections) makes it incremental and gives the free pages back now.
                db.w.execute("PRAGMA auto_vacuum = INCREMENTAL")
                db.w.execute("VACUUM")
            # Through executescript: `execute` steps this pragma once, which frees a single page.
            db.w.executescript("PRAGMA incremental_vacuum;")
            db.w.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:  # the rows are gone; only disk space is not yet returned
            log.warning("could not compact %s: %s", db.path, exc)


def rebuild(
    db: FileStorage, store: WorkspaceStore, source: SourcedLog | None,
    progress: Callable[[int, int], None] | None,
) -> RebuildReport:
    """Build every table aside and swap it in at once; the caller holds the rebuild lock."""
    s = "_new"
    with db.tx() as conn:
        for t in ("files", "chunks", "fts"):
            conn.execute(f"DROP TABLE IF EXISTS {t}{s}")  # a crashed earlier build
    # executescript commits implicitly; run it outside our explicit transaction.
    with db.write_lock:
        db.w.executescript(schema(s))
        # No incremental merging while the table is only appended to: one merge at the end
        # (`optimize`) costs less than the repeated ones and leaves one segment per term.
        db.w.execute(f"INSERT INTO fts{s} (fts{s}, rank) VALUES ('automerge', 0)")
    files = list(store.walk_files(archives=True))
    total = len(files)
    done = chunks = 0
    skipped: list[str] = []
    if progress:
        progress(0, total)
    for start in range(0, total, _BATCH_FILES):
        prepared = []
        for f in files[start : start + _BATCH_FILES]:
            try:
                read = read_chunks(store, f.agent, f.owner, f.rel)
            except (InvalidInputError, InvalidPathError) as exc:
                skipped.append(f"{f.agent}/{f.rel}: {exc}")
                continue
            if read is not None:
                prepared.append((f, *read))
        with db.tx() as conn:
            for f, sha, file_chunks in prepared:
                db.insert_file(conn, s, f.agent, f.owner, f.rel, f.mtime, f.size, sha, file_chunks)
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
            with db.tx() as conn:
                messages += db.insert_messages(conn, s, batch)
            watermark = max(m.id for m in batch)
    with db.tx() as conn:
        conn.execute(f"INSERT INTO fts{s} (fts{s}) VALUES ('optimize')")
        conn.execute(f"INSERT INTO fts{s} (fts{s}, rank) VALUES ('automerge', {_AUTOMERGE})")
    with db.tx() as conn:
        for t in ("fts", "chunks", "files"):
            conn.execute(f"DROP TABLE IF EXISTS {t}")
            conn.execute(f"ALTER TABLE {t}{s} RENAME TO {t}")
        db.recount_scopes(conn)  # the old tables' scopes are gone with them
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('messages_watermark', ?)", (str(watermark),)
        )
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('rebuilt_ms', ?)", (str(db.now_ms()),))
        # Built without Add/Search turns: nothing of an older version's copies is left to drop.
        conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, '0')", (AML_COPIES_DROPPED,))
        db.set_tokenizer(conn)
        db.mark_synced(conn)
    # Give back the dropped tables' pages and the WAL the build grew (both as large as the index).
    compact(db)
    return RebuildReport(files=total - len(skipped), chunks=chunks, messages=messages, skipped=skipped)
