"""Explicit lifecycles: services are built in one order without starting a thread; background work
starts in `start()` only and stops in `stop()`; `Services` answers "built?" itself."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.runtime.services import BUILD_ORDER, Services, _service
from mateclaw_mem.settings import load_settings


@pytest.fixture
def model_services(tmp_path: Path, model_settings_overrides: dict[str, Any], clock: ManualClock,
                   monkeypatch: pytest.MonkeyPatch):
    """Model mode, so every kind of background work exists (the AML fact worker included)."""
    for key in [k for k in __import__("os").environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key, raising=False)
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    services = Services(load_settings(cfg, tmp_path / "ws", overrides=model_settings_overrides), clock)
    yield services
    services.close()


def _threads() -> dict[int | None, str]:
    return {t.ident: t.name for t in threading.enumerate()}


def test_every_service_is_in_the_build_order_exactly_once() -> None:
    names = [name for name, value in vars(Services).items() if isinstance(value, _service)]
    assert sorted(BUILD_ORDER) == sorted(names)


def test_building_every_service_starts_no_thread_and_start_and_stop_do(model_services: Services) -> None:
    model_services.store.ensure_agent("default")
    before = _threads()
    model_services.build()
    assert all(model_services.built(name) for name in BUILD_ORDER)
    assert model_services.aml.facts is not None  # model mode: the fact worker exists, not running
    assert _threads().keys() <= before.keys(), "building a service started a thread"

    model_services.start()
    started = set(_threads().values()) - set(before.values())
    assert {"aml-facts", "index-watcher"} <= started
    assert model_services.watcher.state == "running" and model_services.scheduler.running

    model_services.stop()
    left = set(_threads().values())
    assert "aml-facts" not in left and "index-watcher" not in left
    assert model_services.watcher.state == "stopped" and not model_services.scheduler.running


def test_built_answers_without_building(services: Services) -> None:
    assert not services.built("file_index") and not services.built("watcher")
    services.store.ensure_agent("default")
    assert services.built("store") and not services.built("file_index")
    assert not (services.settings.state_dir / "index.db").exists()  # nobody opened an index to find out
    with pytest.raises(AttributeError, match="no service named 'fileindex'"):
        services.built("fileindex")  # a typo is an error, not a silent "no"


class _WithExtra(Services):
    @_service
    def extra(self) -> str:
        return "built lazily"


def test_after_build_nothing_is_built_lazily(settings, clock: ManualClock) -> None:
    services = _WithExtra(settings, clock)
    try:
        assert services.extra == "built lazily"  # before build(): a CLI command's first use
        late = _WithExtra(settings, clock)
        try:
            late.build()
            # A service missing from BUILD_ORDER is a loud error once threads may run, never a race.
            with pytest.raises(RuntimeError, match="BUILD_ORDER"):
                _ = late.extra
        finally:
            late.close()
    finally:
        services.close()
