"""How `Services` builds the search index, the search service and the watcher (kept out of
services.py so the composition root stays a list of one-liners)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from mateclaw_mem.index.tokenizer import TOKENIZER_VERSION
from mateclaw_mem.runtime import heal

if TYPE_CHECKING:
    from collections.abc import Callable

    from mateclaw_mem.conversations.aml import AmlService
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.files.index import FileIndex
    from mateclaw_mem.index.messages.index import MessageIndex
    from mateclaw_mem.index.search import SearchService
    from mateclaw_mem.llm.client import ModelClient
    from mateclaw_mem.runtime.watcher import Watcher
    from mateclaw_mem.workspace.store import WorkspaceStore, WriteEvent

log = logging.getLogger(__name__)


class Container(heal.Container, Protocol):
    """What these builders read of the container (runtime/services.py `Services`, which calls them):
    the index parts, each built on first use, and whether one is built yet (`built`). A reindex runs
    heal's check first, so this is heal's Container too."""

    def built(self, name: str) -> bool: ...
    def on_close(self, closer: Any) -> None: ...

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
    def model(self) -> ModelClient | None: ...
    @property
    def embeddings(self) -> Any: ...
    @property
    def backfill(self) -> Any: ...


def build_file_index(services: Container) -> FileIndex:
    from mateclaw_mem.index.files.index import FileIndex

    index = FileIndex(services.settings.index_db, services.store, services.clock)
    services.on_close(index)
    _retokenize(services, "search index", index, lambda: index.rebuild(services.log))
    return index


def build_message_index(services: Container) -> MessageIndex:
    from mateclaw_mem.index.messages.index import MessageIndex

    index = MessageIndex(services.settings.messages_db, embedder=services.embeddings,
                         dense_weight=services.settings.search.dense_weight,
                         cache_bytes=services.settings.aml.cache_bytes)
    services.on_close(index)

    def rebuild() -> None:
        # Here, not above: facts imports the model client (openai, ~0.4 s), which rules mode never needs.
        from mateclaw_mem.conversations.facts import FactStore

        facts = FactStore(services.settings.log_db)
        try:
            index.rebuild(services.log, facts)
        finally:
            facts.close()

    _retokenize(services, "Add/Search message index", index, rebuild)
    return index


def _retokenize(services: Container, name: str, index: FileIndex | MessageIndex, rebuild: Callable[[], object]) -> None:
    """Rebuild an index whose tokens came from another tokenizer version (an upgrade changed the
    stemmer, say): its terms would silently stop matching queries. Both indexes are derived data,
    so this loses nothing. One process does it; the others wait and then find it current."""
    if index.stale_tokenizer() is None:
        return
    from filelock import FileLock

    with FileLock(str(services.settings.state_dir / "retokenize.lock")):
        old = index.stale_tokenizer()
        if old is None:
            return
        log.warning("the %s was built with tokenizer %s; rebuilding it for %s", name, old, TOKENIZER_VERSION)
        rebuild()


def on_store_write(services: Container, event: WriteEvent) -> None:
    """Store listener: ingest the write when an index exists (so CLI writes keep it fresh too),
    without creating one just because a file was written."""
    if services.built("file_index") or (services.settings.index_db).exists():
        services.file_index.on_write(event)


def build_search(services: Container) -> SearchService:
    from mateclaw_mem.index.message_hits import AmlConversations
    from mateclaw_mem.index.reconcile import reconcile
    from mateclaw_mem.index.retrievals import RetrievalLog
    from mateclaw_mem.index.search import SearchService

    index = services.file_index
    retrievals = RetrievalLog(services.settings.log_db, services.clock.tz)
    services.on_close(retrievals)

    def freshen() -> None:
        # With a running watcher the index is already fresh; otherwise (a CLI search) one stat-only
        # reconcile makes it so - it reads only files whose mtime or size changed.
        if not services.built("watcher") or services.watcher.state != "running":
            reconcile(index)

    # Add/Search's turns are not copied into index.db: a search of them reads the message index.
    logged = AmlConversations(services.settings.aml_agent, lambda: services.message_index, lambda: services.log)
    return SearchService(
        index,
        retrievals,
        services.settings.search,
        services.clock,
        default_agent=services.settings.default_agent,
        messages=services.log,
        dense=_build_dense(services, index),
        freshen=freshen,
        logged=logged.candidates,
    )


def _build_dense(services: Container, index: FileIndex) -> Any:
    if services.embeddings is None:
        return None
    from mateclaw_mem.index.dense import DenseRetriever

    return DenseRetriever(index, services.embeddings)


def build_embedder(services: Container) -> Any:
    """The embedding call and its modes (index/dense.py), or None without `model.embedding-model`.
    It uses the shared model client, or - embeddings-only, no chat model (rules mode for every
    other step) - a client of its own on the same usage log, so every call is still counted."""
    model = services.settings.model
    if not model.embeddings_configured:
        return None
    from mateclaw_mem.index.dense import Embedder

    client = services.model
    if client is None:
        from mateclaw_mem.llm.client import ModelClient
        from mateclaw_mem.llm.usage import UsageLog

        usage = UsageLog(services.settings.log_db)
        services.on_close(usage)
        client = ModelClient.from_settings(services.settings, usage=usage)
        services.on_close(client)
    return Embedder(lambda texts, kind: client.embed(texts, step="search-embed", input_type=kind),
                    model.embedding_model, model.embedding_query_prefix, model.embedding_passage_prefix,
                    model.embedding_input_type)


def build_backfill(services: Container) -> Any:
    """The background embedding of notes and AML turns without a vector (None without embeddings)."""
    if services.embeddings is None:
        return None
    from mateclaw_mem.index.dense import Backfill

    sources: dict[str, Any] = {}
    if services.search.dense is not None:
        sources["files"] = services.search.dense
    if services.message_index.dense is not None:
        sources["aml_messages"] = services.message_index.dense
    return Backfill(sources) if sources else None


def build_watcher(services: Container) -> Watcher:
    """A watcher on the workspace, not started: `serve` starts it."""
    from mateclaw_mem.runtime.watcher import Watcher

    index = services.file_index

    def sync_messages() -> None:
        try:
            index.sync_messages(services.log)
        except Exception as exc:
            log.warning("could not index new conversation messages: %s", exc)

    watcher = Watcher(
        index,
        services.settings.workspace,
        reconcile_interval=services.settings.search.reconcile_interval_seconds,
        on_reconcile=sync_messages,
        live=services.settings.search.watch,
    )
    services.on_close(watcher)
    return watcher


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
