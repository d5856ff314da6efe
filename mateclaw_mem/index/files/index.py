"""The derived file index, `workspace/.mateclaw/index.db`: memory files (FTS5 chunks) and the
conversation log's messages but Add/Search's (the message index holds those), for the file search
(CLI/HTTP/MCP `search`).

Everything here is rebuilt from the files (and the conversation log) by `rebuild()`; nothing is
the truth. `FileIndex` composes `storage` (tables, connections, row writes), `ingest` (files in,
messages in, the rebuild built aside) and `query` (what search reads); where files live on disk
is the workspace's business (`WorkspaceStore.walk_files` / `locate`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mateclaw_mem.db import owner_column
from mateclaw_mem.index.files import ingest, query
from mateclaw_mem.index.files.ingest import IngestResult, RebuildReport
from mateclaw_mem.index.files.query import Candidate
from mateclaw_mem.index.files.storage import FileStorage, IndexedFile, chunk_sha
from mateclaw_mem.index.sources import SourcedLog
from mateclaw_mem.index.tokenizer import tokenize

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.workspace.store import WorkspaceStore, WriteEvent
    from mateclaw_mem.workspace.walk import DiskFile

log = logging.getLogger(__name__)


class FileIndex:
    """Thread-safe. Writes go through one connection under a lock; each reading thread has its own
    connection so searches never wait for an ingest or a rebuild batch. Owner None = shared files."""

    def __init__(self, path: Path, store: WorkspaceStore, clock: Clock) -> None:
        self.path = path
        self.store = store
        self.clock = clock
        self._db = FileStorage(path, clock)
        self._rebuild_lock = threading.Lock()
        self._listeners: list[Callable[[IngestResult], None]] = []

    def redacted_on_migration(self) -> int | None:
        """Messages the one-time migration redacted in place (for `status`); None: not run."""
        return self._db.redacted_on_migration()

    def stale_tokenizer(self) -> str | None:
        """The tokenizer this index was built with when it is not the current one, else None."""
        return self._db.stale_tokenizer()

    def close(self) -> None:
        self._db.close()

    def mark_synced(self) -> None:
        """Remember (in the index, so every process sees it) when the index last caught up with the disk."""
        self._db.mark_synced()

    @property
    def last_sync_ms(self) -> int | None:
        return self._db.meta_ms("last_sync_ms")

    def rebuilt_ms(self) -> int | None:
        return self._db.meta_ms("rebuilt_ms")

    def counts(self) -> dict[str, int]:
        return self._db.counts()

    # -- the disk --------------------------------------------------------------------------------

    def filed_owner(self, owner: str | None) -> str | None:
        """The owner files of `owner` are filed under (None - shared - unless owner isolation is on)."""
        return ingest.filed_owner(self.store, owner)

    def locate(self, path: Path) -> tuple[str, str | None, str] | None:
        """(agent, owner, rel) of a memory file path inside the workspace, or None if it is not one."""
        return self.store.locate(path)

    def disk_files(self, agent: str | None = None) -> Iterator[DiskFile]:
        """Every memory file on disk (stat only, nothing read)."""
        return self.store.walk_files(agent, archives=True)

    def indexed_files(self, agent: str | None = None) -> dict[tuple[str, str | None, str], IndexedFile]:
        return self._db.indexed_files(agent)

    # -- ingest ----------------------------------------------------------------------------------

    def on_write(self, event: WriteEvent) -> None:
        """Store listener: the daemon's own writes go straight in (the watcher's echo is then a no-op)."""
        owner = self.filed_owner(event.owner)
        if event.sha:
            current = self._db.file_row(event.agent, owner, event.rel)
            if current is not None and current["sha"] == event.sha:
                return
        self.ingest(event.agent, owner, event.rel)

    def subscribe(self, listener: Callable[[IngestResult], None]) -> None:
        """Called with every ingest that changed a file's rows, whoever caused it (the store's
        writes, the watcher's hand edits, a reconcile): the one pipeline derived layers follow."""
        self._listeners.append(listener)

    def _notify(self, results: list[IngestResult]) -> None:
        for result in results:
            if not result.changed:
                continue
            for listener in list(self._listeners):
                try:
                    listener(result)
                except Exception:  # a derived layer failing must not stop the index
                    log.exception("ingest listener failed for %s/%s", result.agent, result.rel)

    def ingest(
        self, agent: str, owner: str | None, rel: str, *, verify: bool = False, force: bool = False
    ) -> IngestResult:
        """Bring one file's index rows in line with the disk (a missing file is removed); see
        `ingest.ingest` for `verify` and `force`."""
        result = ingest.ingest(self._db, self.store, agent, owner, rel, verify=verify, force=force)
        self._notify([result])
        return result

    def ingest_many(self, keys: list[tuple[str, str | None, str]]) -> list[IngestResult]:
        """`ingest` for several files, their rows written in one transaction (a burst of changes)."""
        results = ingest.ingest_many(self._db, self.store, keys)
        self._notify(results)
        return results

    def delete(self, agent: str, owner: str | None, rel: str) -> IngestResult:
        result = ingest.delete(self._db, self.store, agent, owner, rel)
        self._notify([result])
        return result

    def sync_messages(self, source: SourcedLog, *, batch: int = 1000) -> int:
        """Index log messages beyond the stored watermark. Cheap when there is nothing new."""
        return ingest.sync_messages(self._db, source, batch=batch)

    def rewrite_messages(self, changes: dict[int, str]) -> int:
        """The index's copy of log messages rewritten in place (a forget), {message id: new text}."""
        done = 0
        with self._db.tx() as conn:
            for mid, text in changes.items():
                for r in conn.execute("SELECT id FROM chunks WHERE message_id = ?", (mid,)).fetchall():
                    toks = tokenize(text)
                    conn.execute("UPDATE chunks SET text = ?, sha = ?, ntok = ? WHERE id = ?",
                                 (text, chunk_sha("", text), len(toks), r["id"]))
                    conn.execute("UPDATE fts SET body = ? WHERE rowid = ?", (" ".join(toks), r["id"]))
                    done += 1
        return done

    def delete_owner_messages(self, agent: str, owner: str) -> int:
        """The index's copies of one owner's log messages deleted (a person's data deleted,
        conversations/aml_users.py; the caller scrubs the file). Returns the chunks deleted."""
        key = (agent, owner_column(owner))
        with self._db.tx() as conn:
            conn.execute("DELETE FROM fts WHERE rowid IN (SELECT id FROM chunks WHERE agent = ? AND owner = ?"
                         " AND message_id IS NOT NULL)", key)
            n = conn.execute("DELETE FROM chunks WHERE agent = ? AND owner = ? AND message_id IS NOT NULL",
                             key).rowcount
            # The scopes row names the owner: gone once no chunk of theirs is left (the trigger only adds).
            conn.execute("DELETE FROM chunk_scopes WHERE agent = ? AND owner = ? AND NOT EXISTS"
                         " (SELECT 1 FROM chunks c WHERE c.agent = chunk_scopes.agent AND c.owner = chunk_scopes.owner"
                         " AND c.kind = chunk_scopes.kind)", key)
        return n

    def rebuild(
        self,
        source: SourcedLog | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> RebuildReport:
        """Build every table aside and swap it in at once; searches keep working throughout."""
        if not self._rebuild_lock.acquire(blocking=False):
            from mateclaw_mem.errors import BusyError

            raise BusyError("a rebuild of the search index is already running")
        try:
            return ingest.rebuild(self._db, self.store, source, progress)
        finally:
            self._rebuild_lock.release()

    # -- queries ---------------------------------------------------------------------------------

    def match(
        self, expr: str, *, scopes: Sequence[tuple[str, Sequence[str | None]]], scope: str, limit: int,
        ranked: bool = True, title_weight: float = 2.0, at_most: int | None = None, at_least: int = 0,
    ) -> list[Candidate]:
        """Chunks matching an FTS5 expression in any of `scopes`, (agent, owners) pairs (see `query.match`)."""
        return query.match(self._db, expr, scopes=scopes, scope=scope, limit=limit, ranked=ranked,
                           title_weight=title_weight, at_most=at_most, at_least=at_least)

    def chunks_by_ids(self, ids: list[int]) -> list[Candidate]:
        return query.chunks_by_ids(self._db, ids)

    def scope_chunks(
        self, *, agent: str, owners: Sequence[str | None], kinds: Sequence[str]
    ) -> list[tuple[int, str, str]]:
        """(id, sha, text-for-embedding) of every chunk in a scope (dense retrieval)."""
        return query.scope_chunks(self._db, agent=agent, owners=owners, kinds=kinds)

    def corpus_stats(self) -> tuple[int, float]:
        """(number of chunks, average tokens per chunk), cached until the database changes."""
        return query.corpus_stats(self._db)

    def doc_freqs(self, terms: list[str]) -> dict[str, int]:
        return query.doc_freqs(self._db, terms)

    # -- vectors ---------------------------------------------------------------------------------

    def vectors(self, shas: list[str], model: str) -> dict[str, bytes]:
        return self._db.vectors(shas, model)

    def put_vectors(self, model: str, items: list[tuple[str, bytes]]) -> None:
        self._db.put_vectors(model, items)

    def vector_counts(self) -> dict[str, int]:
        return self._db.vector_counts()
