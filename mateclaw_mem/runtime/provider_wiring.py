"""The memory-provider registry from settings: the configured entries of the `mateclaw_mem.providers`
entry-point group (providers/plugins.py), behind the registry's deadlines and breakers."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mateclaw_mem.providers.registry import ProviderRegistry
    from mateclaw_mem.runtime.services import Services


def build_registry(services: Services) -> ProviderRegistry:
    from mateclaw_mem.providers.base import ProviderContext
    from mateclaw_mem.providers.plugins import build_providers
    from mateclaw_mem.providers.registry import ProviderRegistry

    memory = services.settings.mate.memory
    context = ProviderContext(services.settings, services.clock, lambda: services.search,
                              messages=lambda: services.message_index, log=lambda: services.log)
    providers, origins = build_providers(memory.providers, context)
    try:
        registry = ProviderRegistry.from_settings(providers, memory, services.clock, origins=origins)
    except Exception:
        for p in providers:  # a started provider must not outlive a refused configuration
            closer = getattr(p, "close", None)
            if callable(closer):
                closer()
        raise
    services.on_close(registry)
    return registry
