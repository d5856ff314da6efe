"""How `Services` builds the memory lifecycle: facts, the contradiction inbox, SOUL proposals,
dreaming and the morning card (kept out of services.py so the composition root stays a list of
one-liners, and so a CLI command that needs none of them imports none of them).

Each builder takes what it uses, not the container: a part built later or only on first use (the
model, search, the facts a SOUL proposal reads) is handed over as a getter, so building one part
builds nothing else before it is needed. Forget is built by runtime/holders.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.index.files.index import FileIndex
    from mateclaw_mem.index.search import SearchService
    from mateclaw_mem.memory.contradictions.service import ContradictionService
    from mateclaw_mem.memory.dreaming.card import MorningCard
    from mateclaw_mem.memory.dreaming.runs import DreamRunLog
    from mateclaw_mem.memory.dreaming.service import DreamingService
    from mateclaw_mem.memory.facts.service import FactService
    from mateclaw_mem.memory.forget.service import ForgetService
    from mateclaw_mem.memory.soul.service import SoulService
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.store import WorkspaceStore

Closer = Callable[[Any], None]  # Services.on_close: closed with the daemon, newest first


def build_facts(settings: Settings, store: WorkspaceStore, clock: Clock, *, file_index: Callable[[], FileIndex],
                on_close: Closer) -> FactService:
    """Facts projected from PROFILE.md, MEMORY.md and structured/ (`fact.projection-enabled`),
    kept fresh by the search index's ingest (hand edits included)."""
    from mateclaw_mem.memory.facts.service import FactService

    facts = FactService(settings, store, clock)
    on_close(facts)
    if facts.enabled:
        file_index().subscribe(lambda r: facts.refresh(r.agent, r.owner, r.rel))
    return facts


def build_contradictions(settings: Settings, facts: FactService, store: WorkspaceStore, clock: Clock, *,
                         model: Callable[[], Any], forget: Callable[[], ForgetService | None],
                         on_close: Closer) -> ContradictionService:
    """The inbox (memory/contradictions/), detected after every projection. The model and the forget
    service are looked up per call, so neither is built before it is needed."""
    from mateclaw_mem.memory.contradictions.service import ContradictionService

    inbox = ContradictionService(settings, facts, store, clock, model=model, forget=forget)
    on_close(inbox)
    if facts.enabled and inbox.enabled:
        facts.add_listener(inbox.on_projection)
    return inbox


def build_soul(settings: Settings, store: WorkspaceStore, clock: Clock, *, facts: Callable[[], FactService],
               model: Callable[[], Any], on_close: Closer) -> SoulService:
    """SOUL.md proposals every `soul-update-interval` memory writes (memory/soul/)."""
    from mateclaw_mem.memory.soul.service import SoulService

    svc = SoulService(settings, store, clock, facts=facts, model_factory=model)
    store.subscribe(svc.on_write)
    on_close(svc)
    return svc


def build_morning_card(runs: DreamRunLog, clock: Clock, *, facts: Callable[[], FactService],
                       soul: Callable[[], SoulService], forget: Callable[[], ForgetService]) -> MorningCard:
    from mateclaw_mem.memory.dreaming.card import MorningCard

    return MorningCard(runs, clock, facts=facts, soul=soul, forget=forget)


def build_dreaming(settings: Settings, store: WorkspaceStore, clock: Clock, *, model: Callable[[], Any],
                   search: Callable[[], SearchService], forget: ForgetService,
                   contradictions: Callable[[], ContradictionService], on_close: Closer) -> DreamingService:
    """Nightly/manual consolidation of daily notes into MEMORY.md (memory/dreaming/service.py)."""
    from mateclaw_mem.cron import cron_trigger, next_fire_after
    from mateclaw_mem.memory.dreaming.service import DreamingService

    trigger = cron_trigger(settings.dreaming.cron, clock.tz)
    svc = DreamingService(
        settings, store, clock=clock,
        model_factory=model,
        # Evidence from real searches (log.db `retrievals`): searches people and tools run, and
        # the prompt's search-hits prefetch (keyed on the person's message); never from the
        # always-on files being injected.
        retrieval_hits=lambda agent, owner, since: search().retrieval_hits(agent, owner=owner, since=since),
        next_run=lambda: next_fire_after(trigger, clock.now()), forget=forget,
    )
    svc.contradictions = lambda a, o: contradictions().list(a, o)  # type: ignore[attr-defined]
    on_close(svc)
    return svc
