"""Builders of the one model client every step shares, and of its start-up probe."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mateclaw_mem.llm.client import ModelClient
    from mateclaw_mem.runtime.build.types import Closer, ModelProvider
    from mateclaw_mem.runtime.model_probe import ModelProbe
    from mateclaw_mem.settings import Settings


def model(settings: Settings, *, on_close: Closer, usage_log: bool = True) -> ModelClient | None:
    """The one model client (and usage log) every step shares: extraction, window summaries,
    dreaming, structured consolidation, AML facts, search embeddings. None in rules mode.
    Nothing else builds one, so every call the daemon makes to the model is in the usage log.
    `usage_log=False` for `serve --aml-only` on PostgreSQL, which keeps no file on its machine: its
    calls and failures are in the log lines and the status only."""
    if not settings.model.configured:
        return None
    from mateclaw_mem.llm.client import ModelClient

    usage = None
    if usage_log:
        from mateclaw_mem.llm.usage import UsageLog

        usage = UsageLog(settings.log_db)
        on_close(usage)
    client = ModelClient.from_settings(settings, usage=usage)
    on_close(client)
    return client


def model_probe(settings: Settings, *, model: ModelProvider, on_close: Closer) -> ModelProbe | None:
    """Whether the model answers (runtime/model_probe.py). Building it calls nothing: the daemon
    starts one probe in the background once its API listens. None in rules mode."""
    client = model()
    if client is None:
        return None
    from mateclaw_mem.runtime.model_probe import ModelProbe

    probe = ModelProbe(settings, client.usage)
    on_close(probe)
    return probe
