"""The Mem0 provider against a real loopback server speaking Mem0's two endpoints (tests/support/
mem0_server.py): recall shapes and the `[Mem0 Recall]` items, the sync queue, no owner -> no calls,
a hanging server cut off by the registry's deadline inside prompt assembly, a 500ing one isolated by
the breaker and one that recovers after the cooldown on the registry's own (manual) clock.

Hanging requests block on an Event released at teardown; assertions are on outcomes, the registry's
report and counters, never on elapsed time."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from mateclaw_mem.api.health import health
from mateclaw_mem.clock import ManualClock
from mateclaw_mem.errors import ConfigError
from mateclaw_mem.providers.mem0 import SOURCE, Mem0Provider
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.runtime.status import collect
from mateclaw_mem.settings import load_settings
from tests.support.mem0_server import ADD, SEARCH, Mem0Server

OWNER = "user:42"
KEY_ENV = "MEM0_TEST_API_KEY"  # not MATECLAW_*: that prefix is the settings' own


@pytest.fixture(scope="module")
def server() -> Iterator[Mem0Server]:
    with Mem0Server() as srv:
        yield srv


@pytest.fixture
def mem0(server: Mem0Server) -> Iterator[Mem0Server]:
    """The shared server, reset for one test."""
    server.modes.update({SEARCH: "ok", ADD: "ok"})
    server.memories.clear()
    server.requests.clear()
    server.add_seen.clear()
    server.hold()
    yield server
    server.release()


def _services(tmp_path: Path, clock: ManualClock, base_url: str, *, memory: dict[str, Any] | None = None,
              **mem0: Any) -> Services:
    entry = {"name": "mem0", "baseUrl": base_url, "apiKeyEnv": KEY_ENV, **mem0}
    config = {"timezone": "Europe/Berlin", "mate": {"memory": {
        "provider-prefetch-timeout-ms": 30000, "provider-prefetch-total-budget-ms": 60000,
        "providers": ["search_hits", "conversation_hits", entry], **(memory or {})}}}
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text(yaml.safe_dump(config), encoding="utf-8")
    services = Services(load_settings(cfg, tmp_path / "workspace"), clock)
    services.store.ensure_agent("default")
    return services


@pytest.fixture
def make(tmp_path: Path, clock: ManualClock, mem0: Mem0Server,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv(KEY_ENV, "sk-test-123")
    made: list[Services] = []

    def build(**kwargs: Any) -> Services:
        svc = _services(tmp_path / str(len(made)), clock, mem0.base_url, **kwargs)
        made.append(svc)
        return svc

    yield build
    mem0.release()
    for svc in made:
        if svc.built("providers"):
            assert svc.providers.wait_idle(10)
        svc.close()


def _mem0(svc: Services) -> Mem0Provider:
    provider = next(p for p in (s.provider for s in svc.providers._states.values()) if p.name == "mem0")
    assert isinstance(provider, Mem0Provider)
    return provider


def _call(prefetch: Any, name: str = "mem0") -> Any:
    return next(c for c in prefetch.calls if c.provider == name)


# -- recall ----------------------------------------------------------------------------------------


def test_recall_searches_with_the_owner_and_agent_and_returns_at_most_max_results(make, mem0: Mem0Server) -> None:
    mem0.remember(OWNER, "default", *[f"tea note {i}: takes tea without sugar" for i in range(7)])
    mem0.remember("user:7", "default", "tea for someone else")
    svc = make()
    assert _mem0(svc).system_prompt_block("default", OWNER) == ""  # the seed's systemPromptBlock
    ctx = svc.context.build("default", owner=OWNER, query="tea")
    assert ctx.prefetch is not None and ctx.prefetch.outcome("mem0") == "ok"
    (call,) = mem0.calls(SEARCH)
    assert call["body"] == {"query": "tea", "user_id": OWNER, "agent_id": "default", "top_k": 5}
    assert call["headers"]["Authorization"] == "Bearer sk-test-123"
    recalled = [i for i in ctx.recalled.items if i.provider == "mem0"]
    assert len(recalled) == 5 and {i.source for i in recalled} == {SOURCE}
    assert "- [Mem0 Recall] tea note 0: takes tea without sugar" in ctx.system + "".join(
        str(m.get("content")) for m in ctx.messages)
    assert "someone else" not in str(ctx.messages)


def test_the_open_source_servers_results_object_is_read_too(tmp_path: Path, clock: ManualClock) -> None:
    with Mem0Server(oss=True) as oss:
        oss.remember(OWNER, "default", *[f"likes green tea (note {i})" for i in range(7)])
        svc = _services(tmp_path, clock, oss.base_url)
        try:
            got = svc.providers.prefetch("default", OWNER, "tea")
            # That server ignores top_k: the provider keeps maxResults itself.
            assert [i.text for i in got.items["mem0"]] == [f"likes green tea (note {i})" for i in range(5)]
        finally:
            svc.close()


def test_no_owner_means_no_request_at_all(make, mem0: Mem0Server) -> None:
    svc = make()
    got = svc.providers.prefetch("default", None, "tea")
    assert got.outcome("mem0") == "ok" and got.items["mem0"] == []
    svc.extraction.record_turn("default", "c1", "I take my tea without sugar", "Noted.", owner=None)
    assert _mem0(svc).wait_synced(10)
    assert mem0.requests == []
    assert _mem0(svc).status()["skipped_no_owner"] == 2


# -- sync ------------------------------------------------------------------------------------------


def test_a_recorded_turn_is_pushed_with_its_user_and_assistant_messages(make, mem0: Mem0Server) -> None:
    svc = make()
    svc.extraction.record_turn("default", "c1", "I take my tea without sugar", "Noted: no sugar.", owner=OWNER)
    assert _mem0(svc).wait_synced(10)
    (call,) = mem0.calls(ADD)
    assert call["body"] == {"messages": [{"role": "user", "content": "I take my tea without sugar"},
                                         {"role": "assistant", "content": "Noted: no sugar."}],
                            "user_id": OWNER, "agent_id": "default"}
    assert call["headers"]["Authorization"] == "Bearer sk-test-123"
    assert _mem0(svc).status()["synced"] == 1
    # What was synced comes back on the next turn's recall.
    assert [i.text for i in svc.providers.prefetch("default", OWNER, "tea").items["mem0"]] == [
        "I take my tea without sugar"]


def test_a_memoryless_turn_is_not_synced(make, mem0: Mem0Server) -> None:
    svc = make()
    svc.extraction.record_turn("default", "c1", "a secret plan", "ok", owner=OWNER, memoryless=True)
    assert _mem0(svc).wait_synced(10) and mem0.calls(ADD) == []


def test_a_full_sync_queue_drops_the_turn_with_a_warning_and_a_counter(make, mem0: Mem0Server,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    mem0.modes[ADD] = "hang"
    svc = make(syncQueueCapacity=2)
    provider = _mem0(svc)
    provider.sync_turn("default", OWNER, [("user", "turn 1")])
    assert mem0.add_seen.wait(10)  # the worker holds turn 1 (the server hangs): the queue is empty again
    provider.sync_turn("default", OWNER, [("user", "turn 2")])
    provider.sync_turn("default", OWNER, [("user", "turn 3")])
    with caplog.at_level(logging.WARNING, logger="mateclaw_mem.providers.mem0"):
        svc.extraction.record_turn("default", "c1", "turn 4 from the chat", "ok", owner=OWNER)  # never blocks
    assert provider.status()["dropped"] == 1 and provider.status()["sync_queue"] == 2
    assert "sync queue full" in caplog.text
    mem0.modes[ADD] = "ok"
    mem0.release()
    assert provider.wait_synced(10)
    details = svc.providers.status()["providers"]["mem0"]["details"]
    assert details["dropped"] == 1 and details["synced"] + details["sync_failed"] == 3
    assert [c["body"]["messages"][0]["content"] for c in mem0.calls(ADD)] == ["turn 1", "turn 2", "turn 3"]


def test_sync_failures_are_logged_only_and_never_trip_the_breaker(make, mem0: Mem0Server,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    mem0.modes[ADD] = "500"
    svc = make(memory={"provider-circuit-failure-threshold": 1})
    with caplog.at_level(logging.WARNING, logger="mateclaw_mem.providers.mem0"):
        for i in range(3):
            svc.extraction.record_turn("default", f"c{i}", "I take my tea without sugar", "ok", owner=OWNER)
        assert _mem0(svc).wait_synced(10)
    assert _mem0(svc).status()["sync_failed"] == 3 and "HTTP 500" in caplog.text
    assert svc.providers.status()["providers"]["mem0"]["circuit"] == "closed"
    assert svc.providers.prefetch("default", OWNER, "tea").outcome("mem0") == "ok"


# -- deadline, breaker, recovery ---------------------------------------------------------------------


def test_a_hanging_mem0_is_cut_off_by_the_total_budget_and_the_prompt_still_comes(make, mem0: Mem0Server) -> None:
    mem0.modes[SEARCH] = "hang"
    svc = make(memory={"provider-prefetch-total-budget-ms": 400})
    svc.store.write("default", "MEMORY.md", "# Memory\n\n## Tea\n\nTakes tea without sugar.\n",
                    expected_sha=None, actor="person")
    ctx = svc.context.build("default", owner=OWNER, query="tea")
    assert ctx.prefetch is not None
    call = _call(ctx.prefetch)
    assert call.outcome == "timeout" and "total budget" in (call.error or "")
    assert call.ms is not None and call.ms <= ctx.prefetch.budget_ms == 400  # its deadline, from the report
    assert ctx.prefetch.outcome("search_hits") == "ok" and "mem0" not in ctx.prefetch.items
    assert ctx.prefetch.as_dict()["timed_out"] == ["mem0"]
    assert mem0.calls(SEARCH)  # it did ask: the deadline, not a skip, cut it off


def test_a_500ing_mem0_opens_its_breaker_and_recovers_after_the_cooldown(make, mem0: Mem0Server,
                                                                         clock: ManualClock) -> None:
    mem0.modes[SEARCH] = "500"
    mem0.remember(OWNER, "default", "likes green tea")
    svc = make(memory={"provider-circuit-failure-threshold": 2, "provider-circuit-cooldown-seconds": 30})
    outcomes = [svc.providers.prefetch("default", OWNER, "tea").outcome("mem0") for _ in range(3)]
    assert outcomes == ["error", "error", "circuit_open"]
    assert len(mem0.calls(SEARCH)) == 2  # the open breaker spared the server the third call
    report = svc.providers.status()["providers"]["mem0"]
    assert report["circuit"] == "open" and report["failures"] == 2 and "HTTP 500" in report["last_error"]
    # The other providers answered throughout.
    assert svc.providers.prefetch("default", OWNER, "tea").outcome("search_hits") == "ok"
    mem0.modes[SEARCH] = "ok"
    assert svc.providers.prefetch("default", OWNER, "tea").outcome("mem0") == "circuit_open"  # still cooling
    clock.advance(timedelta(seconds=31))  # the registry's clock
    got = svc.providers.prefetch("default", OWNER, "tea")
    assert got.outcome("mem0") == "ok" and [i.text for i in got.items["mem0"]] == ["likes green tea"]
    report = svc.providers.status()["providers"]["mem0"]
    assert report["circuit"] == "closed" and report["consecutive_failures"] == 0
    assert report["latency_ms"]["last"] is not None


def test_status_and_health_show_each_providers_latency_failures_and_breaker(make, mem0: Mem0Server) -> None:
    mem0.modes[SEARCH] = "500"
    svc = make()
    svc.providers.prefetch("default", OWNER, "tea")
    shown = collect(svc)["providers"]
    assert set(shown["providers"]) == {"search_hits", "conversation_hits", "mem0"}
    for name, row in shown["providers"].items():
        assert {"circuit", "failures", "latency_ms", "from"} <= set(row), name
    assert shown["providers"]["mem0"]["failures"] == 1 and shown["providers"]["search_hits"]["failures"] == 0
    assert shown["providers"]["mem0"]["details"]["api_key"] is True  # whether one is set, never the key
    assert "sk-test-123" not in str(shown)
    live = health(svc)["providers"]["providers"]
    assert live["mem0"]["failures"] == 1 and live["mem0"]["circuit"] == "closed"


# -- settings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("entry", "message"), [
    ({"apiKey": "sk-in-clear"}, "apiKey and apiKeyEnv both name the key"),  # _services writes apiKeyEnv
    ({"baseUrl": None}, "baseUrl"),
    ({"maxResult": 3}, "maxResult"),
    ({"timeoutMs": 0}, "timeoutMs"),
])
def test_bad_mem0_settings_stop_the_start_with_a_named_key(tmp_path: Path, clock: ManualClock,
                                                            entry: dict[str, Any], message: str) -> None:
    svc = _services(tmp_path, clock, "http://127.0.0.1:9", **entry)
    try:
        with pytest.raises(ConfigError, match=message):
            svc.providers  # noqa: B018 - building it is the check
    finally:
        svc.close()


def test_mem0_is_off_by_default(tmp_path: Path, clock: ManualClock) -> None:
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("", encoding="utf-8")
    svc = Services(load_settings(cfg, tmp_path / "workspace"), clock)
    try:
        assert svc.providers.names == ["search_hits", "conversation_hits"]
    finally:
        svc.close()


# -- hostile answers: a byte cap and one deadline for the whole call ------------------------------


@pytest.mark.parametrize("mode", ["huge", "huge-declared"])
def test_an_80_mb_answer_is_refused_at_the_byte_cap_not_read_whole(make, mem0: Mem0Server, mode: str) -> None:
    mem0.modes[SEARCH] = mode
    svc = make(maxAnswerBytes=200_000)
    got = svc.providers.prefetch("default", OWNER, "tea")
    assert got.outcome("mem0") == "error" and "mem0" not in got.items
    assert "200,000-byte cap" in (_call(got).error or "")
    assert got.outcome("search_hits") == "ok"  # the others answered
    assert svc.providers.wait_idle(10)
    # The reader stopped at the cap: the server never got to push its 80 MB into the socket.
    assert mem0.sent.get(SEARCH, 0) < mem0.huge_bytes


@pytest.mark.parametrize("mode", ["drip", "drip-head"])
def test_a_dripping_mem0_is_cut_at_its_deadline_and_frees_its_thread(make, mem0: Mem0Server, mode: str) -> None:
    """One byte every 50 ms never trips a socket timeout; `timeoutMs` bounds the whole call, so
    the provider's thread is free again while the server would still be dripping (it drips until
    released at teardown, minutes for this answer)."""
    mem0.modes[SEARCH] = mode
    svc = make(timeoutMs=600)
    svc.store.write("default", "MEMORY.md", "# Memory\n\n## Tea\n\nTakes tea without sugar.\n",
                    expected_sha=None, actor="person")
    ctx = svc.context.build("default", owner=OWNER, query="tea")
    assert ctx.prefetch is not None and ctx.prefetch.outcome("search_hits") == "ok"
    assert "Takes tea without sugar" in ctx.system  # the prompt came
    assert svc.providers.wait_idle(10)  # the call ended: no thread pinned by the drip
    report = svc.providers.status()["providers"]["mem0"]
    assert "deadline" in (report["last_error"] or ""), report
    assert mem0.sent.get(SEARCH, 0) > 0  # it was dripping when it was cut
