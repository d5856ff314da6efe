"""Builders of the conversation log and of the Agent Memory Leaderboard's Add/Search service, its
reranker and its users' deletion and retention."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.conversations.aml import AmlService
    from mateclaw_mem.conversations.aml_users import AmlUsers
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.files.index import FileIndex
    from mateclaw_mem.index.messages.index import MessageIndex
    from mateclaw_mem.runtime.build.types import Closer, ModelProvider
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.journal import Journal


def conversation_log(settings: Settings, *, on_close: Closer) -> ConversationLog:
    """log.db: every message as said (Add/Search, the chat proxy, imports), read by extraction."""
    from mateclaw_mem.conversations.log import ConversationLog

    log = ConversationLog(settings.log_db)
    on_close(log)
    return log


def aml(settings: Settings, log: ConversationLog, index: MessageIndex, clock: Clock, *, model: ModelProvider,
        ensure_agent: Callable[[str], object], on_close: Closer) -> AmlService:
    """Add/Search over the conversation log and the message index; in model mode with source-bound
    facts beside the raw messages. `ensure_agent` makes the AML agent's folder at the first Add."""
    facts = None
    if settings.model.configured:  # the mode; the client itself is asked for at the first fact job
        from mateclaw_mem.conversations.facts import FactExtractor, FactStore

        store = FactStore(settings.log_db)
        on_close(store)
        facts = FactExtractor(store, log, index, model, clock)
        on_close(facts)
    from mateclaw_mem.conversations.aml import options_from
    from mateclaw_mem.runtime.aml_agent import AmlOnFirstUse

    return AmlOnFirstUse(log, index, clock, facts=facts, ensure=ensure_agent,
                         reranker=reranker(settings, model=model, on_close=on_close), **options_from(settings))


def reranker(settings: Settings, *, model: ModelProvider, on_close: Closer, usage_log: bool = True) -> Any:
    """`aml.rerank` (llm/rerank.py), None while its url is empty. Its calls go to the model's usage log;
    `usage_log=False` (`serve --aml-only` on PostgreSQL: no file on its machine) logs and counts a
    failure in its status only."""
    rerank = settings.aml.rerank
    if not rerank.url:
        return None
    from mateclaw_mem.llm.rerank import Reranker

    client = model()
    usage = client.usage if client is not None else None
    if usage is None and usage_log:  # rules mode: the reranker's calls and failures still go to the usage log
        from mateclaw_mem.llm.usage import UsageLog

        usage = UsageLog(settings.log_db)
        on_close(usage)
    key = os.environ.get(rerank.api_key_env) if rerank.api_key_env else None
    built = Reranker(rerank, usage, api_key=key)
    on_close(built)
    return built


def aml_users(settings: Settings, service: AmlService, clock: Clock, *, file_index: FileIndex,
              journal: Journal) -> AmlUsers:
    """A person's Add/Search data deleted on request or at the end of `aml.retention-days`; each
    delete an operation of the workspace journal (finished by runtime/recovery.py after a crash)."""
    from mateclaw_mem.conversations.aml_users import AmlUsers

    return AmlUsers(service, clock, file_index=file_index, retention_days=settings.aml.retention_days,
                    journal=journal)
