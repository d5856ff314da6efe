"""Scopes (issue 18): two owners of one agent and one GLOBAL fact. Nothing of A reaches B, GLOBAL
reaches both, and with isolation on the system message is the same bytes for both owners."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.errors import InvalidPathError
from mateclaw_mem.index.chunker import SCOPES
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from mateclaw_mem.workspace.owners import owner_key
from mateclaw_mem.workspace.walk import GLOBAL

AGENT = "default"
A = owner_key("web", 42).key  # user:42
B = owner_key("api", 42).key  # api:42: the same id from another source is another owner
TS = 1683554160000


def _write(svc: Services, rel: str, text: str, *, agent: str = AGENT, owner: str | None = None) -> None:
    snap = svc.store.read(agent, rel, owner=owner)
    svc.store.write(agent, rel, text, expected_sha=snap.sha, actor="person", owner=owner)


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Services:


    tmp = tmp_path_factory.mktemp("scopes")
    cfg = tmp / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\nmate:\n  memory:\n    lifecycle-mediator-enabled: true\n"
                   "    fact:\n      projection-enabled: true\n", encoding="utf-8")
    services = Services(load_settings(cfg, tmp / "workspace"), ManualClock(datetime(2026, 3, 2, 9, tzinfo=UTC)))
    services.store.ensure_agent(AGENT)
    _ = services.file_index  # writes are ingested, as in the daemon
    _ = services.facts
    _write(services, "MEMORY.md", "# Memory\n\n## Team\n\n- the team kayak club meets on Fridays\n")
    for owner, secret in ((A, "ALPHA"), (B, "BRAVO")):
        services.store.ensure_agent(AGENT, owner=owner)
        _write(services, "MEMORY.md", f"# Memory\n\n## Me\n\n- {secret} paddles a red kayak on weekends\n",
               owner=owner)
        services.structured.remember(AGENT, "user", "boat", f"{secret}-BOAT kayak", actor="api", owner=owner)
    _write(services, "MEMORY.md", "# Memory\n\n## Everyone\n\n- GLOBALFACT the kayak shed code is 4711\n",
           agent=GLOBAL)
    services.structured.remember(GLOBAL, "reference", "shed", "GLOBALENTRY kayak shed behind the office",
                                 actor="api")
    yield services
    services.close()


def _everything(ctx) -> str:
    return "\n".join(str(m["content"]) for m in ctx.messages)


def test_context_system_message_is_cache_stable_and_personal_memory_is_per_turn(svc: Services) -> None:
    a = svc.context.build(AGENT, owner=A, query="kayak weekends")
    b = svc.context.build(AGENT, owner=B, query="kayak weekends")
    assert a.messages[0]["role"] == "system" and a.messages[0] == b.messages[0]  # byte-identical
    system = a.messages[0]["content"]
    assert "ALPHA" not in system and "BRAVO" not in system
    assert "the team kayak club" in system  # TEAM (written before any owner) stays visible
    assert "--- global/MEMORY.md ---" in system and "GLOBALFACT" in system
    assert "--- GLOBAL STRUCTURED MEMORY ---" not in system  # reference entries are on demand only
    assert "GLOBALENTRY" in a.messages[-1]["content"] and "GLOBALENTRY" in b.messages[-1]["content"]
    mine, theirs = _everything(a), _everything(b)
    assert "ALPHA paddles" in mine and "ALPHA-BOAT" in mine and "BRAVO" not in mine
    assert "BRAVO paddles" in theirs and "BRAVO-BOAT" in theirs and "ALPHA" not in theirs
    turn = a.messages[-1]
    assert turn["role"] == "user" and turn["content"].startswith("=== MEMORY FOR THIS TURN ===")
    assert turn["content"].endswith("kayak weekends")
    assert {f.scope for f in a.files} == {"team", "global", "personal"}


def test_context_personal_block_keeps_its_budget_with_a_marker(svc: Services) -> None:
    before = svc.context.personal_max_chars
    svc.context.personal_max_chars = 40
    try:
        ctx = svc.context.build(AGENT, owner=A, query="kayak")
    finally:
        svc.context.personal_max_chars = before
    turn = ctx.messages[-1]["content"]
    assert "--- MEMORY.md ---" not in turn and not any(f.personal and f.rel == "MEMORY.md" for f in ctx.files)
    assert "left out to keep personal memory within 40 chars: MEMORY.md" in ctx.messages[-1]["content"]
    assert ctx.turn_block is not None and "MEMORY.md" in ctx.turn_block.left_out


def test_context_without_an_owner_has_no_personal_memory(svc: Services) -> None:
    shared = svc.context.build(AGENT, query="kayak weekends")
    text = _everything(shared)
    assert "ALPHA" not in text and "BRAVO" not in text and "GLOBALFACT" in text


@pytest.mark.parametrize("scope", list(SCOPES))
def test_search_sees_the_owners_own_team_and_global_files_only(svc: Services, scope: str) -> None:
    for me, other in ((A, "BRAVO"), (B, "ALPHA")):
        hits = svc.search.search("kayak", owner=me, scope=scope, limit=20, record=False).hits
        text = " ".join(h.snippet for h in hits)
        assert other not in text
        assert {h.owner for h in hits} <= {None, me}
        if scope in ("all", "memory"):
            assert any(h.agent == GLOBAL and "GLOBALFACT" in h.snippet for h in hits)
            assert any(h.owner == me for h in hits)
    if scope not in ("all", "memory"):
        return
    shared = svc.search.search("kayak", owner=None, scope=scope, limit=20, record=False).hits
    assert not any(h.owner for h in shared) and any(h.agent == GLOBAL for h in shared)


def test_facts_of_one_owner_never_reach_the_other_and_global_reaches_both(svc: Services) -> None:
    for me, mine, other in ((A, "ALPHA", "BRAVO"), (B, "BRAVO", "ALPHA")):
        listed = svc.facts.list(AGENT, me, query="kayak")
        recalled = svc.facts.recall(AGENT, me, "kayak", budget_chars=2000)
        for found in (listed, recalled):
            texts = " ".join(f.text for f in found)
            assert mine in texts and other not in texts and "GLOBALFACT" in texts
        assert {f.scope for f in listed} == {"personal", "global"}


def test_aml_search_keeps_each_owner_to_their_own_messages(tmp_path: Path) -> None:
    # The Add/Search contract has no GLOBAL scope (it serves logged turns); the leak half still holds.
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    try:
        log.append("aml", "s1", [NewMessage("user", "ALPHA: my kayak is red", TS)], owner=A, now_ms=TS)
        log.append("aml", "s2", [NewMessage("user", "BRAVO: my kayak is blue", TS)], owner=B, now_ms=TS)
        index.sync(log)
        assert [h.content for h in index.search("aml", A, "kayak", limit=5)] == ["ALPHA: my kayak is red"]
        assert [h.content for h in index.search("aml", B, "kayak", limit=5)] == ["BRAVO: my kayak is blue"]
        assert index.search("aml", None, "kayak", limit=5) == []
    finally:
        index.close()
        log.close()


def test_an_agent_cannot_be_named_global(svc: Services) -> None:
    with pytest.raises(InvalidPathError, match="reserved"):
        svc.store.ensure_agent("Global")
    assert GLOBAL not in svc.store.agents()


def test_isolation_off_keeps_every_file_team_and_the_old_prompt(tmp_path: Path, clock) -> None:
    svc = Services(load_settings(None, tmp_path / "ws"), clock)
    try:
        svc.store.ensure_agent(AGENT)
        _write(svc, "MEMORY.md", "# Memory\n\n- TEAMNOTE kayak\n", owner=A)  # no owner folder: TEAM
        ctx = svc.context.build(AGENT, owner=A, query="kayak")
        assert "TEAMNOTE" in ctx.messages[0]["content"] and ctx.turn_block is None
        assert ctx.messages[-1] == {"role": "user", "content": "kayak"}
    finally:
        svc.close()


def test_turning_isolation_on_later_keeps_existing_memory_visible_as_team(tmp_path: Path, clock) -> None:
    before = Services(load_settings(None, tmp_path / "ws"), clock)
    try:
        before.store.ensure_agent(AGENT)
        _write(before, "MEMORY.md", "# Memory\n\n- EARLYNOTE the kayak trailer is blue\n", owner=A)
    finally:
        before.close()
    cfg = tmp_path / "on.yaml"
    cfg.write_text("timezone: Europe/Berlin\nowner-isolation: true\n", encoding="utf-8")
    after = Services(load_settings(cfg, tmp_path / "ws"), clock)
    try:
        for owner in (A, B, None):
            ctx = after.context.build(AGENT, owner=owner, query="kayak")
            assert "EARLYNOTE" in ctx.messages[0]["content"]
        assert after.store.owners(AGENT) == []  # nothing was moved into an owner's folder
    finally:
        after.close()


def test_a_global_folder_that_links_out_of_the_workspace_is_never_read(tmp_path: Path, clock) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "MEMORY.md").write_text("# Memory\n\n- OUTSIDER kayak\n", encoding="utf-8")
    svc = Services(load_settings(None, tmp_path / "ws"), clock)
    try:
        svc.store.ensure_agent(AGENT)
        (tmp_path / "ws" / GLOBAL).symlink_to(outside, target_is_directory=True)
        assert not any(f.agent == GLOBAL for f in svc.store.walk_files())
        assert "OUTSIDER" not in str(svc.context.build(AGENT, query="kayak").messages)
        with pytest.raises(InvalidPathError, match="outside the workspace"):
            _write(svc, "MEMORY.md", "# x\n", agent=GLOBAL)
    finally:
        svc.close()
