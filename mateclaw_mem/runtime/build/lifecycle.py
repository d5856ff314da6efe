"""Builders of the memory lifecycle: facts, the contradiction inbox, forget, SOUL proposals,
dreaming, the morning card, extraction and structured consolidation.

A part built later or only on first use (the model, search, the facts a SOUL proposal reads) is
handed over as a getter, so building one part builds nothing else before it is needed. Who hears
whose writes (the store's, the file index's, the projection's) is runtime/events.py's table."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.conversations.imports.service import ChatImport
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.files.index import FileIndex
    from mateclaw_mem.index.messages.index import MessageIndex
    from mateclaw_mem.index.search import SearchService
    from mateclaw_mem.memory.contradictions.service import ContradictionService
    from mateclaw_mem.memory.dreaming.card import MorningCard
    from mateclaw_mem.memory.dreaming.runs import DreamRunLog
    from mateclaw_mem.memory.dreaming.service import DreamingService
    from mateclaw_mem.memory.extraction.service import ExtractionService
    from mateclaw_mem.memory.facts.service import FactService
    from mateclaw_mem.memory.forget.service import ForgetService
    from mateclaw_mem.memory.soul.service import SoulService
    from mateclaw_mem.memory.structured.consolidation import StructuredConsolidation
    from mateclaw_mem.providers.registry import ProviderRegistry
    from mateclaw_mem.runtime.build.types import Closer, ModelProvider
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.store import WorkspaceStore


def facts(settings: Settings, store: WorkspaceStore, clock: Clock, *, on_close: Closer) -> FactService:
    """Facts projected from PROFILE.md, MEMORY.md and structured/ (`fact.projection-enabled`),
    kept fresh by the file index's ingest (hand edits included: runtime/events.py)."""
    from mateclaw_mem.memory.facts.service import FactService

    built = FactService(settings, store, clock)
    on_close(built)
    return built


def contradictions(settings: Settings, facts: FactService, store: WorkspaceStore, clock: Clock, *,
                   model: ModelProvider, forget: Callable[[], ForgetService], on_close: Closer) -> ContradictionService:
    """The inbox (memory/contradictions/), detected after every projection. The model and the forget
    service are looked up per call, so neither is built before it is needed."""
    from mateclaw_mem.memory.contradictions.service import ContradictionService

    inbox = ContradictionService(settings, facts, store, clock, model=model, forget=forget)
    on_close(inbox)
    return inbox


def forget(settings: Settings, store: WorkspaceStore, log: ConversationLog, clock: Clock, *, file_index: FileIndex,
           message_index: MessageIndex, facts: FactService, providers: Callable[[], ProviderRegistry],
           on_close: Closer) -> ForgetService:
    """The forget service with runtime/holders.py's registry of every store that holds a person's
    words (`fact.forget-enabled` gates its use)."""
    from mateclaw_mem.memory.forget.service import ForgetService
    from mateclaw_mem.runtime.holders import holders

    svc = ForgetService(settings, store, log, clock,
                        holders=lambda forget: holders(settings.state_dir, forget, facts_on=lambda: facts.enabled,
                                                       providers=providers),
                        file_index=file_index, message_index=message_index, facts=facts)
    on_close(svc)
    return svc


def soul(settings: Settings, store: WorkspaceStore, clock: Clock, *, facts: Callable[[], FactService],
         model: ModelProvider, on_close: Closer) -> SoulService:
    """SOUL.md proposals every `soul-update-interval` memory writes (memory/soul/)."""
    from mateclaw_mem.memory.soul.service import SoulService

    svc = SoulService(settings, store, clock, facts=facts, model=model)
    on_close(svc)
    return svc


def dreaming(settings: Settings, store: WorkspaceStore, clock: Clock, *, model: ModelProvider,
             search: Callable[[], SearchService], forget: ForgetService,
             contradictions: Callable[[], ContradictionService], on_close: Closer) -> DreamingService:
    """Nightly/manual consolidation of daily notes into MEMORY.md (memory/dreaming/service.py)."""
    from mateclaw_mem.cron import cron_trigger, next_fire_after
    from mateclaw_mem.memory.dreaming.service import DreamingService

    trigger = cron_trigger(settings.dreaming.cron, clock.tz)
    svc = DreamingService(
        settings, store, clock=clock, model=model,
        # Evidence from real searches (log.db `retrievals`): searches people and tools run, and
        # the prompt's search-hits prefetch (keyed on the person's message); never from the
        # always-on files being injected.
        retrieval_hits=lambda agent, owner, since: search().retrieval_hits(agent, owner=owner, since=since),
        next_run=lambda: next_fire_after(trigger, clock.now()), forget=forget,
        contradictions=lambda agent, owner: contradictions().list(agent, owner),
    )
    on_close(svc)
    return svc


def morning_card(runs: DreamRunLog, clock: Clock, *, facts: Callable[[], FactService],
                 soul: Callable[[], SoulService], forget: Callable[[], ForgetService]) -> MorningCard:
    from mateclaw_mem.memory.dreaming.card import MorningCard

    return MorningCard(runs, clock, facts=facts, soul=soul, forget=forget)


def extraction(settings: Settings, store: WorkspaceStore, log: ConversationLog, clock: Clock, *,
               model: ModelProvider, remember: Callable[..., Any], forget: ForgetService,
               on_turn: Callable[..., None], sources: Callable[..., Any], on_close: Closer) -> ExtractionService:
    """Post-chat extraction. Building it starts nothing: `Services.start()` starts its workers and
    timers (and so resumes persisted pending work) once everything a run writes through exists.
    Its mode is fixed when built, so it asks for the model then."""
    from mateclaw_mem.memory.extraction.service import ExtractionService

    svc = ExtractionService(settings, store, log, clock=clock, model=model, remember=remember, forget=forget,
                            on_turn=on_turn, sources=sources)
    on_close(svc)
    return svc


def chat_import(settings: Settings, log: ConversationLog, clock: Clock, *, mode: str, store: WorkspaceStore,
                extraction: ExtractionService, dreaming: DreamingService, on_close: Closer) -> ChatImport:
    """Chat-history imports (conversations/imports/): its ledger's connection closes with the daemon."""
    from mateclaw_mem.conversations.imports.ledger import ImportLedger
    from mateclaw_mem.conversations.imports.service import ChatImport

    ledger = ImportLedger(settings.log_db)
    on_close(ledger)
    return ChatImport(log, ledger, clock, mem=settings.mate.memory, mode=mode, store=store, extraction=extraction,
                      dreaming=dreaming)


def structured_consolidation(settings: Settings, store: WorkspaceStore, clock: Clock, *, model: ModelProvider,
                             on_close: Closer) -> StructuredConsolidation:
    from mateclaw_mem.memory.structured.consolidation import StructuredConsolidation

    memory = settings.mate.memory
    svc = StructuredConsolidation(store, clock, state_db=settings.state_db,
                                  min_entries=memory.structured_consolidation_min_entries,
                                  max_owners_per_run=memory.structured_consolidation_max_owners_per_run,
                                  model=model)
    on_close(svc)
    return svc
