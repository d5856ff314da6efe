"""The seed's configuration reference, key by key (`mate.memory.*`, `mate.agent.conversation.window.*`).

`SEED` below is the table as data: the key in the seed's spelling, the seed's documented default, a
value that changes behaviour, and a probe that runs real services (real files, real SQLite, the
scripted model server) and returns what a person would observe. For every key the test proves: the
seed's spelling is accepted, the default is the documented one (with no file and with the shipped
config/mateclaw.yaml), and the probe observes something different with the other value — so a key
that were accepted and ignored would fail here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.errors import ConfigError, InvalidInputError
from mateclaw_mem.providers.base import ProviderItem
from mateclaw_mem.providers.registry import ProviderRegistry
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from tests.support.model_server import ModelServer

TZ = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 11, 30, 9, 15, tzinfo=TZ)
AGENT = "default"
SHIPPED = Path(__file__).resolve().parents[1] / "config" / "mateclaw.yaml"
LONG = "My name is Alice and I live in Berlin, please keep that in mind."


def _nest(key: str, value: Any) -> dict[str, Any]:
    out: Any = value
    for part in reversed(key.split(".")):
        out = {part: out}
    return out


def _get(settings: Any, key: str) -> Any:
    for part in key.split("."):
        settings = getattr(settings, part.replace("-", "_"))
    return settings


# -- probes: each builds on real services and returns what can be observed ----------------------------

Probe = Callable[[Services], Any]


def _gates(source: str = "chat") -> Probe:
    def probe(svc: Services) -> tuple[bool, str]:
        svc.extraction.record_turn(AGENT, "c1", "hello there, how are you today?", "Fine.", trigger_source=source)
        r = svc.extraction.record_turn(AGENT, "c1", LONG, "Noted.", trigger_source=source)
        return r.scheduled, r.reason
    return probe


def _extraction_request(svc: Services) -> dict[str, Any]:
    """One manual model-mode extraction; the request the model server received."""
    server = _SERVERS[svc.settings.model.base_url]
    server.reply('{"should_update": false, "reason": "nothing new"}')
    svc.extraction.record_turn(AGENT, "c1", LONG, "a" * 3000)
    before = len(server.chat_requests)
    assert svc.extraction.extract_now(AGENT, "c1").outcome == "no_change"
    req = server.chat_requests[before]
    return {"max_tokens": req.body.get("max_tokens"), "prompt": req.prompt_text}


def _answer_budget(svc: Services) -> int:
    return _extraction_request(svc)["max_tokens"]


def _assistant_chars_sent(svc: Services) -> int:
    prompt = _extraction_request(svc)["prompt"]
    line = next(ln for ln in prompt.splitlines() if "assistant]" in ln)
    return line.count("a" * 10) * 10  # the assistant's run of "a"s, to the nearest ten


def _messages_examined(svc: Services) -> int:
    for i in range(4):
        svc.extraction.record_turn(AGENT, "c1", f"turn {i}: {LONG}", "Noted.")
    return svc.extraction.extract_now(AGENT, "c1").new_messages


def _when_after_a_run(svc: Services) -> str | None:
    svc.extraction.record_turn(AGENT, "c1", "hello there, how are you today?", "Fine.")
    svc.extraction.record_turn(AGENT, "c1", LONG, "Noted.")
    svc.extraction.extract_now(AGENT, "c1")
    return svc.extraction.record_turn(AGENT, "c1", "I also work at Acme Corp as an engineer.", "Noted.").when


def _daily(svc: Services, days_ago: int, sections: int = 1) -> None:
    when = NOW - timedelta(days=days_ago)
    for i in range(sections):
        svc.store.append_daily(AGENT, f"Note {days_ago}-{i}", f"- Decided to use Postgres for project {i}.",
                               actor="extraction", when=when.replace(hour=10 + i))


def _dream_sections(days_ago: int, sections: int = 1) -> Probe:
    def probe(svc: Services) -> tuple[str, int]:
        _daily(svc, days_ago, sections)
        out = svc.dreaming.dream(AGENT, preview=True)
        return out.status, out.sections
    return probe


def _dream_enabled(svc: Services) -> str:
    _daily(svc, 1)
    return svc.dreaming.dream(AGENT).reason


def _focused(svc: Services) -> str:
    try:
        return svc.dreaming.dream(AGENT, topic="postgres", preview=True).status
    except InvalidInputError as exc:
        return exc.message


def _rotated(svc: Services) -> list[str]:
    _daily(svc, 40)
    return svc.dreaming.rotate(AGENT)["daily_notes_archived"]


def _entries(n: int) -> Callable[[Services], None]:
    def fill(svc: Services) -> None:
        for i in range(n):
            for type_ in ("user", "feedback"):
                svc.structured.remember(AGENT, type_, f"k{i:02d}", f"entry {i} " + "x" * 60, actor="api")
    return fill


def _block_entries(svc: Services) -> int:
    _entries(12)(svc)
    return sum(svc.structured.always_on_block(AGENT).included.values())


def _scheduled_jobs(svc: Services) -> list[str]:
    return sorted(svc.scheduler.jobs)


def _consolidation_next_hour(svc: Services) -> int:
    nxt = svc.scheduler.next_run("structured_consolidation")
    assert nxt is not None
    return nxt.astimezone(TZ).hour


def _soul_proposed(svc: Services) -> bool:
    _ = svc.soul  # counts the store's writes from now on
    for key in ("tone", "examples"):
        svc.structured.remember(AGENT, "feedback", key, f"Feedback entry {key}.", actor="person")
    return svc.soul.pending(AGENT) is not None


def _facts_seen(svc: Services) -> int:
    _ = svc.file_index, svc.facts  # as in the daemon: the index's ingest feeds the facts
    snap = svc.store.read(AGENT, "MEMORY.md")
    svc.store.write(AGENT, "MEMORY.md", snap.text + "\n## Tools\n- uses Neovim every day\n", expected_sha=snap.sha,
                    actor="person")
    return len(svc.facts.list(AGENT, None, query="neovim"))


def _forget_in_chat(svc: Services) -> int:
    """How many times MEMORY.md still says the claim after "please forget that …" was said in chat."""
    claim = "I take my tea without sugar"
    snap = svc.store.read(AGENT, "MEMORY.md")
    svc.store.write(AGENT, "MEMORY.md", snap.text + f"\n## Notes\n- {claim}\n", expected_sha=snap.sha, actor="person")
    svc.extraction.record_turn(AGENT, "forget-chat", f"Please forget that {claim}.", "OK.")
    svc.extraction.extract_now(AGENT, "forget-chat")
    return svc.store.read(AGENT, "MEMORY.md").body.count(claim)


def _history_after_2_hours(svc: Services) -> int:
    """History copies still holding a forgotten claim two hours after the forget."""
    snap = svc.store.read(AGENT, "MEMORY.md")
    svc.store.write(AGENT, "MEMORY.md", snap.text + "\n- drinks oolong at night\n", expected_sha=snap.sha,
                    actor="person")
    svc.forget.forget(AGENT, None, "drinks oolong at night", actor="person")
    svc.clock.advance(timedelta(hours=2))  # type: ignore[attr-defined]
    svc.forget.purge_due()
    root = svc.store.history_store.root
    return sum("oolong" in p.read_text(encoding="utf-8") for p in root.rglob("*.md") if p.is_file())


def _fact_trust_after_60_days(svc: Services) -> float:
    assert _facts_seen(svc) == 1
    fact = svc.facts.list(AGENT, None, query="neovim")[0]
    svc.clock.advance(timedelta(days=60))  # type: ignore[attr-defined]
    return svc.facts.get(AGENT, None, fact.id).trust


def _contradictions_found(svc: Services) -> int:
    """Pairs found, whatever their status (the model judges this one "no contradiction"); the key off
    checks nothing at all, as in the seed."""
    _ = svc.file_index, svc.contradictions
    for rel, line in (("PROFILE.md", "- timezone: Europe/Berlin"), ("MEMORY.md", "- timezone: Asia/Shanghai")):
        snap = svc.store.read(AGENT, rel)
        svc.store.write(AGENT, rel, snap.text + f"\n## Where\n{line}\n", expected_sha=snap.sha, actor="person")
    server = _SERVERS[svc.settings.model.base_url]
    server.clear()
    server.reply_json({"verdicts": [{"pair": 1, "contradiction": False, "reason": "travel"}]})
    try:
        return len(svc.contradictions.list(AGENT, None, status=None))
    finally:
        server.clear()


def _fact_rebuild_next_minute(svc: Services) -> int:
    nxt = svc.scheduler.next_run("fact_projection")
    assert nxt is not None
    return nxt.astimezone(TZ).minute


def _consolidated(svc: Services) -> list[str]:
    for key in ("pet", "pet-again", "pet-third"):
        svc.structured.remember(AGENT, "user", key, "Has a cat called Miso.", actor="api")
    return [b.status for b in svc.structured_consolidation.run().buckets]


def _owners_consolidated(svc: Services) -> int:
    for owner in ("ann", "bob"):
        for key in ("pet", "pet-again"):
            svc.structured.remember(AGENT, "user", key, "Has a cat called Miso.", actor="api", owner=owner)
    return len({b.owner for b in svc.structured_consolidation.run().buckets})


def _ceiling(rel: str) -> Probe:
    def probe(svc: Services) -> int:
        snap = svc.store.read(AGENT, rel)
        sections = "".join(f"\n## Topic {i}\n" + f"- fact {i} " + "y" * 200 + "\n" for i in range(30))
        svc.store.write(AGENT, rel, snap.text.rstrip() + "\n" + sections, expected_sha=snap.sha, actor="extraction")
        return len(svc.store.read(AGENT, rel).body)
    return probe


def _isolated(svc: Services) -> tuple[bool, bool]:
    svc.store.ensure_agent(AGENT, owner="ann")
    svc.store.append_daily(AGENT, "Ann's note", "- Ann likes tea.", actor="extraction", owner="ann")
    return svc.store.owner_isolation, "owners" in svc.store.path(AGENT, "MEMORY.md", owner="ann").parts


class _Slow:
    name = "slow"

    def prefetch(self, agent: str, owner: str | None, query: str, *, deadline: float) -> list[ProviderItem]:
        threading.Event().wait(0.3)
        return [ProviderItem("the slow answer", "slow:1", 1.0)]


class _Failing:
    name = "failing"

    def prefetch(self, agent: str, owner: str | None, query: str, *, deadline: float) -> list[ProviderItem]:
        raise RuntimeError("down")


def _registry(svc: Services, provider: Any) -> ProviderRegistry:
    registry = ProviderRegistry.from_settings([provider], svc.settings.mate.memory, svc.clock)
    svc.on_close(registry)
    return registry


def _slow_answer(svc: Services) -> tuple[str | None, int]:
    registry = _registry(svc, _Slow())
    result = registry.prefetch(AGENT, None, "anything")
    registry.wait_idle(5)
    return result.outcome("slow"), len(result.items.get("slow", []))


def _circuit_after(calls: int, advance_s: float = 0) -> Probe:
    def probe(svc: Services) -> str | None:
        registry = _registry(svc, _Failing())
        for _ in range(calls):
            registry.prefetch(AGENT, None, "anything")
        svc.clock.advance(seconds=advance_s)  # type: ignore[attr-defined]
        return registry.prefetch(AGENT, None, "anything").outcome("failing")
    return probe


def _recalled(svc: Services) -> bool:
    _daily(svc, 1)
    ctx = svc.context.build(AGENT, query="Which database did we pick, Postgres?")
    return ctx.recalled is not None and "Postgres" in (ctx.recalled.text or "")


def _history(pairs: int, size: int = 400) -> list[dict[str, str]]:
    out = []
    for i in range(pairs):
        out.append({"role": "user", "content": f"question {i}: " + "q" * size})
        out.append({"role": "assistant", "content": f"answer {i}: " + "a" * size})
    return out


def _window(pairs: int, budget: int | None, size: int = 400) -> Callable[[Services], Any]:
    def build(svc: Services) -> Any:
        return svc.context.build(AGENT, history=_history(pairs, size), current="and now?", budget=budget).window
    return build


def _stage(pairs: int, budget: int | None, size: int = 400) -> Probe:
    return lambda svc: _window(pairs, budget, size)(svc).stage


def _tail(pairs: int, budget: int, size: int = 400) -> Probe:
    def probe(svc: Services) -> int:
        w = _window(pairs, budget, size)(svc)
        assert w.stage == 1
        # minus the system prompt and the current message (the summary shares the tail's first message)
        return len(w.messages) - 2
    return probe


def _summary_chars(svc: Services) -> int:
    w = _window(30, 6000)(svc)
    assert w.stage == 1 and w.summary
    return len(w.summary)


# -- the table -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    key: str  # full path in the seed's spelling
    default: Any  # the seed's documented default (None: not written -- see the row's note)
    other: Any  # a value that changes behaviour
    probe: Probe
    model: bool = False  # the probe needs the scripted model server
    extra: dict[str, Any] | None = None  # other keys both runs share, so the difference is this key's
    expect: tuple[Any, Any] | None = None  # what the probe must see with (default, other), where it is exact


M, W = "mate.memory.", "mate.agent.conversation.window."
SEED: list[Key] = [
    # post-chat extraction
    Key(M + "auto-summarize-enabled", True, False, _gates()),
    Key(M + "min-messages-for-summarize", 4, 6, _gates()),
    Key(M + "min-user-message-length", 10, 100, _gates()),
    Key(M + "skip-cron-conversations", True, False, _gates("cron")),
    Key(M + "summary-max-tokens", 1000, 321, _answer_budget, model=True, expect=(1000, 321)),
    Key(M + "max-transcript-messages", 30, 3, _messages_examined),
    Key(M + "cooldown-minutes", 5, 0, _when_after_a_run),
    # ours, in the seed's style: the transcript's per-message cut (the seed's fixed 2,000)
    Key(M + "transcript-message-max-chars", 2000, 100, _assistant_chars_sent, model=True, expect=(2000, 100)),
    # dreaming
    Key(M + "emergence-enabled", True, False, _dream_enabled),
    Key(M + "emergence-day-range", 7, 2, _dream_sections(5)),
    # the seed's name for owner isolation: not written = off (see README, Configuration)
    Key(M + "lifecycle-mediator-enabled", None, True, _isolated),
    Key(M + "dream.focused-enabled", True, False, _focused),
    Key(M + "dream.archive-enabled", True, False, _rotated),
    Key(M + "dream.archive-keep-days", 30, 60, _rotated),
    Key(M + "dream.max-candidates-per-dream", 100, 1, _dream_sections(1, sections=3)),
    # facts and trust
    Key(M + "fact.projection-enabled", False, True, _facts_seen, expect=(0, 1)),
    Key(M + "soul-update-interval", 0, 2, _soul_proposed, expect=(False, True)),
    Key(M + "fact.projection-rebuild-cron", "0 */30 * * * ?", "0 15 * * * ?", _fact_rebuild_next_minute,
        extra={M + "fact.projection-enabled": True}),
    Key(M + "fact.trust-half-life-days", 60, 30, _fact_trust_after_60_days, extra={M + "fact.projection-enabled": True},
        expect=(0.25, 0.125)),
    Key(M + "fact.forget-enabled", False, True, _forget_in_chat, expect=(1, 0)),
    # ours, in the seed's style: how long a forget stays undoable before its history copies go
    Key(M + "fact.forget-undo-hours", 24, 1, _history_after_2_hours, extra={M + "fact.forget-enabled": True},
        expect=(1, 0)),
    Key(M + "fact.contradiction-check-enabled", False, True, _contradictions_found, model=True,
        extra={M + "fact.projection-enabled": True}, expect=(0, 1)),
    # always-on size bounds
    Key(M + "system-block-max-chars", 4000, 500, _block_entries, extra={M + "system-block-max-entries-per-type": 0}),
    Key(M + "system-block-max-entries-per-type", 40, 2, _block_entries),
    Key(M + "structured-consolidation-enabled", True, False, _scheduled_jobs),
    Key(M + "structured-consolidation-min-entries", 8, 2, _consolidated),
    Key(M + "structured-consolidation-cron", "0 30 3 * * ?", "0 0 5 * * ?", _consolidation_next_hour),
    Key(M + "structured-consolidation-max-owners-per-run", 50, 1, _owners_consolidated,
        extra={"owner-isolation": True, M + "structured-consolidation-min-entries": 2}),
    Key(M + "profile-max-chars", 4000, 1000, _ceiling("PROFILE.md")),
    Key(M + "memory-md-max-chars", 8000, 1000, _ceiling("MEMORY.md")),
    # memory providers in the prompt
    Key(M + "provider-prefetch-timeout-ms", 1500, 50, _slow_answer),
    Key(M + "provider-prefetch-total-budget-ms", 2500, 50, _slow_answer),
    Key(M + "provider-circuit-failure-threshold", 3, 1, _circuit_after(1)),
    Key(M + "provider-circuit-cooldown-seconds", 30, 0, _circuit_after(1, advance_s=1),
        extra={M + "provider-circuit-failure-threshold": 1}),
    Key(M + "provider-prefetch-max-chars", 7000, 0, _recalled),
    # the context window
    Key(W + "default-max-input-tokens", 128000, 4000, _stage(12, None)),
    Key(W + "compact-trigger-ratio", 0.75, 0.4, _stage(12, 6000)),
    Key(W + "preserve-recent-pairs", 2, 8, _tail(30, 6000), expect=(10, 16)),
    Key(W + "summary-max-tokens", 300, 40, _summary_chars),
    Key(W + "protect-last-min-messages", 10, 20, _tail(30, 6000), expect=(10, 20)),
]


# -- fixtures --------------------------------------------------------------------------------------------


# The lifecycle features the product ships on (issue 38.6); the built-in defaults stay the seed's.
SHIPPED_ON: dict[str, Any] = {M + "fact.projection-enabled": True, M + "fact.contradiction-check-enabled": True,
                              M + "fact.forget-enabled": True, M + "dream.morning-card-pointer": True,
                              M + "soul-update-interval": 20}

_SERVERS: dict[str, ModelServer] = {}  # base URL -> the scripted server, for the probes


@pytest.fixture(scope="module")
def server() -> Iterator[ModelServer]:
    with ModelServer() as s:
        _SERVERS[s.base_url] = s
        yield s
        del _SERVERS[s.base_url]


def _config(values: dict[str, Any], server: ModelServer | None) -> dict[str, Any]:
    data: dict[str, Any] = {"timezone": "Europe/Berlin"}
    if server is not None:
        data["model"] = {"base-url": server.base_url, "model": "test-model", "timeout-seconds": 5, "max-retries": 0}
    for key, value in values.items():
        data = _merge(data, _nest(key, value))
    return data


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _services(root: Path, values: dict[str, Any], server: ModelServer | None = None) -> Services:
    root.mkdir(parents=True)
    cfg = root / "mateclaw.yaml"
    cfg.write_text(yaml.safe_dump(_config(values, server)), encoding="utf-8")
    svc = Services(load_settings(cfg, root / "ws"), ManualClock(NOW))
    svc.store.ensure_agent(AGENT)
    return svc


# -- the tests -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", SEED, ids=[r.key for r in SEED])
def test_every_seed_key_is_accepted_documented_and_effective(row: Key, tmp_path: Path, server: ModelServer) -> None:
    no_file = tmp_path / "empty.yaml"
    no_file.write_text("", encoding="utf-8")
    assert _get(load_settings(no_file, tmp_path / "ws0"), row.key) == row.default
    assert _get(load_settings(SHIPPED, tmp_path / "ws0"), row.key) == SHIPPED_ON.get(row.key, row.default)
    seen = {}
    for name, value in (("default", row.default), ("other", row.other)):
        values = dict(row.extra or {})
        if value is not None:
            values[row.key] = value  # written in the seed's kebab-case spelling
        svc = _services(tmp_path / name, values, server if row.model else None)
        try:
            assert _get(svc.settings, row.key) == value
            seen[name] = row.probe(svc)
        finally:
            svc.close()
    assert seen["default"] != seen["other"], f"{row.key}: {row.other!r} changed nothing ({seen['default']!r})"
    if row.expect is not None:
        assert (seen["default"], seen["other"]) == row.expect


def test_the_shipped_config_lists_every_seed_key_it_supports() -> None:
    text = SHIPPED.read_text(encoding="utf-8")
    for row in SEED:
        leaf = row.key.rsplit(".", 1)[-1]
        assert f"{leaf}:" in text, f"{row.key} is not documented in config/mateclaw.yaml"
    data = yaml.safe_load(text)
    assert "lifecycle-mediator-enabled" not in data["mate"]["memory"] and data["owner-isolation"] is False


def test_the_fact_cron_default_is_the_seeds(tmp_path: Path) -> None:
    assert load_settings(None, tmp_path / "ws").mate.memory.fact.projection_rebuild_cron == "0 */30 * * * ?"


# -- owner isolation: two names, one switch ----------------------------------------------------------------


@pytest.mark.parametrize(("written", "expected"), [
    ({}, False),  # the single-user desktop default
    ({"owner-isolation": True}, True),
    ({"mate": {"memory": {"lifecycle-mediator-enabled": True}}}, True),
    ({"mate": {"memory": {"lifecycle-mediator-enabled": False}}}, False),
    ({"owner-isolation": True, "mate": {"memory": {"lifecycle-mediator-enabled": True}}}, True),
    ({"owner-isolation": False, "mate": {"memory": {"lifecycle-mediator-enabled": False}}}, False),
])
def test_owner_isolation_and_its_seed_name_set_one_switch(tmp_path: Path, written: dict, expected: bool) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(written), encoding="utf-8")
    settings = load_settings(cfg, tmp_path / "ws")
    assert settings.owner_isolation is expected
    svc = Services(settings, ManualClock(NOW))
    try:
        assert svc.store.owner_isolation is expected
    finally:
        svc.close()


def test_owner_isolation_and_its_seed_name_disagreeing_is_a_config_error(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"owner-isolation": False, "mate": {"memory": {"lifecycle-mediator-enabled": True}}}))
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, tmp_path / "ws")
    assert "owner-isolation" in err.value.message and "lifecycle-mediator-enabled" in err.value.message
    assert "disagree" in err.value.message
    # The environment is a writer too: it disagrees with the file just the same.
    cfg.write_text(yaml.safe_dump({"mate": {"memory": {"lifecycle-mediator-enabled": True}}}))
    monkeypatch.setenv("MATECLAW_OWNER_ISOLATION", "false")
    with pytest.raises(ConfigError):
        load_settings(cfg, tmp_path / "ws")


# -- extraction and window as the seed describes them ------------------------------------------------------


def test_daily_entry_in_the_seeds_plain_string_shape_is_written_without_a_repair(tmp_path: Path,
                                                                                  server: ModelServer) -> None:
    svc = _services(tmp_path / "s", {}, server)
    try:
        server.reply('{"should_update": true, "reason": "a decision", '
                     '"daily_entry": "- Decided to move the blog to Hugo next month\\n- Alice hosts it", '
                     '"memory_update": "", "profile_update": ""}')
        svc.extraction.record_turn(AGENT, "c1", LONG, "Noted.")
        before = len(server.chat_requests)
        out = svc.extraction.extract_now(AGENT, "c1")
        assert out.outcome == "updated" and len(server.chat_requests) == before + 1  # no repair round trip
        note = svc.store.read(AGENT, svc.store.daily_rel()).body
        assert "Decided to move the blog to" in note.split("\n## ", 1)[1].splitlines()[0]  # the title
        assert "- Alice hosts it" in note
    finally:
        svc.close()


def test_both_roles_are_cut_at_the_same_length(tmp_path: Path, server: ModelServer) -> None:
    svc = _services(tmp_path / "s", {}, server)
    try:
        server.reply('{"should_update": false, "reason": "nothing new"}')
        svc.extraction.record_turn(AGENT, "c1", "I " + "x" * 2500, "z" * 2500)
        svc.extraction.extract_now(AGENT, "c1")
        prompt = server.chat_requests[-1].prompt_text
        user = next(ln for ln in prompt.splitlines() if " user] " in ln)
        assistant = next(ln for ln in prompt.splitlines() if " assistant] " in ln)
        assert user.count("x") == 2000 - len("I ") and assistant.count("z") == 2000
    finally:
        svc.close()


# -- search: the seed ranks core files above the daily ledger ----------------------------------------------


def test_core_files_rank_above_the_daily_ledger_by_default(tmp_path: Path) -> None:
    svc = _services(tmp_path / "s", {})
    try:
        for rel, head in (("PROFILE.md", "# Profile"), ("MEMORY.md", "# Memory"), ("AGENTS.md", "# Agents"),
                          ("memory/2026-10-01.md", "# 2026-10-01")):
            svc.store.write(AGENT, rel, f"{head}\n\n## Note\n\nAlways answer in haiku.\n", expected_sha=None,
                            actor="person")
        ranked = [h.file for h in svc.search.search("haiku", agent=AGENT).hits]
        assert set(ranked[:2]) == {"PROFILE.md", "MEMORY.md"} and ranked[2:] == ["AGENTS.md", "memory/2026-10-01.md"]
    finally:
        svc.close()
