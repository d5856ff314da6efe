"""Mem0's seed keys (issue 38.2): `searchEnabled` / `syncEnabled` switch recall and sync off on their
own, `apiKey` is accepted beside `apiKeyEnv`, errors name a key as it was written, and `status`
refuses the entries `serve` refuses. Against the real loopback Mem0 stand-in (tests/support/mem0_server.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mateclaw_mem.cli.main import main as cli
from mateclaw_mem.clock import ManualClock
from mateclaw_mem.errors import ConfigError
from mateclaw_mem.providers.mem0 import Mem0Provider
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from tests.support.mem0_server import ADD, SEARCH, Mem0Server

OWNER = "user:42"


@pytest.fixture(scope="module")
def server() -> Iterator[Mem0Server]:
    with Mem0Server() as srv:
        yield srv


@pytest.fixture
def mem0(server: Mem0Server) -> Iterator[Mem0Server]:
    server.modes.update({SEARCH: "ok", ADD: "ok"})
    server.memories.clear()
    server.requests.clear()
    server.add_seen.clear()
    yield server


def _config(tmp_path: Path, **entry: Any) -> Path:
    config = {"timezone": "Europe/Berlin", "mate": {"memory": {
        "provider-prefetch-timeout-ms": 30000, "provider-prefetch-total-budget-ms": 60000,
        "providers": ["search_hits", {"name": "mem0", **entry}]}}}
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text(yaml.safe_dump(config), encoding="utf-8")
    return cfg


@pytest.fixture
def make(tmp_path: Path, clock: ManualClock) -> Iterator[Any]:
    made: list[Services] = []

    def build(**entry: Any) -> Services:
        folder = tmp_path / str(len(made))
        folder.mkdir()
        svc = Services(load_settings(_config(folder, **entry), folder / "workspace"), clock)
        svc.store.ensure_agent("default")
        made.append(svc)
        return svc

    yield build
    for svc in made:
        svc.close()


def _mem0(svc: Services) -> Mem0Provider:
    provider = next(s.provider for s in svc.providers._states.values() if s.provider.name == "mem0")
    assert isinstance(provider, Mem0Provider)
    return provider


def test_search_disabled_never_asks_mem0_but_still_syncs(make, mem0: Mem0Server) -> None:
    mem0.remember(OWNER, "default", "takes tea without sugar")
    svc = make(baseUrl=mem0.base_url, searchEnabled=False)
    got = svc.providers.prefetch("default", OWNER, "tea")
    assert got.items.get("mem0", []) == [] and mem0.calls(SEARCH) == []
    svc.extraction.record_turn("default", "c1", "I moved to Lisbon", "Noted.", owner=OWNER)
    assert _mem0(svc).wait_synced(10)
    assert [c["body"]["messages"][0]["content"] for c in mem0.calls(ADD)] == ["I moved to Lisbon"]
    assert _mem0(svc).status()["search_enabled"] is False


def test_sync_disabled_sends_no_turn_but_still_recalls(make, mem0: Mem0Server) -> None:
    mem0.remember(OWNER, "default", "takes tea without sugar")
    svc = make(baseUrl=mem0.base_url, syncEnabled=False)
    svc.extraction.record_turn("default", "c1", "I moved to Lisbon", "Noted.", owner=OWNER)
    assert _mem0(svc).wait_synced(10)
    assert mem0.calls(ADD) == []
    got = svc.providers.prefetch("default", OWNER, "tea")
    assert [i.text for i in got.items["mem0"]] == ["takes tea without sugar"] and len(mem0.calls(SEARCH)) == 1


def test_the_seeds_api_key_is_sent_and_never_shown(make, mem0: Mem0Server) -> None:
    svc = make(baseUrl=mem0.base_url, apiKey="sk-from-the-file")
    svc.providers.prefetch("default", OWNER, "tea")
    (call,) = mem0.calls(SEARCH)
    assert call["headers"]["Authorization"] == "Bearer sk-from-the-file"
    assert _mem0(svc).status()["api_key"] is True and "sk-from-the-file" not in str(svc.providers.status())


@pytest.mark.parametrize(("entry", "message"), [
    ({"search-enabled": "yes"}, "search-enabled: Input should be a valid boolean"),
    ({"syncEnabled": 1}, "syncEnabled: Input should be a valid boolean"),
    ({"maxResult": 3}, "maxResult: Extra inputs are not permitted"),
    ({"timeoutMs": 0}, "timeoutMs: Input should be greater than or equal to 1"),
    ({"apiKey": "sk-1", "api-key-env": "MEM0_KEY"}, "apiKey and api-key-env both name the key"),
    ({"syncEnabled": False, "sync-enabled": True}, "sync-enabled and syncEnabled are the same setting"),
])
def test_errors_name_the_key_as_written(make, mem0: Mem0Server, entry: dict[str, Any], message: str) -> None:
    svc = make(baseUrl=mem0.base_url, **entry)
    with pytest.raises(ConfigError) as caught:
        svc.providers  # noqa: B018 - building it is the check
    assert message in caught.value.message


def test_a_missing_base_url_is_named_as_the_seed_spells_it(make) -> None:
    svc = make(apiKey="sk-1")
    with pytest.raises(ConfigError, match="baseUrl: Field required"):
        svc.providers  # noqa: B018


def test_status_refuses_what_serve_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = tmp_path / "ws"
    good = _config(tmp_path, baseUrl="http://127.0.0.1:9", searchEnabled=False, syncEnabled=True)
    assert cli(["--workspace", str(ws), "--config", str(good), "init", "default"]) == 0
    assert cli(["--workspace", str(ws), "--config", str(good), "status"]) == 0
    capsys.readouterr()
    bad = tmp_path / "bad"
    bad.mkdir()
    assert cli(["--workspace", str(ws), "--config", str(_config(bad, baseUrl="http://127.0.0.1:9", recall=True)),
                "status"]) == 6
    assert "mem0: recall: Extra inputs are not permitted" in capsys.readouterr().err
