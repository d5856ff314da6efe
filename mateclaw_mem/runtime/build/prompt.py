"""Builders of what goes into a prompt and learns from a turn: structured entries, the context
service (window defense, recall), harness lineage and learning memory, and the chat proxy."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.memory.context.assembly import ContextService
    from mateclaw_mem.memory.extraction.service import ExtractionService
    from mateclaw_mem.memory.facts.service import FactService
    from mateclaw_mem.memory.learning.lineage import HarnessLineage
    from mateclaw_mem.memory.learning.service import LearningService
    from mateclaw_mem.memory.proxy.service import ChatProxy
    from mateclaw_mem.memory.structured.entries import StructuredMemory
    from mateclaw_mem.providers.registry import ProviderRegistry
    from mateclaw_mem.runtime.build.types import Closer, ModelProvider
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.store import WorkspaceStore


def structured(settings: Settings, store: WorkspaceStore, clock: Clock) -> StructuredMemory:
    from mateclaw_mem.memory.structured.entries import StructuredMemory

    memory = settings.mate.memory
    # Relevance of project/reference entries: in-process token overlap over exactly those entries
    # (~1 ms). `memory.structured.search_relevance(lambda: search)` plugs in the search index
    # instead; see scripts/bench/context_build.py for what each costs per prompt.
    return StructuredMemory(store, clock, max_chars=memory.system_block_max_chars,
                            max_entries_per_type=memory.system_block_max_entries_per_type)


def context(settings: Settings, store: WorkspaceStore, clock: Clock, *, structured: StructuredMemory,
            log: ConversationLog, providers: ProviderRegistry, facts: FactService, model: ModelProvider,
            card_pointer: Callable[[str, str | None], Any], on_close: Closer) -> ContextService:
    """`card_pointer` (the morning card's line) is asked only with `dream.morning-card-pointer` on."""
    from mateclaw_mem.memory.context.assembly import ContextService
    from mateclaw_mem.memory.context.turns import TurnLog
    from mateclaw_mem.memory.context.window import Summarizer, WindowDefense

    memory = settings.mate.memory
    window = settings.mate.agent.conversation.window
    summarizer = Summarizer(clock, model=model, max_tokens=window.summary_max_tokens)
    on_close(summarizer)  # its background worker: a model call still running must not outlive us
    on_close(turns := TurnLog(settings.log_db, clock))  # what each build injected
    return ContextService(store, structured, WindowDefense(window, summarizer), log=log, providers=providers,
                          facts=facts, turns=turns, recall_max_chars=memory.provider_prefetch_max_chars,
                          prompt_file_max_chars=memory.prompt_file_max_chars,
                          card_pointer=card_pointer if memory.dream.morning_card_pointer else None)


def lineage(settings: Settings, store: WorkspaceStore, clock: Clock, *, on_close: Closer) -> HarnessLineage:
    """Harness lineage: versions of the system prompt, from machine writes and hand edits alike
    (runtime/events.py: the store's writes and the watcher's changes)."""
    from mateclaw_mem.memory.learning.lineage import HarnessLineage

    built = HarnessLineage(store, settings.state_db, clock)
    on_close(built)
    return built


def learning(settings: Settings, store: WorkspaceStore, clock: Clock, *, lineage: HarnessLineage,
             on_close: Closer) -> LearningService:
    from mateclaw_mem.memory.learning.service import LearningService
    from mateclaw_mem.memory.learning.task_runs import TaskRunLog

    service = LearningService(store, TaskRunLog(settings.log_db), clock, lineage=lineage)
    on_close(service)
    return service


def chat_proxy(settings: Settings, log: ConversationLog, *, context: Callable[[], ContextService],
               extraction: Callable[[], ExtractionService], tools: Callable[[], tuple[Any, Any, Any]],
               add_status: Callable[[str, Any], None]) -> ChatProxy | None:
    """Memory in front of the user's own model (`proxy.upstream`); None while that is not set.
    `tools`: (remember, search, forget), built only with `proxy.tools` on."""
    upstream = settings.proxy.upstream
    if not upstream.base_url:
        return None
    from mateclaw_mem.llm.upstream import Upstream
    from mateclaw_mem.memory.proxy.service import ChatProxy

    runner = None
    if settings.proxy.tools:
        from mateclaw_mem.memory.proxy.tools import ToolRunner

        runner = ToolRunner(*tools())
    proxy = ChatProxy(context(), extraction(), log, default_model=upstream.model, tools=runner,
                      max_tool_rounds=settings.proxy.max_tool_rounds, upstream=Upstream(upstream))
    add_status("chat_proxy", lambda: {"upstream": upstream.base_url, **proxy.stats.as_dict()})
    return proxy
