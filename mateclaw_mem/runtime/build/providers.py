"""Builder of the memory-provider registry from settings: the configured entries of the
`mateclaw_mem.providers` entry-point group (providers/plugins.py), behind the registry's deadlines
and breakers."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.messages.index import MessageIndex
    from mateclaw_mem.index.search import SearchService
    from mateclaw_mem.providers.registry import ProviderRegistry
    from mateclaw_mem.runtime.build.types import Closer
    from mateclaw_mem.settings import Settings


def registry(settings: Settings, clock: Clock, *, search: Callable[[], SearchService],
             messages: Callable[[], MessageIndex], log: Callable[[], ConversationLog],
             on_close: Closer) -> ProviderRegistry:
    """`search`, `messages` and `log` are called on a provider's first use, not here: building the
    registry opens no database (a CLI command that never prefetches never opens them)."""
    from mateclaw_mem.providers.base import ProviderContext
    from mateclaw_mem.providers.plugins import build_providers
    from mateclaw_mem.providers.registry import ProviderRegistry

    memory = settings.mate.memory
    context = ProviderContext(settings, clock, search, messages=messages, log=log)
    providers, origins = build_providers(memory.providers, context)
    try:
        built = ProviderRegistry.from_settings(providers, memory, clock, origins=origins)
    except Exception:
        for p in providers:  # a started provider must not outlive a refused configuration
            closer = getattr(p, "close", None)
            if callable(closer):
                closer()
        raise
    on_close(built)
    return built
