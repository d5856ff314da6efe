"""One model client, built by Services and shared by every step; every call it makes is counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.errors import ConfigError
from mateclaw_mem.memory.extraction.service import ExtractionService
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from mateclaw_mem.workspace.store import PERSON
from tests.support.model_server import ModelServer


def _settings(tmp_path: Path, base_url: str, **model: str):
    return load_settings(None, tmp_path / "ws", overrides={
        "timezone": "Europe/Berlin",
        "model": {"base_url": base_url, "model": "test-model", "timeout_seconds": 2, "max_retries": 0, **model},
    })


def test_every_step_shares_the_one_client_and_search_embeddings_are_counted(
    tmp_path: Path, clock, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.isolation import no_config_here

    no_config_here(monkeypatch, tmp_path)  # from tmp_path, on tmp_path/workspace, no settings file
    svc = Services(_settings(tmp_path, model_server.base_url, embedding_model="embed-a"), clock)
    try:
        client = svc.model
        assert client is not None and client.usage is not None
        assert svc.extraction.model is client
        assert svc.structured_consolidation.client is client
        assert svc.dreaming._model_client() is client
        svc.store.ensure_agent("default")
        svc.store.write("default", "MEMORY.md", "# M\n\n## Boat\n\nthe sailing boat\n", expected_sha=None,
                        actor=PERSON)
        assert svc.search.search("sailing").mode == "hybrid"
        embeds = [r for r in model_server.requests if r.path.endswith("embeddings")]
        assert embeds
        # The search's embedding calls are in the same usage log as every other model call.
        assert client.usage.summary()["by_step"]["search-embed"]["calls"] == len(embeds)
        assert svc.extraction.status()["usage"]["by_step"]["search-embed"]["calls"] == len(embeds)
    finally:
        svc.close()


def test_parts_that_call_the_model_now_and_then_are_built_without_it(
    tmp_path: Path, clock, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model is handed over as a provider (runtime/build/types.ModelProvider): dreaming, SOUL
    proposals and the contradiction judge ask for it at their first model call, not when built."""
    from tests.support.isolation import no_config_here

    no_config_here(monkeypatch, tmp_path)
    svc = Services(_settings(tmp_path, model_server.base_url), clock)
    try:
        assert svc.dreaming.mode == "model" and svc.soul.mode == "model"
        assert svc.contradictions is not None and svc.morning_card is not None
        assert not svc.built("model"), "building a part that calls the model now and then built the client"
        assert svc.dreaming._model_client() is svc.model  # asked for at the first call: the shared one
    finally:
        svc.close()


def test_model_mode_without_the_shared_client_is_a_config_error(
    tmp_path: Path, clock, model_server: ModelServer
) -> None:
    settings = _settings(tmp_path, model_server.base_url)
    svc = Services(settings, clock)
    log = ConversationLog(settings.log_db)
    try:
        # Never a second client built on the side, and never a silent switch to rules.
        with pytest.raises(ConfigError, match="no model client"):
            ExtractionService(settings, svc.store, log, clock=clock, timers=False)
    finally:
        log.close()
        svc.close()
