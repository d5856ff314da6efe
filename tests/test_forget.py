"""Forget that forgets (issue 17, point 4): every live place, the tombstone that keeps extraction
(rules and model) and dreaming from bringing the claim back, history after the undo window,
"forget that …" / "忘记…" in conversation, owner isolation, and `fact.forget-enabled` off."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from mateclaw_mem.conversations.log import NewMessage
from mateclaw_mem.errors import DisabledError, InvalidInputError
from mateclaw_mem.memory.forget import scan
from mateclaw_mem.memory.forget.matching import Fingerprint, Matcher, cut_text
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from tests.support.model_server import ModelServer

AGENT = "default"
CLAIM = "I take my tea without sugar"
OTHER = "walked the dog"


def make(tmp_path: Path, clock: Any, *, enabled: bool = True, isolation: bool = False,
         model: ModelServer | None = None) -> Services:
    lines = ["timezone: Europe/Berlin", "mate:", "  memory:", "    min-messages-for-summarize: 0",
             "    cooldown-minutes: 0", f"    lifecycle-mediator-enabled: {str(isolation).lower()}", "    fact:",
             "      projection-enabled: true", f"      forget-enabled: {str(enabled).lower()}"]
    if model is not None:
        lines += ["model:", f"  base-url: {model.base_url}", "  model: test-model", "  timeout-seconds: 5",
                  "  max-retries: 0"]
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("\n".join(lines) + "\n", encoding="utf-8")
    services = Services(load_settings(cfg, tmp_path / "workspace"), clock)
    services.store.ensure_agent(AGENT)
    _ = services.file_index  # as in the daemon: every write is ingested (search, facts)
    _ = services.facts
    return services


@pytest.fixture
def svc(tmp_path: Path, clock: Any) -> Services:
    services = make(tmp_path, clock)
    yield services
    services.close()


def append(services: Services, rel: str, text: str, owner: str | None = None) -> None:
    snap = services.store.read(AGENT, rel, owner=owner)
    services.store.write(AGENT, rel, (snap.text if snap.exists else "") + text, expected_sha=snap.sha,
                         actor="person", owner=owner)


def seed_everywhere(s: Services, owner: str | None = None) -> None:
    append(s, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n- likes cats\n", owner)
    append(s, "PROFILE.md", f"\n## Profile\n- name: Dana\n- {CLAIM}.\n", owner)
    append(s, "SOUL.md", f"\nShe told me: {CLAIM}. Be kind about it.\n", owner)
    s.structured.remember(AGENT, "user", "tea", CLAIM + ".", actor="person", owner=owner)
    append(s, "memory/2026-11-29.md", f"# 2026-11-29\n\n## 09:00 Remembered: {CLAIM}\n- {CLAIM}\n\n"
           f"## 10:00 Walk\n- {OTHER}\n", owner)
    append(s, "memory/archive/daily-2026-10.md", f"# Archive 2026-10\n\n## 2026-10-01 Notes\n- {CLAIM}, always\n"
           "- bought a kettle\n", owner)
    s.log.append(AGENT, "c1", [NewMessage("user", f"Hello. Please remember that {CLAIM}. Thanks!"),
                               NewMessage("assistant", "Noted.")], owner=owner, now_ms=1)
    s.message_index.sync(s.log)
    s.file_index.sync_messages(s.log)


def prompt(s: Services) -> str:
    """Everything a context build for a tea question puts before the model."""
    built = s.context.build(AGENT, query="how do I take my tea?", current="how do I take my tea?")
    return "\n".join(str(m) for m in built.messages).lower()


def files_with(s: Services, words: str = "without sugar") -> list[str]:
    return sorted(f"{f.owner or ''}:{f.rel}" for f in s.store.walk_files(AGENT)
                  if words in f.path.read_text(encoding="utf-8").lower())


def history_with(s: Services, words: str = "without sugar") -> list[str]:
    root = s.store.history_store.root
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.md") if p.is_file()
                  if words in p.read_text(encoding="utf-8").lower())


# -- matching ------------------------------------------------------------------------------------


def test_matching_ignores_case_space_and_punctuation_and_cuts_only_the_sentence() -> None:
    m = Matcher([Fingerprint.of("I take my tea without sugar")])
    assert m.contains("- i take my TEA,   without sugar!")
    assert not m.contains("I take my tea with sugar")
    text, n = cut_text("- Likes cats. I take my tea without sugar. Reads a lot.\n- other\n", m)
    assert (text, n) == ("- Likes cats. Reads a lot.\n- other\n", 1)
    assert Matcher([Fingerprint.of("我喝茶不加糖")]).contains("用户说：我喝茶不加糖。")


def test_a_one_word_claim_is_refused(svc: Services) -> None:
    with pytest.raises(InvalidInputError, match="at least 2 words"):
        svc.forget.forget(AGENT, None, "tea", actor="person")


# -- every place ---------------------------------------------------------------------------------


def test_forget_reaches_every_place_and_the_report_lists_them(svc: Services) -> None:
    seed_everywhere(svc)
    assert len(files_with(svc)) == 6
    assert svc.message_index.search(AGENT, None, "tea without sugar", limit=5)
    assert any("without sugar" in (h.snippet or "").replace("[[", "").replace("]]", "")
               for h in svc.search.search("tea without sugar", agent=AGENT).hits)
    assert "without sugar" in prompt(svc)

    report = svc.forget.forget(AGENT, None, "i take my TEA without sugar!", actor="person", now=True)

    assert {f["file"] for f in report.files} == {"MEMORY.md", "PROFILE.md", "SOUL.md", "structured/user.md",
                                                 "memory/2026-11-29.md", "memory/archive/daily-2026-10.md"}
    assert (report.log_messages, report.message_index_docs, report.search_index_rows) == (1, 1, 1)
    assert report.history_purged >= 6 and report.tombstone_new and CLAIM not in json.dumps(report.to_dict())
    assert files_with(svc) == []
    assert "likes cats" in svc.store.read(AGENT, "MEMORY.md").body  # only the claim went
    daily = svc.store.read(AGENT, "memory/2026-11-29.md").body
    assert "Remembered" not in daily and OTHER in daily  # its daily entry went as a whole
    assert "Be kind about it." in svc.store.read(AGENT, "SOUL.md").body
    # the indexes
    hits = svc.search.search("tea without sugar", agent=AGENT).hits
    assert not any("sugar" in (h.snippet or "") for h in hits), hits
    assert all("sugar" not in h.content for h in svc.message_index.search(AGENT, None, "tea sugar", limit=10))
    # the log: the sentence is gone, the rest of the turn is kept
    said = [m.content for m in svc.log.messages(AGENT, "c1")]
    assert said[0] == "Hello. [forgotten] Thanks!" and "sugar" not in " ".join(said)
    # facts and the prompt
    assert not [f for f in svc.facts.list(AGENT, None) if "sugar" in f.text]
    assert "sugar" not in prompt(svc)
    assert history_with(svc) == []
    # and the bytes: every file of the workspace, databases and their WAL raw, archives unpacked
    assert scan.walk(svc.settings.workspace, {"c": scan.patterns(CLAIM)}).hits["c"] == []
    assert scan.walk(svc.settings.workspace, {"c": scan.patterns("likes cats")}).hits["c"]  # the scan sees


def test_history_copies_wait_for_the_undo_window_then_go(svc: Services, clock: Any) -> None:
    append(svc, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n")
    report = svc.forget.forget(AGENT, None, CLAIM, actor="person")
    assert report.history_purge_due and history_with(svc)  # still undoable
    assert svc.forget.purge_due() == 0
    clock.advance(timedelta(hours=25))
    svc.forget.forget(AGENT, None, "something else entirely", actor="person")  # the next forget purges
    assert history_with(svc) == []


def test_the_scheduler_heartbeat_purges_once_the_window_has_passed(svc: Services, clock: Any) -> None:
    append(svc, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n")
    svc.forget.forget(AGENT, None, CLAIM, actor="person")
    assert ("forget_purge", "done") not in svc.scheduler.tick_all() and history_with(svc)
    clock.advance(timedelta(hours=24, minutes=1))
    assert ("forget_purge", "done") in svc.scheduler.tick_all()
    assert history_with(svc) == []


def test_undo_inside_the_window_brings_it_back_and_lifts_the_tombstone(svc: Services, clock: Any) -> None:
    append(svc, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n")
    report = svc.forget.forget(AGENT, None, CLAIM, actor="person")
    svc.store.undo_batch(report.batch)
    assert CLAIM in svc.store.read(AGENT, "MEMORY.md").body
    clock.advance(timedelta(hours=25))
    svc.forget.purge_due()
    assert history_with(svc) and not svc.forget.guard(AGENT, None)


def test_forget_by_fact_id(svc: Services) -> None:
    append(svc, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n- likes cats\n")
    fact = next(f for f in svc.facts.list(AGENT, None) if "sugar" in f.text)
    report = svc.forget.forget_fact(AGENT, None, fact.id, actor="person")
    assert report.files == [{"file": "MEMORY.md", "lines": 1}] and fact.id in report.facts_forgotten


# -- owners --------------------------------------------------------------------------------------


def test_an_owner_forget_never_touches_another_owner_and_a_team_forget_only_shared(tmp_path: Path,
                                                                                   clock: Any) -> None:
    s = make(tmp_path, clock, isolation=True)
    try:
        for owner in (None, "alice", "bob"):
            s.store.ensure_agent(AGENT, owner)
            append(s, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n", owner)
            append(s, "MEMORY.md", "- likes cats\n", owner)  # history now holds a copy with the claim
            s.log.append(AGENT, "c", [NewMessage("user", f"{CLAIM}.")], owner=owner, now_ms=1)
        s.message_index.sync(s.log)
        s.forget.forget(AGENT, "alice", CLAIM, actor="person", now=True)
        assert files_with(s) == [":MEMORY.md", "bob:MEMORY.md"]
        assert [m.content for m in s.log.messages(AGENT, "c", owner="bob")] == [f"{CLAIM}."]
        assert s.message_index.search(AGENT, "bob", "tea sugar", limit=3)
        assert any(h.startswith("default/owners/bob/") for h in history_with(s))  # bob's history untouched
        assert s.forget.guard(AGENT, "alice") and not s.forget.guard(AGENT, "bob")
        s.forget.forget(AGENT, None, CLAIM, actor="person", now=True)
        assert files_with(s) == ["bob:MEMORY.md"]
        assert [m.content for m in s.log.messages(AGENT, "c", owner="bob")] == [f"{CLAIM}."]
    finally:
        s.close()


def test_aml_search_forgets_for_one_user_only(svc: Services) -> None:
    from mateclaw_mem.conversations.aml import AmlMessage

    svc.seed_agents()
    aml_agent = svc.settings.aml_agent
    for user in ("ann", "ben"):
        svc.aml.add_json(f"r-{user}", user, "s1", [AmlMessage("user", f"By the way, {CLAIM}."),
                                                   AmlMessage("assistant", "Good to know.")])
    assert any("sugar" in i.content for i in svc.aml.search("how do I take my tea", "ann", 5))
    report = svc.forget.forget(aml_agent, "ann", CLAIM, actor="person")
    assert report.log_messages == 1 and report.message_index_docs == 1
    assert not any("sugar" in i.content for i in svc.aml.search("how do I take my tea sugar", "ann", 5))
    assert any("sugar" in i.content for i in svc.aml.search("how do I take my tea", "ben", 5))


# -- nothing brings it back ----------------------------------------------------------------------


def test_rules_extraction_of_the_same_sentence_writes_nothing_of_it(svc: Services) -> None:
    svc.forget.forget(AGENT, None, CLAIM, actor="person")
    svc.extraction.record_turn(AGENT, "c2", f"Please remember that {CLAIM}, and I live in Lisbon.", "ok")
    out = svc.extraction.extract_now(AGENT, "c2")
    assert out.ok, out
    assert files_with(svc) == []
    assert "Lisbon" in svc.store.read(AGENT, "PROFILE.md").body + svc.store.read(AGENT, "MEMORY.md").body


def test_model_extraction_adding_the_claim_writes_nothing_of_it(tmp_path: Path, clock: Any,
                                                                 model_server: ModelServer) -> None:
    s = make(tmp_path, clock, model=model_server)
    try:
        s.forget.forget(AGENT, None, CLAIM, actor="person")
        model_server.reply_json({
            "should_update": True, "reason": "tea",
            "daily_entry": {"title": f"Remembered: {CLAIM}", "body": f"- {CLAIM}"},
            "edits": [{"op": "add", "file": "MEMORY.md", "section": "Notes", "text": CLAIM, "evidence": ["1"]},
                      {"op": "add", "file": "MEMORY.md", "section": "Notes", "text": "Lives in Lisbon",
                       "evidence": ["1"]}],
            "structured": [{"type": "user", "key": "tea", "text": CLAIM}],
        })
        s.extraction.record_turn(AGENT, "c2", f"Please remember that {CLAIM}. I live in Lisbon.", "ok")
        out = s.extraction.extract_now(AGENT, "c2")
        assert out.ok, out
        assert files_with(s) == []
        assert "Lives in Lisbon" in s.store.read(AGENT, "MEMORY.md").body
    finally:
        s.close()


def test_dreaming_never_promotes_a_tombstoned_claim(svc: Services, clock: Any) -> None:
    svc.forget.forget(AGENT, None, CLAIM, actor="person")
    for day in ("2026-11-28", "2026-11-29", "2026-11-30"):  # hand-written notes: recurring evidence
        path = svc.store.path(AGENT, f"memory/{day}.md")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {day}\n\n## 09:00 Tea\n- {CLAIM}\n- Prefers window seats\n", encoding="utf-8")
    out = svc.dreaming.dream(AGENT)
    memory = svc.store.read(AGENT, "MEMORY.md").body
    assert "window seats" in memory.lower(), (out.status, out.reason, memory)
    assert "without sugar" not in memory.lower() and not any("sugar" in p for p in out.promoted)


# -- in conversation -----------------------------------------------------------------------------


@pytest.mark.parametrize(("request_text", "claim"), [
    ("please forget that I take my tea without sugar", CLAIM),
    ("请忘记我喝茶不加糖。", "我喝茶不加糖"),
])
def test_forget_that_in_conversation_in_rules_mode(svc: Services, request_text: str, claim: str) -> None:
    append(svc, "MEMORY.md", f"\n## Notes\n- {claim}\n- likes cats\n")
    svc.extraction.record_turn(AGENT, "c3", request_text, "OK.")
    assert svc.extraction.extract_now(AGENT, "c3").ok
    assert claim not in svc.store.read(AGENT, "MEMORY.md").body
    assert "likes cats" in svc.store.read(AGENT, "MEMORY.md").body
    assert claim not in svc.log.messages(AGENT, "c3")[0].content
    assert svc.forget.guard(AGENT, None).blocks(claim)


def test_forget_that_in_conversation_in_model_mode_is_done_by_our_code(tmp_path: Path, clock: Any,
                                                                        model_server: ModelServer) -> None:
    s = make(tmp_path, clock, model=model_server)
    try:
        append(s, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n")
        model_server.reply_json({"should_update": False, "reason": "nothing new"})
        s.extraction.record_turn(AGENT, "c4", f"Please forget that {CLAIM}.", "OK.")
        assert s.extraction.extract_now(AGENT, "c4").ok
        assert files_with(s) == []
        assert all("sugar" not in r.prompt_text for r in model_server.chat_requests)  # the model never saw it
    finally:
        s.close()


def test_with_forget_off_the_request_is_an_ordinary_message_and_the_service_refuses(tmp_path: Path,
                                                                                     clock: Any) -> None:
    s = make(tmp_path, clock, enabled=False)
    try:
        append(s, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n")
        s.extraction.record_turn(AGENT, "c5", f"Please forget that {CLAIM}.", "OK.")
        s.extraction.extract_now(AGENT, "c5")
        assert files_with(s) == [":MEMORY.md"]
        assert "sugar" in s.log.messages(AGENT, "c5")[0].content
        with pytest.raises(DisabledError, match=r"mate\.memory\.fact\.forget-enabled"):
            s.forget.forget(AGENT, None, CLAIM, actor="person")
    finally:
        s.close()


# -- faces ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("enabled", [False, True])
def test_http_forget(tmp_path: Path, enabled: bool) -> None:
    from mateclaw_mem.api.app import create_app
    from tests.support.server import ApiServer, daemon_services

    services = daemon_services(tmp_path / "ws", mate={"memory": {"fact": {"forget_enabled": enabled}}})
    try:
        services.seed_agents()
        services.build()
        append(services, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n")
        with ApiServer(create_app(services, mcp=False)) as server, httpx.Client(base_url=server.url) as client:
            r = client.post(f"/api/v1/memory/{AGENT}/forget", json={"text": CLAIM, "now": True})
            if not enabled:
                assert r.status_code == 409 and "fact.forget-enabled" in r.text, r.text
                assert files_with(services) == [":MEMORY.md"]
                return
            assert r.status_code == 200, r.text
            assert r.json()["files"] == [{"file": "MEMORY.md", "lines": 1}] and r.json()["history_purged"] >= 1
            assert client.post(f"/api/v1/memory/{AGENT}/forget", json={}).status_code in (400, 422)
            assert client.post("/api/v1/memory/nobody/forget", json={"text": CLAIM}).status_code == 404
            assert files_with(services) == []
    finally:
        services.close()


def test_mcp_memory_forget_tool(svc: Services) -> None:
    import anyio

    from mateclaw_mem.mcp.server import build_server

    append(svc, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n")
    server = build_server(svc, AGENT)

    async def call() -> Any:
        return await server.call_tool("memory_forget", {"text": CLAIM, "now": True})

    anyio.run(call)
    assert files_with(svc) == []


@pytest.mark.parametrize("enabled", [False, True])
def test_cli_forget(tmp_path: Path, clock: Any, enabled: bool) -> None:
    import os
    import subprocess
    import sys

    s = make(tmp_path, clock, enabled=enabled)
    append(s, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n- likes cats\n")
    s.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
    env["MATECLAW_CONFIG"] = str(tmp_path / "mateclaw.yaml")
    proc = subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", "forget", AGENT, CLAIM, "--now",
                           "--workspace", str(tmp_path / "workspace")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr
    if not enabled:
        assert proc.returncode == 6 and "mate.memory.fact.forget-enabled" in proc.stderr, proc.stderr
        assert CLAIM in (tmp_path / "workspace" / AGENT / "MEMORY.md").read_text(encoding="utf-8")
        return
    assert proc.returncode == 0, proc.stderr
    assert "MEMORY.md: 1 line(s)" in proc.stdout and "history copies purged" in proc.stdout
    assert CLAIM not in (tmp_path / "workspace" / AGENT / "MEMORY.md").read_text(encoding="utf-8")


def test_forget_reaches_inside_the_compressed_month_archives(svc: Services, clock: Any) -> None:
    from datetime import timedelta

    from mateclaw_mem.workspace import month_archive

    old = clock.now() - timedelta(days=90)
    svc.store.append_daily(AGENT, "Tea", f"- {CLAIM}\n- likes cats", actor="extraction", when=old)
    assert svc.dreaming.rotate(AGENT)["daily_notes_archived"]  # the note is now inside memory/archive/*.md.gz
    month = month_archive.months(svc.store, AGENT)[0]["month"]
    report = svc.forget.forget(AGENT, None, CLAIM, actor="person", now=True)
    inside = month_archive.read_month(svc.store, AGENT, month)
    assert inside is not None
    texts = "\n".join(text for _, text in inside.texts())
    assert "without sugar" not in texts and "likes cats" in texts
    assert any(f["file"].startswith("memory/archive/") and ".md.gz:" in f["file"] for f in report.files)
    hits = svc.search.search("tea without sugar", agent=AGENT, record=False).hits
    assert hits and not [h for h in hits if "sugar" in h.snippet.lower()]  # the index re-read the archive
