from __future__ import annotations

from pathlib import Path

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.log import NewMessage
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.runtime.status import collect
from mateclaw_mem.settings import load_settings


def _system(ctx) -> str:
    assert ctx.messages[0]["role"] == "system"
    return ctx.messages[0]["content"]


def _setup(services: Services) -> None:
    store = services.store
    store.ensure_agent("default")
    store.write("default", "PROFILE.md", "---\nenabled: true\nsecret_meta: FRONTMATTER-XYZ\n---\n# Profile\n\n"
                "- name: Ada\n", expected_sha=None, actor="person")
    store.write("default", "TOOLS.md", "---\nenabled: true\nsort_order: 0\n---\n# Tools\n\nUse the terminal.\n",
                expected_sha="", actor="person")
    store.write("default", "NOTES.md", "---\nenabled: false\n---\nDISABLED-NOTES\n", expected_sha="", actor="person")
    services.structured.remember("default", "user", "language", "Prefers German.", actor="api")
    services.structured.remember("default", "feedback", "style", "Short answers, no emojis.", actor="api")
    services.structured.remember("default", "project", "garden", "Planting tomatoes on the balcony", actor="api")


def test_order_system_prompt_files_by_sort_order_structured_block_then_messages(services) -> None:
    _setup(services)
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    ctx = services.context.build("default", system_prompt="You are helpful.", history=history,
                                 current="how are the tomatoes?")
    system = _system(ctx)
    order = ["You are helpful.", "--- AGENTS.md ---", "--- TOOLS.md ---", "--- SOUL.md ---",
             "--- PROFILE.md ---", "--- MEMORY.md ---", "--- STRUCTURED MEMORY ---", "--- RELEVANT ENTRIES ---"]
    positions = [system.index(marker) for marker in order]
    assert positions == sorted(positions) and positions[0] == 0
    assert "- language: Prefers German." in system and "- style: Short answers, no emojis." in system
    assert "[project] garden" in system
    assert [m["role"] for m in ctx.messages] == ["system", "user", "assistant", "user"]
    assert ctx.messages[-1] == {"role": "user", "content": "how are the tomatoes?"}
    assert [f.rel for f in ctx.files] == ["AGENTS.md", "TOOLS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"]


def test_disabled_files_and_frontmatter_are_never_injected(services) -> None:
    _setup(services)
    services.tools.set_enabled("default", "SOUL.md", False, actor="person")
    system = _system(services.context.build("default", query="anything"))
    assert "DISABLED-NOTES" not in system and "--- NOTES.md ---" not in system
    assert "--- SOUL.md ---" not in system
    assert "FRONTMATTER-XYZ" not in system and "secret_meta" not in system and "enabled:" not in system
    assert "--- structured/" not in system  # structured files reach the prompt only through the block


def test_sort_order_changes_the_order(services) -> None:
    _setup(services)
    services.tools.set_sort_order("default", "MEMORY.md", -5, actor="person")
    system = _system(services.context.build("default"))
    assert system.index("--- MEMORY.md ---") < system.index("--- AGENTS.md ---")


def test_a_file_over_its_ceiling_is_flagged_in_the_prompt_and_left_whole_on_disk(services) -> None:
    services.store.ensure_agent("default")
    big = "# Profile\n\n" + "".join(f"- fact {i}: {'x' * 60}\n" for i in range(80))
    services.store.write("default", "PROFILE.md", big, expected_sha=None, actor="person")
    ctx = services.context.build("default")
    system = _system(ctx)
    assert f"[note: PROFILE.md is {len(big)} chars, over its 4000-char budget" in system
    assert "- fact 79:" in system
    assert services.store.read("default", "PROFILE.md").text == big
    assert next(f for f in ctx.files if f.rel == "PROFILE.md").over_budget


def test_no_query_no_relevant_entries(services) -> None:
    _setup(services)
    ctx = services.context.build("default")
    assert "--- RELEVANT ENTRIES ---" not in _system(ctx) and ctx.relevant == []


def test_memoryless_injects_only_the_agents_identity(services) -> None:
    _setup(services)
    services.store.append_daily("default", "Run", "DAILY-NOTE-TEXT", actor="api")
    services.tools.set_enabled("default", services.store.daily_rel(), True, actor="person")
    assert "DAILY-NOTE-TEXT" in _system(services.context.build("default"))
    ctx = services.context.build("default", query="how are the tomatoes?", memoryless=True)
    system = _system(ctx)
    assert [f.rel for f in ctx.files] == ["AGENTS.md", "SOUL.md"]
    for absent in ("--- PROFILE.md", "--- MEMORY.md", "--- TOOLS.md", "- name: Ada", "DAILY-NOTE-TEXT", "STRUCTURED MEMORY", "Prefers German",
                   "RELEVANT ENTRIES", "tomatoes on the balcony"):
        assert absent not in system
    assert ctx.structured is None and ctx.relevant == []


def test_memoryless_flag_lives_with_the_conversation_and_stops_extraction(services) -> None:
    _setup(services)
    services.log.append("default", "c1", [NewMessage("user", "remember that I like tea, please")],
                        memoryless=True, now_ms=1)
    services.log.append("default", "c1", [NewMessage("assistant", "ok")], now_ms=2)  # flag is sticky
    assert services.context.build("default", query="hi", conversation_id="c1").memoryless
    assert not services.context.build("default", query="hi", conversation_id="other").memoryless

    from mateclaw_mem.memory.extraction.service import ExtractionService

    extraction = ExtractionService(services.settings, services.store, services.log, clock=services.clock,
                                   model=services.use_model, timers=False)
    try:
        decision = extraction.trigger("default", "c1", last_user_message="remember that I like tea, please")
    finally:
        extraction.shutdown()
    assert not decision.scheduled and "memoryless" in decision.reason


def test_owner_isolation_takes_identity_from_the_agent_and_memory_from_the_owner(tmp_path: Path,
                                                                                 clock: ManualClock) -> None:
    cfg = tmp_path / "iso.yaml"
    cfg.write_text("timezone: Europe/Berlin\nowner-isolation: true\n", encoding="utf-8")
    svc = Services(load_settings(cfg, tmp_path / "ws"), clock)
    try:
        store = svc.store
        store.ensure_agent("default")
        store.write("default", "PROFILE.md", "# Profile\n\n- name: SHARED-PROFILE\n", expected_sha=None,
                    actor="person")
        store.ensure_agent("default", owner="bob@example.com")
        store.write("default", "PROFILE.md", "# Profile\n\n- name: BOB-PROFILE\n", expected_sha=None,
                    actor="person", owner="bob@example.com")
        svc.structured.remember("default", "user", "pet", "BOB-CAT", actor="api", owner="bob@example.com")
        ctx = svc.context.build("default", owner="bob@example.com", query="hi")
        system = _system(ctx)
        # As in the seed (issue 18): PROFILE.md is TEAM and the system message holds TEAM memory only;
        # bob's own files and entries are the per-turn block at the head of his message.
        assert "SHARED-PROFILE" in system and "BOB" not in system
        assert "--- AGENTS.md ---" in system and "--- SOUL.md ---" in system
        turn = ctx.messages[-1]["content"]
        assert ctx.messages[-1]["role"] == "user" and turn.endswith("hi")
        assert "BOB-PROFILE" in turn and "BOB-CAT" in turn
        assert {(f.rel, f.personal) for f in ctx.files} == {
            ("AGENTS.md", False), ("SOUL.md", False), ("PROFILE.md", False), ("MEMORY.md", False),
            ("PROFILE.md", True), ("MEMORY.md", True)}
        other = svc.context.build("default", owner="eve", query="hi")
        assert _system(other) == system and "BOB" not in str(other.messages)
    finally:
        svc.close()


def test_status_shows_each_always_on_file_and_the_structured_block_against_budget(services) -> None:
    _setup(services)
    report = collect(services)["prompt_budget"]["default"]
    files = {f["file"]: f for f in report["files"]}
    assert set(files) == {"AGENTS.md", "TOOLS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"}
    profile = files["PROFILE.md"]
    assert profile["budget_chars"] == 4000 and profile["budget_tokens"] == 1000
    assert profile["chars"] > 0 and profile["tokens"] == -(-profile["chars"] // 4)
    block = report["structured_block"]
    assert block["budget_chars"] == 4000 and block["included"] == {"user": 1, "feedback": 1}
    assert block["chars"] > 0 and block["tokens"] > 0


def test_a_hand_edit_outside_the_store_is_seen_by_the_next_prompt(services) -> None:
    _setup(services)
    assert "Use the terminal." in _system(services.context.build("default"))
    path = services.store.path("default", "TOOLS.md")
    path.write_text("---\nenabled: false\n---\n# Tools\n\nUse the terminal.\n", encoding="utf-8")
    assert "Use the terminal." not in _system(services.context.build("default"))
    path.write_text("---\nenabled: true\n---\n# Tools\n\nEDITED BY HAND\n", encoding="utf-8")
    assert "EDITED BY HAND" in _system(services.context.build("default"))


def test_cli_remember_recall_forget_context_and_consolidate(tmp_path: Path, monkeypatch, capsys) -> None:
    import json

    from mateclaw_mem.cli.main import main
    from tests.support.isolation import no_config_here

    no_config_here(monkeypatch, tmp_path)  # from tmp_path, on tmp_path/workspace, no settings file

    def run(*args: str) -> tuple[int, str]:
        code = main(list(args))
        return code, capsys.readouterr().out

    assert run("init")[0] == 0
    assert run("remember", "default", "user", "language", "Prefers German.")[0] == 0
    code, out = run("recall", "default", "user", "lang", "--json")
    assert code == 3 and json.loads(out)["error"]["code"] == "not_found"
    code, out = run("recall", "default", "user", "Language", "--json")
    assert code == 0 and json.loads(out)[0]["text"] == "Prefers German."
    code, out = run("context", "default", "--query", "hallo", "--json")
    data = json.loads(out)
    assert code == 0 and data["messages"][-1] == {"role": "user", "content": "hallo"}
    assert "- language: Prefers German." in data["messages"][0]["content"]
    code, out = run("context", "default", "--query", "hallo", "--memoryless", "--json")
    assert "Prefers German" not in json.loads(out)["messages"][0]["content"]
    assert run("forget", "default", "user", "language")[0] == 0
    code, out = run("consolidate-structured", "--json")
    assert code == 10 and json.loads(out)["ownersConsolidated"] == 0


def test_a_huge_hand_saved_file_is_injected_only_up_to_the_hard_limit(services) -> None:
    services.store.ensure_agent("default")
    huge = "# Memory\n\n" + "".join(f"## Heading {i}\n\n- note {i}: {'y' * 40}\n\n" for i in range(20_000))
    services.store.write("default", "MEMORY.md", huge, expected_sha=None, actor="person")
    system = _system(services.context.build("default"))
    limit = services.settings.mate.memory.prompt_file_max_chars
    assert limit == 32000
    assert "(mate.memory.prompt-file-max-chars); search finds the rest]" in system
    assert "## Heading 0\n" in system and "## Heading 19999" not in system  # the head, not the whole
    assert len(system) < limit + 10_000  # ~1.3 MB saved; the prompt stays near the limit
    assert services.store.read("default", "MEMORY.md").text == huge  # nothing cut on disk
