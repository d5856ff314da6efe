"""Builders of the derived indexes: the file index, the Add/Search message index, search with its
dense half, the embedder and its backfill, and the watcher over the workspace."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.files.index import FileIndex
    from mateclaw_mem.index.messages.index import MessageIndex
    from mateclaw_mem.index.search import SearchService
    from mateclaw_mem.runtime.build.types import Closer, ModelProvider
    from mateclaw_mem.runtime.watcher import Watcher
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.store import WorkspaceStore

logger = logging.getLogger(__name__)


def file_index(settings: Settings, store: WorkspaceStore, clock: Clock, *, log: Callable[[], ConversationLog],
               on_close: Closer) -> FileIndex:
    """`log` is read only by a rebuild for a new tokenizer version."""
    from mateclaw_mem.index.files.index import FileIndex

    index = FileIndex(settings.index_db, store, clock)
    on_close(index)
    retokenize(settings.state_dir, "search index", index, lambda: index.rebuild(log()))
    return index


def message_index(settings: Settings, *, embedder: Any, log: Callable[[], ConversationLog],
                  on_close: Closer) -> MessageIndex:
    from mateclaw_mem.index.messages.index import MessageIndex

    index = MessageIndex(settings.messages_db, embedder=embedder, dense_weight=settings.search.dense_weight,
                         cache_bytes=settings.aml.cache_bytes, log_db=settings.log_db,
                         index_process=settings.aml.index_process)
    on_close(index)

    def rebuild() -> None:
        # Here, not above: facts imports the model client (openai, ~0.4 s), which rules mode never needs.
        from mateclaw_mem.conversations.facts import FactStore

        facts = FactStore(settings.log_db)
        try:
            index.rebuild(log(), facts)
        finally:
            facts.close()

    retokenize(settings.state_dir, "Add/Search message index", index, rebuild)
    return index


def retokenize(state_dir: Path, name: str, index: FileIndex | MessageIndex, rebuild: Callable[[], object]) -> None:
    """Rebuild an index whose tokens came from another tokenizer version (an upgrade changed the
    stemmer, say): its terms would silently stop matching queries. Both indexes are derived data,
    so this loses nothing. One process does it; the others wait and then find it current."""
    if index.stale_tokenizer() is None:
        return
    from filelock import FileLock

    from mateclaw_mem.index.tokenizer import TOKENIZER_VERSION

    with FileLock(str(state_dir / "retokenize.lock")):
        old = index.stale_tokenizer()
        if old is None:
            return
        logger.warning("the %s was built with tokenizer %s; rebuilding it for %s", name, old, TOKENIZER_VERSION)
        rebuild()


def search(settings: Settings, clock: Clock, index: FileIndex, log: ConversationLog, *, embedder: Any,
           messages: Callable[[], MessageIndex], watching: Callable[[], bool], on_close: Closer) -> SearchService:
    """`watching`: whether a running watcher keeps the index fresh (else a search reconciles first);
    `messages`: the Add/Search message index, opened by the first search of the AML agent's turns."""
    from mateclaw_mem.index.message_hits import AmlConversations
    from mateclaw_mem.index.reconcile import reconcile
    from mateclaw_mem.index.retrievals import RetrievalLog
    from mateclaw_mem.index.search import SearchService

    retrievals = RetrievalLog(settings.log_db, clock.tz)
    on_close(retrievals)

    def freshen() -> None:
        # With a running watcher the index is already fresh; otherwise (a CLI search) one stat-only
        # reconcile makes it so - it reads only files whose mtime or size changed.
        if not watching():
            reconcile(index)

    dense = None
    if embedder is not None:
        from mateclaw_mem.index.dense import DenseRetriever

        dense = DenseRetriever(index, embedder)
    # Add/Search's turns are not copied into index.db: a search of them reads the message index.
    logged = AmlConversations(settings.aml_agent, messages, lambda: log)
    return SearchService(index, retrievals, settings.search, clock, default_agent=settings.default_agent,
                         messages=log, dense=dense, freshen=freshen, logged=logged.candidates)


def embedder(settings: Settings, *, model: ModelProvider, on_close: Closer) -> Any:
    """The embedding call and its modes (index/dense.py), or None without `model.embedding-model`.
    It uses the shared model client, or - embeddings-only, no chat model (rules mode for every
    other step) - a client of its own on the same usage log, so every call is still counted."""
    section = settings.model
    if not section.embeddings_configured:
        return None
    from mateclaw_mem.index.dense import Embedder

    client = model()
    if client is None:
        from mateclaw_mem.llm.client import ModelClient
        from mateclaw_mem.llm.usage import UsageLog

        usage = UsageLog(settings.log_db)
        on_close(usage)
        client = ModelClient.from_settings(settings, usage=usage)
        on_close(client)
    return Embedder(lambda texts, kind: client.embed(texts, step="search-embed", input_type=kind),
                    section.embedding_model, section.embedding_query_prefix, section.embedding_passage_prefix,
                    section.embedding_input_type)


def backfill(embedder: Any, *, search: Callable[[], SearchService], messages: Callable[[], MessageIndex]) -> Any:
    """The background embedding of notes and AML turns without a vector (None without embeddings)."""
    if embedder is None:
        return None
    from mateclaw_mem.index.dense import Backfill

    sources: dict[str, Any] = {}
    if search().dense is not None:
        sources["files"] = search().dense
    if messages().dense is not None:
        sources["aml_messages"] = messages().dense
    return Backfill(sources) if sources else None


def watcher(settings: Settings, index: FileIndex, log: ConversationLog, *, on_close: Closer) -> Watcher:
    """A watcher on the workspace, not started: `Services.start()` starts it."""
    from mateclaw_mem.runtime.watcher import Watcher

    def sync_messages() -> None:
        try:
            index.sync_messages(log)
        except Exception as exc:
            logger.warning("could not index new conversation messages: %s", exc)

    built = Watcher(index, settings.workspace, reconcile_interval=settings.search.reconcile_interval_seconds,
                    on_reconcile=sync_messages, live=settings.search.watch)
    on_close(built)
    return built
