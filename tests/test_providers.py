"""Provider prefetch: deadlines, the total budget, circuit breakers, the RECALLED MEMORY block, and
the built-in providers over a real workspace, index and conversation log.

Slow providers block on an Event (released at teardown) rather than sleeping, so "past the timeout"
never depends on how busy the machine is; timeouts are a few hundred ms so fast providers always
make it. Assertions are on outcomes and reports, never on elapsed time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.log import NewMessage
from mateclaw_mem.errors import ConfigError
from mateclaw_mem.memory.context.assembly import ContextService
from mateclaw_mem.memory.context.recall import RECALLED_TITLE, recalled_block
from mateclaw_mem.providers.base import MemoryProvider, ProviderItem
from mateclaw_mem.providers.registry import ProviderRegistry
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.runtime.status import collect
from mateclaw_mem.settings import load_settings

PERSON = "person"


# -- test-local providers (plain classes implementing the MemoryProvider protocol) ---------------


class Fixed:
    """Answers at once with the items it was given."""

    def __init__(self, name: str, *texts: str) -> None:
        self.name = name
        self.items = [ProviderItem(t, f"{name}:{i + 1}", 1.0 / (i + 1)) for i, t in enumerate(texts)]
        self.calls = 0

    def prefetch(self, agent: str, owner: str | None, query: str, *, deadline: float) -> list[ProviderItem]:
        self.calls += 1
        return list(self.items)


class Blocking:
    """Hangs past any deadline a test configures, until the test releases it."""

    def __init__(self, name: str = "slow") -> None:
        self.name = name
        self.release = threading.Event()
        self.returned = threading.Event()  # set once a call has come back
        self.calls = 0

    def prefetch(self, agent: str, owner: str | None, query: str, *, deadline: float) -> list[ProviderItem]:
        self.calls += 1
        self.release.wait(10)
        self.returned.set()
        return [ProviderItem("the slow provider's late answer", "slow:1", 1.0)]


class Flaky:
    """Raises while `fail` is set (tests flip it to make it flap or recover)."""

    def __init__(self, name: str = "flaky", *, fail: bool = True) -> None:
        self.name = name
        self.fail = fail
        self.calls = 0

    def prefetch(self, agent: str, owner: str | None, query: str, *, deadline: float) -> list[ProviderItem]:
        self.calls += 1
        if self.fail:
            raise RuntimeError("backend down")
        return [ProviderItem("flaky is back", "flaky:1", 1.0)]


class WrongType:
    name = "wrong"

    def prefetch(self, agent: str, owner: str | None, query: str, *, deadline: float) -> Any:
        return ["not an item"]


@pytest.fixture
def make_registry(clock: ManualClock) -> Iterator[Any]:
    made: list[tuple[ProviderRegistry, list[MemoryProvider]]] = []

    def make(providers: list[MemoryProvider], **kwargs: Any) -> ProviderRegistry:
        opts = {"timeout_ms": 300, "total_budget_ms": 600, "failure_threshold": 2, "cooldown_seconds": 30}
        registry = ProviderRegistry(providers, clock, **{**opts, **kwargs})
        made.append((registry, providers))
        return registry

    yield make
    for registry, providers in made:
        for p in providers:
            if isinstance(p, Blocking):
                p.release.set()
        assert registry.wait_idle(10)
        registry.close()


def outcomes(prefetch) -> dict[str, str]:
    return {c.provider: c.outcome for c in prefetch.calls}


# -- deadlines and budget ------------------------------------------------------------------------


def test_a_provider_past_its_deadline_is_abandoned_and_the_others_answer(make_registry) -> None:
    fast, slow = Fixed("fast", "tea without sugar"), Blocking()
    registry = make_registry([fast, slow])
    result = registry.prefetch("default", None, "tea")
    assert not slow.returned.is_set()  # the prefetch did not wait for it
    assert outcomes(result) == {"fast": "ok", "slow": "timeout"}
    assert [i.text for i in result.items["fast"]] == ["tea without sugar"] and "slow" not in result.items
    report = result.as_dict()
    assert report["answered"] == ["fast"] and report["timed_out"] == ["slow"]
    assert "timeout" in next(c for c in report["calls"] if c["provider"] == "slow")["error"]
    # The late answer is never used afterwards; once the call ends the provider is called again.
    slow.release.set()
    assert registry.wait_idle(10)
    again = registry.prefetch("default", None, "tea")
    assert outcomes(again) == {"fast": "ok", "slow": "ok"} and slow.calls == 2
    assert [i.text for i in again.items["slow"]] == ["the slow provider's late answer"]


def test_the_total_budget_bounds_the_whole_prefetch(make_registry) -> None:
    # Per-provider timeout far away; the total budget is what cuts the slow call off.
    fast, slow = Fixed("fast", "a"), Blocking()
    result = make_registry([fast, slow], timeout_ms=60_000, total_budget_ms=300).prefetch("default", None, "q")
    assert not slow.returned.is_set()
    assert outcomes(result) == {"fast": "ok", "slow": "timeout"}
    assert "total budget" in next(c.error for c in result.calls if c.provider == "slow")
    # One worker: the second provider is still queued when the budget runs out - not started, not its fault.
    slow2, queued = Blocking(), Fixed("queued", "b")
    registry = make_registry([slow2, queued], timeout_ms=60_000, total_budget_ms=300, max_workers=1)
    result = registry.prefetch("default", None, "q")
    assert outcomes(result) == {"slow": "timeout", "queued": "not_started"}
    assert result.items == {} and queued.calls == 0
    status = registry.status()["providers"]
    assert status["queued"]["consecutive_failures"] == 0 and status["slow"]["consecutive_failures"] == 1


# -- circuit breakers ----------------------------------------------------------------------------


def test_circuit_opens_after_the_threshold_and_closes_after_the_cooldown(make_registry, clock) -> None:
    flaky, fast = Flaky(), Fixed("fast", "still here")
    registry = make_registry([flaky, fast], failure_threshold=2, cooldown_seconds=30)
    first = registry.prefetch("default", None, "q")
    assert outcomes(first)["flaky"] == "error" and "backend down" in first.calls[0].error
    assert registry.status()["providers"]["flaky"]["circuit"] == "closed"
    second = registry.prefetch("default", None, "q")
    assert second.calls[0].circuit == "open"
    for seconds in (0, 29):  # open: skipped without being called, the others unaffected
        clock.advance(seconds=seconds)
        skipped = registry.prefetch("default", None, "q")
        assert outcomes(skipped) == {"flaky": "circuit_open", "fast": "ok"} and flaky.calls == 2
    assert registry.status()["providers"]["flaky"]["retry_at"] is not None
    clock.advance(seconds=1)
    assert registry.status()["providers"]["flaky"]["circuit"] == "half_open"
    flaky.fail = False
    trial = registry.prefetch("default", None, "q")  # the one trial call succeeds: closed again
    assert outcomes(trial)["flaky"] == "ok" and flaky.calls == 3 and trial.items["flaky"]
    status = registry.status()["providers"]["flaky"]
    assert (status["circuit"], status["consecutive_failures"], status["errors"]) == ("closed", 0, 2)


def test_a_failed_trial_opens_the_circuit_for_another_cooldown(make_registry, clock) -> None:
    flaky = Flaky()
    registry = make_registry([flaky], failure_threshold=1, cooldown_seconds=30)
    registry.prefetch("default", None, "q")
    clock.advance(seconds=30)
    assert outcomes(registry.prefetch("default", None, "q")) == {"flaky": "error"} and flaky.calls == 2
    clock.advance(seconds=29)
    assert outcomes(registry.prefetch("default", None, "q")) == {"flaky": "circuit_open"} and flaky.calls == 2
    clock.advance(seconds=1)
    flaky.fail = False
    assert outcomes(registry.prefetch("default", None, "q")) == {"flaky": "ok"} and flaky.calls == 3


def test_a_flapping_provider_never_reaches_the_threshold(make_registry) -> None:
    flaky = Flaky()
    registry = make_registry([flaky], failure_threshold=2)
    seen = []
    for _ in range(6):
        seen.append(outcomes(registry.prefetch("default", None, "q"))["flaky"])
        flaky.fail = not flaky.fail
    assert seen == ["error", "ok"] * 3 and flaky.calls == 6
    assert registry.status()["providers"]["flaky"]["circuit"] == "closed"


def test_timeouts_count_as_failures_and_a_hung_provider_holds_one_thread(make_registry, clock) -> None:
    slow = Blocking()
    registry = make_registry([slow], failure_threshold=2, cooldown_seconds=30)
    assert outcomes(registry.prefetch("default", None, "q")) == {"slow": "timeout"}
    # Its first call still hangs: it is not called again (busy), which is a failure too -> open.
    busy = registry.prefetch("default", None, "q")
    assert outcomes(busy) == {"slow": "busy"} and busy.calls[0].circuit == "open" and slow.calls == 1
    assert outcomes(registry.prefetch("default", None, "q")) == {"slow": "circuit_open"}
    status = registry.status()["providers"]["slow"]
    assert status["timeouts"] == 1 and len(status["recent_timeouts"]) == 1 and status["running_late"] == 1
    slow.release.set()
    assert registry.wait_idle(10)
    clock.advance(seconds=30)
    assert outcomes(registry.prefetch("default", None, "q")) == {"slow": "ok"}
    assert registry.status()["providers"]["slow"]["circuit"] == "closed"


def test_bad_answers_and_duplicate_names_are_named(make_registry, clock) -> None:
    result = make_registry([WrongType()]).prefetch("default", None, "q")
    assert outcomes(result) == {"wrong": "error"} and "not a list of ProviderItem" in result.calls[0].error
    with pytest.raises(ConfigError, match="repeated: fast"):
        ProviderRegistry([Fixed("fast"), Fixed("fast")], clock)


# -- the RECALLED MEMORY block -------------------------------------------------------------------


def test_block_dedupes_interleaves_providers_and_stays_within_budget() -> None:
    a = Fixed("a", *(f"alpha fact number {i} " + "x" * 60 for i in range(6)))
    b = Fixed("b", *(f"beta fact number {i} " + "y" * 60 for i in range(6)))
    block = recalled_block({"a": a.items, "b": b.items}, [], 400)
    assert len(block.text) <= 400 and block.text.startswith(RECALLED_TITLE)
    assert [i.provider for i in block.items] == ["a", "b", "a"]  # round-robin by rank
    assert block.omitted == 9 and "(9 more recalled items not shown: over the 400-char budget)" in block.text
    seen = ["--- MEMORY.md ---\n## Cats\n\n- Luna and **Oliver** are the cats.\n"]
    items = [ProviderItem("…Cats Luna and Oliver are the…", "MEMORY.md:3", 2.0),
             ProviderItem("Rex is the neighbour's dog", "memory/2026-11-29.md:5", 1.0),
             ProviderItem("rex is the neighbour's   dog", "conversations/c1", 0.5)]
    block = recalled_block({"search_hits": items}, seen, 2000)
    assert [i.source for i in block.items] == ["memory/2026-11-29.md:5"] and block.duplicates == 2
    assert "- [memory/2026-11-29.md:5] Rex is the neighbour's dog" in block.text
    assert recalled_block({"a": items[:1]}, seen, 2000).text == ""  # nothing new: no block at all


# -- the prompt, with the real providers ---------------------------------------------------------


def _services(tmp_path: Path, workspace: Path, clock: ManualClock, extra: str = "") -> Services:
    cfg = tmp_path / "mateclaw.yaml"
    # Generous deadlines: these tests are about what gets in, not about timing on a busy machine.
    cfg.write_text("timezone: Europe/Berlin\n" + extra + "mate:\n  memory:\n    provider-prefetch-timeout-ms: 30000\n"
                   "    provider-prefetch-total-budget-ms: 60000\n", encoding="utf-8")
    services = Services(load_settings(cfg, workspace), clock)
    services.store.ensure_agent("default")
    return services


@pytest.fixture
def svc(tmp_path: Path, workspace: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Services]:
    for key in [k for k in __import__("os").environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key, raising=False)
    services = _services(tmp_path, workspace, clock)
    yield services
    services.close()


def _seed(services: Services) -> None:
    services.store.write("default", "MEMORY.md", "# Memory\n\n## Cats\n\nLuna and Oliver are the cats.\n",
                         expected_sha=None, actor=PERSON)
    services.store.write("default", "memory/2026-11-29.md",
                         "# 2026-11-29\n\n## 10:00 Dentist\n\nThe dentist appointment is on Tuesday at 10.\n",
                         expected_sha=None, actor=PERSON)
    services.structured.remember("default", "user", "language", "Prefers German answers.", actor="api")
    services.log.append("default", "c-old", [NewMessage("user", "Book a table at Trattoria Roma for Friday."),
                                             NewMessage("assistant", "Done: Trattoria Roma, Friday at 8.")],
                        now_ms=1_764_400_000_000)


def test_real_providers_recall_notes_and_conversations_after_the_structured_block(svc: Services) -> None:
    _seed(svc)
    ctx = svc.context.build("default", query="When is the dentist, and where is dinner on Friday? Cats?",
                            conversation_id="c-new")
    system = ctx.messages[0]["content"]
    assert system.index("--- STRUCTURED MEMORY ---") < system.index(RECALLED_TITLE)
    recalled = system[system.index(RECALLED_TITLE):]
    assert "[memory/2026-11-29.md:3]" in recalled and "dentist appointment is on Tuesday" in recalled
    # A recalled message says the day it was said and who said it (the role, whatever its text
    # starts with: "Done:" is no speaker).
    assert "- [Sat 29 November 2025] user: Book a table at Trattoria Roma for Friday." in recalled
    assert "- [Sat 29 November 2025] assistant: Done: Trattoria Roma, Friday at 8." in recalled
    # MEMORY.md is always on: its "Cats" section is a hit, but a duplicate, so not recalled again.
    assert "[MEMORY.md" not in recalled and ctx.recalled is not None and ctx.recalled.duplicates >= 1
    data = ctx.as_dict()
    assert data["prefetch"]["answered"] == ["search_hits", "conversation_hits"]
    assert {i["source"] for i in data["recalled"]["items"]} >= {"memory/2026-11-29.md:3", "conversations/c-old"}
    assert len(data["recalled"]["items"]) == len(ctx.recalled.items)


def test_the_dream_diary_is_not_recalled(svc: Services) -> None:
    svc.store.write("default", "DREAMS.md", "# Dreams\n\n## 2026-11-29 03:00 Dreaming\n\nscored: dentist 0.8\n",
                    expected_sha=None, actor="dreaming")
    assert any(h.file == "DREAMS.md" for h in svc.search.search("dentist", record=False).hits)
    ctx = svc.context.build("default", query="dentist")
    assert ctx.prefetch is not None and ctx.prefetch.outcome("search_hits") == "ok"
    assert "[DREAMS.md" not in ctx.system and "scored: dentist" not in ctx.system


def test_with_owner_isolation_one_owner_never_recalls_another_owners_memory(
    tmp_path: Path, workspace: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in __import__("os").environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key, raising=False)
    services = _services(tmp_path, workspace, clock, "owner-isolation: true\n")
    try:
        services.store.write("default", "memory/2026-11-29.md", "# 2026-11-29\n\n## 10:00 Dentist\n\n"
                             "Alice sees the dentist on Tuesday.\n", expected_sha=None, actor=PERSON, owner="alice")
        services.log.append("default", "c-alice", [NewMessage("user", "my dentist is Dr. Weiss")], owner="alice",
                            now_ms=1_764_400_000_000)
        bob = services.context.build("default", owner="bob", query="dentist")
        assert bob.prefetch is not None and RECALLED_TITLE not in str(bob.messages)
        alice = services.context.build("default", owner="alice", query="dentist")
        # Isolation on: the owner's recalled memory is per turn, at the head of the user message (issue 18).
        turn = alice.messages[-1]["content"]
        assert "Alice sees the dentist on Tuesday." in turn and "Dr. Weiss" in turn and "Dr. Weiss" not in alice.system
    finally:
        services.close()


def test_structured_entries_already_in_the_block_are_not_recalled_again(svc: Services) -> None:
    _seed(svc)
    ctx = svc.context.build("default", query="German answers")
    hits = svc.search.search("German answers", record=False).hits
    assert any(h.file == "structured/user.md" for h in hits)  # the provider did see it
    assert ctx.recalled is not None and not any(i.source.startswith("structured/") for i in ctx.recalled.items)


def test_prefetched_search_hits_are_recorded_as_retrievals(svc: Services, clock: ManualClock) -> None:
    _seed(svc)
    start = clock.now()
    svc.context.build("default", query="dentist")
    hits = {h.rel: h for h in svc.search.retrieval_hits("default", since=start)}
    assert hits["memory/2026-11-29.md"].count == 1 and hits["memory/2026-11-29.md"].title == "10:00 Dentist"
    svc.context.build("default", query="dentist")
    assert {h.rel: h.count for h in svc.search.retrieval_hits("default", since=start)}["memory/2026-11-29.md"] == 2


def test_memoryless_and_empty_queries_call_no_provider(svc: Services, make_registry) -> None:
    _seed(svc)
    counting = Fixed("counting", "a fact from a provider")
    context = ContextService(svc.store, svc.structured, svc.context.window, log=svc.log,
                             providers=make_registry([counting]))
    assert context.build("default", query="dentist", memoryless=True).prefetch is None
    svc.log.append("default", "secret", [NewMessage("user", "hello")], memoryless=True, now_ms=1_764_400_000_000)
    flagged = context.build("default", query="dentist", conversation_id="secret")
    assert flagged.memoryless and flagged.prefetch is None and RECALLED_TITLE not in flagged.system
    assert context.build("default", query="  ").prefetch is None and context.build("default").prefetch is None
    assert counting.calls == 0
    ctx = context.build("default", query="dentist")
    assert counting.calls == 1 and "- [counting:1] a fact from a provider" in ctx.system


def test_a_slow_provider_never_holds_up_the_prompt(svc: Services, make_registry) -> None:
    slow, fast = Blocking(), Fixed("fast", "the fast provider's fact")
    context = ContextService(svc.store, svc.structured, svc.context.window, log=svc.log,
                             providers=make_registry([slow, fast]), recall_max_chars=1000)
    ctx = context.build("default", query="anything")
    assert "the fast provider's fact" in ctx.system and "late answer" not in ctx.system
    assert ctx.as_dict()["prefetch"]["timed_out"] == ["slow"]


def test_status_reports_the_providers(svc: Services) -> None:
    _seed(svc)
    svc.context.build("default", query="dentist")
    report = collect(svc)["providers"]
    assert set(report["providers"]) == {"search_hits", "conversation_hits"}
    assert report["providers"]["search_hits"]["circuit"] == "closed"
    assert report["providers"]["search_hits"]["answered"] == 1 and report["timeout_ms"] == 30000


def test_a_ledger_line_gives_its_slot_to_the_dated_message_it_was_copied_from(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The day's ledger ("## 13:15 Said: …") copies the person's sentences from the logged chat: with
    # conversation_hits on, the message itself is recalled (dated, with its speaker) and the copy not;
    # a note the person wrote is recalled as before. Without conversation_hits the ledger is all there is.
    for key in [k for k in __import__("os").environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key, raising=False)
    said = "I ran a charity race for mental health last Saturday."
    for providers, ledger_recalled in (("[search_hits, conversation_hits]", False), ("[search_hits]", True)):
        root = tmp_path / providers.strip("[]").replace(", ", "-")
        (root / "ws").mkdir(parents=True)
        cfg = root / "mateclaw.yaml"
        cfg.write_text("timezone: Europe/Berlin\nmate:\n  memory:\n    provider-prefetch-timeout-ms: 30000\n"
                       f"    provider-prefetch-total-budget-ms: 60000\n    providers: {providers}\n", encoding="utf-8")
        services = Services(load_settings(cfg, root / "ws"), clock)
        try:
            services.store.ensure_agent("default")
            services.store.write("default", "memory/2026-11-29.md",
                                 f"# 2026-11-29\n\n## 13:15 Said: I ran a charity race…\n\n- {said}\n\n"
                                 "## 09:00 Race day\n\nThe charity race starts at the town hall.\n",
                                 expected_sha=None, actor=PERSON)
            services.log.append("default", "c-old", [NewMessage("user", said)], now_ms=1_764_400_000_000)
            ctx = services.context.build("default", query="Where did the charity race start, and why run it?")
            assert ctx.recalled is not None
            sources = [i.source for i in ctx.recalled.items]
            assert "memory/2026-11-29.md:7" in sources  # the person's own note
            assert ("memory/2026-11-29.md:3" in sources) is ledger_recalled, sources
            assert ("conversations/c-old" in sources) is not ledger_recalled, sources
            if not ledger_recalled:
                assert f"- [Sat 29 November 2025] user: {said[:-1]} (22 November 2025)." in ctx.recalled.text
        finally:
            services.close()
