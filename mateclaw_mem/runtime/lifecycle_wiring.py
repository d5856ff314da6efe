"""How `Services` builds the memory lifecycle: facts, the contradiction inbox, forget, SOUL
proposals and the morning card (kept out of services.py so the composition root stays a list of
one-liners, and so a CLI command that needs none of them imports none of them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mateclaw_mem.memory.contradictions.service import ContradictionService
    from mateclaw_mem.memory.dreaming.card import MorningCard
    from mateclaw_mem.memory.dreaming.service import DreamingService
    from mateclaw_mem.memory.facts.service import FactService
    from mateclaw_mem.memory.forget.service import ForgetService
    from mateclaw_mem.memory.soul.service import SoulService
    from mateclaw_mem.runtime.services import Services


def build_facts(services: Services) -> FactService:
    """Facts projected from PROFILE.md, MEMORY.md and structured/ (`fact.projection-enabled`),
    kept fresh by the search index's ingest (hand edits included)."""
    from mateclaw_mem.memory.facts.service import FactService

    facts = FactService(services.settings, services.store, services.clock)
    services.on_close(facts)
    if facts.enabled:
        services.file_index.subscribe(lambda r: facts.refresh(r.agent, r.owner, r.rel))
    return facts


def build_contradictions(services: Services) -> ContradictionService:
    """The inbox (memory/contradictions/), detected after every projection."""
    from mateclaw_mem.memory.contradictions.service import attach

    return attach(services)


def build_forget(services: Services) -> ForgetService:
    """Forget everywhere, tombstoned (memory/forget/, `fact.forget-enabled`), through the registry of
    every store that can hold a person's words (runtime/holders.py)."""
    from mateclaw_mem.runtime.holders import build_forget

    return build_forget(services)


def build_soul(services: Services) -> SoulService:
    """SOUL.md proposals every `soul-update-interval` memory writes (memory/soul/)."""
    from mateclaw_mem.memory.soul.service import SoulService

    svc = SoulService(services.settings, services.store, services.clock, facts=lambda: services.facts,
                      model_factory=lambda: services.model)
    services.store.subscribe(svc.on_write)
    services.on_close(svc)
    return svc


def build_morning_card(services: Services) -> MorningCard:
    from mateclaw_mem.memory.dreaming.card import MorningCard

    return MorningCard(services.dreaming.runs, services.clock, facts=lambda: services.facts,
                       soul=lambda: services.soul, forget=lambda: services.forget)


def build_dreaming(services: Services) -> DreamingService:
    """Nightly/manual consolidation of daily notes into MEMORY.md (memory/dreaming/service.py)."""
    from mateclaw_mem.memory.dreaming.service import DreamingService
    from mateclaw_mem.runtime.scheduler import cron_trigger, next_fire_after

    trigger = cron_trigger(services.settings.dreaming.cron, services.clock.tz)
    svc = DreamingService(
        services.settings, services.store, clock=services.clock,
        model_factory=lambda: services.model,
        # Evidence from real searches (log.db `retrievals`): searches people and tools run, and
        # the prompt's search-hits prefetch (keyed on the person's message); never from the
        # always-on files being injected.
        retrieval_hits=lambda agent, owner, since: services.search.retrieval_hits(agent, owner=owner, since=since),
        next_run=lambda: next_fire_after(trigger, services.clock.now()), forget=services.forget,
    )
    svc.contradictions = lambda a, o: services.contradictions.list(a, o)  # type: ignore[attr-defined]
    services.on_close(svc)
    return svc
