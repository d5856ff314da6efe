"""Operations over the indexes that read the container itself (runtime/services.py `Services`, which
calls them): a full or per-agent reindex, and the `index` and `redaction` parts of `status` - each
without creating an index that does not exist yet. The indexes are built by runtime/build/index.py."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from mateclaw_mem.index.tokenizer import TOKENIZER_VERSION
from mateclaw_mem.runtime import heal

if TYPE_CHECKING:
    from mateclaw_mem.conversations.aml import AmlService
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.files.index import FileIndex
    from mateclaw_mem.index.messages.index import MessageIndex
    from mateclaw_mem.index.search import SearchService
    from mateclaw_mem.runtime.watcher import Watcher
    from mateclaw_mem.workspace.store import WorkspaceStore


class Container(heal.Container, Protocol):
    """What these operations read of the container: the index parts, each built on first use, and
    whether one is built yet (`built`). A reindex runs heal's check first, so this is heal's
    Container too."""

    def built(self, name: str) -> bool: ...

    @property
    def store(self) -> WorkspaceStore: ...
    @property
    def log(self) -> ConversationLog: ...
    @property
    def file_index(self) -> FileIndex: ...
    @property
    def message_index(self) -> MessageIndex: ...
    @property
    def search(self) -> SearchService: ...
    @property
    def aml(self) -> AmlService: ...
    @property
    def watcher(self) -> Watcher: ...
    @property
    def backfill(self) -> Any: ...


def reindex(services: Container, *, agent: str | None = None, progress: Any = None) -> dict:
    """Full rebuild (built aside and swapped) or, for one agent, a forced re-read of its files;
    then a reconcile for whatever changed while it ran."""
    from mateclaw_mem.index.reconcile import reconcile

    if not services.heal_checked:  # every page: a rebuild reads the old tables (runtime/heal.py)
        heal.before_first_open(services, every_page=True)
    index = services.file_index
    if agent:
        files = list(index.disk_files(agent))
        if progress:
            progress(0, len(files))
        for i, f in enumerate(files, 1):
            index.ingest(f.agent, f.owner, f.rel, force=True)
            if progress:
                progress(i, len(files))
        report = reconcile(index, agent=agent)
        return {"agent": agent, "files": len(files), "removed": len(report.removed)}
    built = index.rebuild(services.log, progress=progress)
    report = reconcile(index)
    out = {"files": built.files, "chunks": built.chunks, "messages": built.messages, "skipped": built.skipped,
           "changed_during_rebuild": report.touched}
    if (services.settings.messages_db).exists():
        # The Add/Search message index is derived from the same log: a full reindex rebuilds it too.
        facts = services.aml.facts.store if services.aml.facts is not None else None
        out["aml_messages"] = services.message_index.rebuild(services.log, facts)
    return out


def index_status(services: Container) -> dict:
    """Files indexed against files on disk, the last sync, the watcher - without creating an index."""
    path = services.settings.index_db
    if not services.built("file_index") and not path.exists():
        return {"built": False, "hint": "run `mateclaw-mem reindex` (or `serve`) to build the search index"}
    index = services.file_index
    counts = index.counts()
    on_disk = services.store.count_files(archives=True)  # what `index.disk_files()` walks
    last = index.last_sync_ms
    tz = services.clock.tz
    out: dict[str, Any] = {
        "built": True,
        "files_indexed": counts["files"],
        "files_on_disk": on_disk,
        "chunks": counts["chunks"],
        "messages": counts["messages"],
        "tokenizer": TOKENIZER_VERSION,
        "last_sync": datetime.fromtimestamp(last / 1000, tz).isoformat(timespec="seconds") if last else None,
        "size_bytes": path.stat().st_size if path.exists() else 0,
    }
    out["watcher"] = (services.watcher.status() if services.built("watcher")
                      else {"state": "not running (`serve` starts it)"})
    model = services.search.dense.model if services.search.dense is not None else ""
    vectors = index.vector_counts()
    if model or vectors:
        out["embeddings"] = {"model": services.settings.model.embedding_model or None, "vectors": vectors.get(model, 0),
                             "stale": sum(n for m, n in vectors.items() if m != model)}
        if services.built("backfill") and services.backfill is not None:
            out["embeddings"].update(services.backfill.status())  # e.g. files: "1,234 / 5,000 vectors"
    return out


def redaction_status(services: Container) -> dict:
    """Rows that held a secret when an older workspace was first opened by this version and were
    redacted in place, per database (log.db per table) - without creating an index."""
    migrated: dict[str, Any] = {"log.db": services.log.redacted_on_migration()}
    if services.built("file_index") or services.settings.index_db.exists():
        migrated["index.db"] = services.file_index.redacted_on_migration() or 0
    if services.built("message_index") or services.settings.messages_db.exists():
        migrated["messages.db"] = services.message_index.redacted_on_migration() or 0
    total = sum(migrated["log.db"].values()) + sum(v for k, v in migrated.items() if k != "log.db")
    return {"redacted_in_place": migrated, "total": total}
