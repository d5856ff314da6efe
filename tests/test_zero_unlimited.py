"""`0` means unlimited wherever the seed documents it so — proven key by key against a small finite
value of the same key, so each test fails if 0 were read as "off" or as "zero"."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import yaml

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.providers.base import ProviderItem
from mateclaw_mem.providers.registry import ProviderRegistry
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings


def _services(tmp_path: Path, clock: ManualClock, memory: dict, **top) -> Services:
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"timezone": "Europe/Berlin", **top, "mate": {"memory": memory}}))
    services = Services(load_settings(cfg, tmp_path / "ws"), clock)
    services.store.ensure_agent("default")  # as the daemon's first start does
    return services


def _remember(svc: Services, n: int, *, owner: str | None = None, text_len: int = 20) -> None:
    for i in range(n):
        for type_ in ("user", "feedback"):
            svc.structured.remember("default", type_, f"k{i:03d}", f"entry {i} " + "x" * text_len, actor="api",
                                    owner=owner)


@pytest.mark.parametrize(("key", "finite", "other"), [
    ("system-block-max-chars", 600, "system-block-max-entries-per-type"),
    ("system-block-max-entries-per-type", 5, "system-block-max-chars"),
])
def test_a_zero_block_limit_keeps_every_entry_in_the_prompt(tmp_path, clock, key, finite, other) -> None:
    shown = {}
    for value in (finite, 0):
        # The other limit unlimited in both runs, so the difference is this key's alone.
        svc = _services(tmp_path / str(value), clock, {key: value, other: 0})
        try:
            _remember(svc, 45, text_len=100)  # 90 entries, ~10k chars: over both defaults too
            block = svc.structured.always_on_block("default")
            shown[value] = sum(block.included.values())
            if value == 0:
                assert block.omitted == {"user": 0, "feedback": 0}
                assert "entry 44 " in block.text and "not shown" not in block.text
        finally:
            svc.close()
    assert shown[finite] < 90 and shown[0] == 90


class _Slow:
    """A provider that answers after a pause longer than the finite limits below."""

    name = "slow"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def prefetch(self, agent: str, owner: str | None, query: str, *, deadline: float) -> list[ProviderItem]:
        threading.Event().wait(self.seconds)
        return [ProviderItem("the slow answer", "slow:1", 1.0)]


@pytest.mark.parametrize("key", ["provider-prefetch-timeout-ms", "provider-prefetch-total-budget-ms"])
def test_a_zero_prefetch_limit_waits_for_the_answer(tmp_path, clock, key) -> None:
    outcome = {}
    for value in (50, 0):
        settings = load_settings(None, tmp_path / "ws")
        memory = settings.mate.memory.model_copy(update={key.replace("-", "_"): value})
        registry = ProviderRegistry.from_settings([_Slow(0.3)], memory, clock)
        try:
            result = registry.prefetch("default", None, "anything")
            outcome[value] = (result.calls[0].outcome, [i.text for i in result.items.get("slow", [])])
        finally:
            registry.wait_idle(5)
            registry.close()
    assert outcome[50][1] == [] and outcome[50][0] != outcome[0][0]
    assert outcome[0][1] == ["the slow answer"]


def test_zero_owners_per_run_consolidates_every_due_owner(tmp_path, clock) -> None:
    owners = ["ann", "bob", "cy"]
    handled = {}
    for value in (1, 0):
        svc = _services(tmp_path / str(value), clock, {"structured-consolidation-max-owners-per-run": value,
                                                       "structured-consolidation-min-entries": 2},
                        **{"owner-isolation": True})
        try:
            for owner in owners:
                svc.structured.remember("default", "user", "pet", "Has a cat called Miso.", actor="api", owner=owner)
                svc.structured.remember("default", "user", "pet-again", "Has a cat called Miso!", actor="api",
                                        owner=owner)
            handled[value] = sorted({b.owner for b in svc.structured_consolidation.run().buckets})
        finally:
            svc.close()
    assert handled[1] == ["ann"] and handled[0] == owners


@pytest.mark.parametrize("key", ["provider-prefetch-timeout-ms", "provider-prefetch-total-budget-ms",
                                 "structured-consolidation-max-owners-per-run", "system-block-max-chars",
                                 "system-block-max-entries-per-type", "profile-max-chars", "memory-md-max-chars"])
def test_zero_is_accepted_at_start_up(tmp_path, key) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"mate": {"memory": {key: 0}}}))
    assert getattr(load_settings(cfg, tmp_path / "ws").mate.memory, key.replace("-", "_")) == 0
