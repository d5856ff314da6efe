"""Providers as plug-ins: `mate.memory.providers` names them, the `mateclaw_mem.providers` entry-point
group supplies them. A real package (tests/support/provider_pkg) is pip-installed into a temp
folder put on sys.path, so nothing in the shared venv changes; its entry point is then found by
importlib.metadata like any installed distribution's."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.errors import ConfigError
from mateclaw_mem.providers.plugins import BUILTINS, GROUP, installed
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.runtime.status import collect
from mateclaw_mem.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tests" / "support" / "provider_pkg"


@pytest.fixture(scope="module")
def echo_installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`pip install` of the fixture package (offline: its backend is stdlib only) into a temp target."""
    root = tmp_path_factory.mktemp("plugin")
    source = root / "provider_pkg"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("__pycache__"))  # builds leave the checkout alone
    target = root / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                           "--disable-pip-version-check", "--quiet", "--target", str(target), str(source)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    yield target
    sys.path.remove(str(target))
    for name in [m for m in sys.modules if m.split(".")[0] == "mateclaw_echo_provider"]:
        del sys.modules[name]
    importlib.invalidate_caches()


def _services(tmp_path: Path, clock: ManualClock, providers: list[Any]) -> Services:
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text(yaml.safe_dump({"mate": {"memory": {
        "provider-prefetch-timeout-ms": 30000, "provider-prefetch-total-budget-ms": 60000,
        "providers": providers}}}), encoding="utf-8")
    services = Services(load_settings(cfg, tmp_path / "workspace"), clock)
    services.store.ensure_agent("default")
    return services


@pytest.fixture
def make(tmp_path: Path, clock: ManualClock) -> Iterator[Any]:
    made: list[Services] = []

    def build(providers: list[Any]) -> Services:
        folder = tmp_path / str(len(made))
        folder.mkdir()
        made.append(svc := _services(folder, clock, providers))
        return svc

    yield build
    for svc in made:
        svc.close()


def test_a_provider_package_registers_through_its_entry_point_and_appears_in_status(echo_installed: Path,
                                                                                    make) -> None:
    found = installed()["echo"]
    assert found.value == "mateclaw_echo_provider:build" and found.origin == "mateclaw-echo-provider 0.1.0"
    svc = make(["search_hits", {"name": "echo", "prefix": "ECHO"}])
    assert svc.providers.names == ["search_hits", "echo"]
    row = collect(svc)["providers"]["providers"]["echo"]
    assert row["from"] == "mateclaw-echo-provider 0.1.0" and row["circuit"] == "closed"
    ctx = svc.context.build("default", owner="user:1", query="green tea")
    assert ctx.prefetch is not None and ctx.prefetch.outcome("echo") == "ok"
    assert "ECHO green tea (agent default, owner user:1)" in str(ctx.messages)
    # It hears recorded turns through the same registry.
    svc.extraction.record_turn("default", "c1", "I like green tea", "Noted.", owner="user:1")
    assert collect(svc)["providers"]["providers"]["echo"]["details"] == {"turns_heard": 1}


def test_an_unknown_provider_stops_the_start_and_names_the_installed_ones(make) -> None:
    svc = make(["search_hits", "memgpt"])
    with pytest.raises(ConfigError) as err:
        svc.providers  # noqa: B018 - building it is the check
    message = str(err.value)
    assert "unknown memory provider 'memgpt'" in message
    assert all(name in message for name in BUILTINS) and GROUP in message


def test_the_builtins_are_entry_points_of_our_own_pyproject() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"][GROUP]
    assert declared == BUILTINS  # the by-name fallback says exactly what pyproject.toml declares
    for name, entry in installed().items():
        if name in BUILTINS:
            # From the installed entry points once scripts/setup.sh ran; by name until then.
            assert entry.origin.startswith(("mateclaw-mem ", "built-in")), entry
            assert callable(entry.load())


def test_the_configured_order_and_options_are_kept(make) -> None:
    svc = make([{"name": "conversation_hits", "limit": 2}, "search_hits"])
    assert svc.providers.names == ["conversation_hits", "search_hits"]
    assert svc.providers._states["conversation_hits"].provider.limit == 2


@pytest.mark.parametrize(("providers", "message"), [
    ([{"limit": 3}], "needs a `name`"),
    ([{"name": "search_hits", "limit": 0}], "search_hits.limit"),
    ([{"name": "search_hits", "top": 3}], "has no setting top"),
    (["search_hits", "search_hits"], "repeated: search_hits"),
])
def test_bad_provider_entries_are_refused_by_name(make, providers: list[Any], message: str) -> None:
    svc = make(providers)
    with pytest.raises(ConfigError, match=message):
        svc.providers  # noqa: B018


def test_no_providers_means_no_prefetch(make) -> None:
    svc = make([])
    ctx = svc.context.build("default", query="tea")
    assert svc.providers.names == [] and (ctx.prefetch is None or ctx.prefetch.calls == [])
