"""Facts recalled into the prompt and every turn bookkept (issue 17, points 2 and 9): the FACTS block
carries exactly what recall returned, each of those uses is counted once and carries the turn id,
and the turn record names the files, entries and facts by id and hash -- for its own owner only."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from mateclaw_mem.memory.context.assembly import FACTS_SHARE, FACTS_TITLE
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings

AGENT = "default"
FACTS_ONLY = "---\nenabled: false\n---\n"  # projected into facts, never injected whole (see below)
MEMORY = ("## Preferences\n- prefers dark mode in the editor\n- drinks green tea every morning\n\n"
          "## Work\n- works on Project Atlas with the platform team\n")
PROFILE = "## About\n- lives in Lisbon near the river\n"


def _services(tmp_path: Path, clock, extra: str = "") -> Services:
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\nmate:\n  memory:\n    lifecycle-mediator-enabled: true\n"
                   "    fact:\n      projection-enabled: true\n" + extra, encoding="utf-8")
    services = Services(load_settings(cfg, tmp_path / "workspace"), clock)
    services.store.ensure_agent(AGENT)
    _ = services.file_index, services.facts  # as in the daemon: the index's ingest feeds the facts
    return services


def write(services: Services, rel: str, body: str, owner: str | None = None) -> None:
    snap = services.store.read(AGENT, rel, owner=owner)
    services.store.write(AGENT, rel, body, expected_sha=snap.sha, actor="person", owner=owner)


@pytest.fixture
def svc(tmp_path: Path, clock) -> Iterator[Services]:
    services = _services(tmp_path, clock)
    # The MEMORY.md files stay out of the prompt, so their lines reach it only as FACTS: a fact the
    # prompt already carries whole is never said twice (test_a_fact_the_prompt_carries_is_not_restated).
    for owner, body in (("alice", MEMORY), ("bob", "## Music\n- bob likes opera nights at the Staatsoper\n")):
        services.store.ensure_agent(AGENT, owner)
        write(services, "MEMORY.md", FACTS_ONLY + body, owner=owner)
    write(services, "PROFILE.md", PROFILE, owner="alice")
    services.structured.remember(AGENT, "user", "editor", "Uses neovim with a dark theme.", actor="person",
                                 owner="alice")
    yield services
    services.close()


def system_of(ctx) -> str:
    """What the prompt carries of memory: the system message and, isolation on (as here), the per-turn
    block where the seed puts the turn's facts (issue 18)."""
    return ctx.messages[0]["content"] + (f"\n\n{ctx.turn_block.text}" if ctx.turn_block else "")


def facts_block(system: str) -> list[str]:
    if FACTS_TITLE not in system:
        return []
    lines = system.split(FACTS_TITLE + "\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [line.removeprefix("- ") for line in lines]


def test_the_facts_block_carries_exactly_what_recall_counted(svc: Services) -> None:
    ctx = svc.context.build(AGENT, owner="alice", query="which editor mode do I like, dark or light?")
    injected = facts_block(system_of(ctx))
    assert "prefers dark mode in the editor" in injected
    assert injected == [f.text for f in ctx.facts]  # the block is the recall, item for item
    for fact in svc.facts.list(AGENT, "alice"):
        history = svc.facts.history(AGENT, "alice", fact.id)
        uses = [h for h in history if h["kind"] == "use"]
        if fact.text in injected:
            assert fact.uses == 1 and [u["note"] for u in uses] == [ctx.turn]  # the use carries the turn
        else:
            assert fact.uses == 0 and uses == []  # not injected: not used
    assert "works on Project Atlas with the platform team" not in injected  # not relevant to the query


def test_most_trusted_first_and_within_a_third_of_the_prefetch_budget(tmp_path: Path, clock) -> None:
    services = _services(tmp_path, clock, "    provider-prefetch-max-chars: 300\n")
    try:
        bullets = "".join(f"- the tea shop number {i} sells green tea and oolong tea\n" for i in range(12))
        write(services, "MEMORY.md", FACTS_ONLY + "## Tea\n" + bullets)
        liked = next(f for f in services.facts.list(AGENT, None) if "number 7 " in f.text)
        services.facts.feedback(AGENT, None, liked.id, "helpful")
        ctx = services.context.build(AGENT, query="where can I buy green tea")
        system = system_of(ctx)
        block = system[system.index(FACTS_TITLE):].split("\n\n", 1)[0]
        assert len(block) <= 300 // FACTS_SHARE
        assert ctx.facts and ctx.facts[0].id == liked.id  # the helpful one leads
        assert len(ctx.facts) < 12  # the budget really bounded it
        counted = sum(f.uses for f in services.facts.list(AGENT, None))
        assert counted == len(ctx.facts) == len(facts_block(system))
    finally:
        services.close()


def test_no_facts_block_without_a_query_memoryless_or_with_projection_off(svc: Services, tmp_path: Path,
                                                                          clock) -> None:
    assert svc.context.build(AGENT, owner="alice").facts == []
    memoryless = svc.context.build(AGENT, owner="alice", query="dark mode editor", memoryless=True)
    assert memoryless.facts == [] and FACTS_TITLE not in system_of(memoryless)
    assert sum(f.uses for f in svc.facts.list(AGENT, "alice")) == 0
    cfg = tmp_path / "off.yaml"
    cfg.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    off = Services(load_settings(cfg, tmp_path / "ws-off"), clock)
    try:
        off.store.ensure_agent(AGENT)
        _ = off.file_index
        write(off, "MEMORY.md", MEMORY)
        ctx = off.context.build(AGENT, query="dark mode editor")
        assert ctx.facts == [] and FACTS_TITLE not in system_of(ctx) and ctx.turn  # still bookkept
    finally:
        off.close()


def test_the_turn_record_names_files_entries_and_facts_by_id_and_hash(svc: Services) -> None:
    ctx = svc.context.build(AGENT, owner="alice", query="dark mode in the editor", conversation_id="c-1")
    assert ctx.as_dict()["turn"] == ctx.turn and ctx.turn.startswith("turn-")
    turn = svc.context.turns.get(AGENT, "alice", ctx.turn)
    assert turn is not None and turn.owner == "alice" and turn.conversation_id == "c-1"
    files = {f["file"]: f for f in turn.files}
    assert files["PROFILE.md"]["sha"] == svc.store.read(AGENT, "PROFILE.md", owner="alice").sha
    assert files["PROFILE.md"]["personal"] is True and files["AGENTS.md"]["personal"] is False
    assert {"type": "user", "key": "editor", "block": "always_on",
            "sha": hashlib.sha256(b"Uses neovim with a dark theme.").hexdigest()} in turn.entries
    assert [f["id"] for f in turn.facts] == [f.id for f in ctx.facts] and turn.facts
    # Ids and hashes, never copies: no memory text is in the record.
    flat = repr(turn.as_dict())
    assert "dark mode" not in flat and "neovim" not in flat and "Lisbon" not in flat
    # A later edit does not rewrite history: the record keeps the version that was injected.
    write(svc, "PROFILE.md", PROFILE + "- plays the cello\n", owner="alice")
    assert svc.context.turns.get(AGENT, "alice", ctx.turn).files == turn.files


def test_turns_and_recall_are_owner_isolated(svc: Services) -> None:
    ctx = svc.context.build(AGENT, owner="alice", query="opera nights dark mode")
    assert all(f.owner == "alice" for f in ctx.facts)
    assert "opera" not in system_of(ctx)  # bob's fact never reaches alice's prompt
    assert svc.context.turns.get(AGENT, "bob", ctx.turn) is None
    assert svc.context.turns.get(AGENT, None, ctx.turn) is None
    assert svc.context.turns.get("other", "alice", ctx.turn) is None
    bob = svc.context.build(AGENT, owner="bob", query="opera nights dark mode")
    assert [f.text for f in bob.facts] == ["bob likes opera nights at the Staatsoper"]
    assert sum(f.uses for f in svc.facts.list(AGENT, "bob")) == 1  # alice's build used none of bob's


def test_a_fact_the_prompt_carries_is_not_restated(svc: Services) -> None:
    # alice's MEMORY.md goes into her prompt whole: its lines are not said again under FACTS, nor
    # counted as used there; a fact from a file the prompt does not carry still is.
    write(svc, "MEMORY.md", MEMORY, owner="alice")
    ctx = svc.context.build(AGENT, owner="alice", query="which editor mode do I like, dark or light? lisbon river")
    system = system_of(ctx)
    assert system.count("prefers dark mode in the editor") == 1
    assert "prefers dark mode in the editor" not in facts_block(system)
    assert [f.text for f in ctx.facts] == facts_block(system)
    assert all(f.uses == 0 for f in svc.facts.list(AGENT, "alice") if f.file == "MEMORY.md")
    write(svc, "MEMORY.md", FACTS_ONLY + MEMORY, owner="alice")
    ctx = svc.context.build(AGENT, owner="alice", query="which editor mode do I like, dark or light?")
    assert "prefers dark mode in the editor" in facts_block(system_of(ctx))
