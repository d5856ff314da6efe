from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.memory.extraction.service import ExtractionService
from mateclaw_mem.settings import load_settings
from mateclaw_mem.workspace.store import WorkspaceStore
from tests.support.extraction_env import AGENT, Env, answer  # noqa: F401

LONG = "Tell me something about the weather in general, please."


# -- gates --------------------------------------------------------------------------------------------


def test_gate_min_messages(make_env) -> None:
    env = make_env()
    r = env.turn("c1", "My name is Alice and I live in Berlin.")
    assert not r.scheduled and "min-messages" in r.reason
    env.idle()
    assert env.runs() == [] and "Alice" not in env.text("PROFILE.md")
    assert env.svc.status()["last_gate_skip"]["reason"] == r.reason


def test_gate_min_user_message_length(make_env) -> None:
    env = make_env()
    env.warm()
    r = env.turn("c1", "I'm Bob.")  # 8 characters
    assert not r.scheduled and "min-user-message-length" in r.reason
    env.idle()
    assert env.runs() == []


def test_gate_passes_and_runs(make_env) -> None:
    env = make_env()
    env.warm()
    r = env.turn("c1", "My name is Alice and I live in Berlin.")
    assert r.scheduled and r.when == "now"
    env.idle()
    assert [x["outcome"] for x in env.runs()] == ["updated"]
    profile = env.body("PROFILE.md")
    assert "- name: Alice" in profile and "- location: Berlin" in profile
    assert "## " in env.daily() and "name: Alice" in env.daily()


def test_gate_disabled(make_env) -> None:
    env = make_env(memory={"auto_summarize_enabled": False})
    env.warm()
    r = env.turn("c1", "Remember that the release is on Friday.")
    assert not r.scheduled and "disabled" in r.reason
    env.idle()
    assert env.runs() == []


@pytest.mark.parametrize("source", ["cron", "consolidation"])
def test_gate_trigger_source(make_env, source: str) -> None:
    env = make_env()
    env.turn("c1", "hi", trigger_source=source)
    r = env.turn("c1", "My name is Alice and I live in Berlin.", trigger_source=source)
    assert not r.scheduled and source in r.reason
    env.idle()
    assert env.runs() == []


def test_cron_turns_are_extracted_when_not_skipped_but_consolidation_never(make_env) -> None:
    env = make_env(memory={"skip_cron_conversations": False})
    env.turn("c1", "hi", trigger_source="cron")
    assert env.turn("c1", "My name is Alice and I live in Berlin.", trigger_source="cron").scheduled
    env.turn("c2", "hi", trigger_source="consolidation")
    assert not env.turn("c2", "Remember that X is Y.", trigger_source="consolidation").scheduled


def test_gate_memoryless_never_extracted_even_with_explicit_remember(make_env) -> None:
    env = make_env()
    env.turn("c1", "hi", memoryless=True)
    r = env.turn("c1", "Remember that my cat is called Tom.", memoryless=True)
    assert not r.scheduled and "memoryless" in r.reason
    # The flag is stored with the conversation: a later turn without it is still memoryless.
    r2 = env.turn("c1", "Remember that my dog is called Rex.")
    assert not r2.scheduled
    assert env.svc.extract_now(AGENT, "c1").outcome == "skipped"
    env.idle()
    assert "Tom" not in env.text("MEMORY.md") and "Rex" not in env.text("MEMORY.md")


def test_explicit_remember_bypasses_count_and_length(make_env) -> None:
    env = make_env()
    r = env.turn("c1", "记住：周五开会")  # 2 messages, 7 characters
    assert r.scheduled and r.explicit
    env.idle()
    assert "周五开会" in env.body("MEMORY.md")


# -- cooldown, trailing run, coalescing -----------------------------------------------------------------


def test_cooldown_then_trailing_run_examines_turns_from_the_cooldown(make_env) -> None:
    env = make_env()
    env.warm()
    env.turn("c1", "My name is Alice and I live in Berlin.")
    env.idle()
    r = env.turn("c1", "I work at Acme Corp as a data engineer.")
    assert r.scheduled and r.when == "after cooldown"
    env.idle()
    assert len(env.runs()) == 1 and "Acme" not in env.text("PROFILE.md")
    env.clock.advance(minutes=4)
    assert env.svc.run_due() == []
    env.clock.advance(minutes=1, seconds=1)
    assert env.svc.run_due() == [(AGENT, None)]
    env.idle()
    runs = env.runs()
    assert [x["trigger"] for x in runs] == ["auto", "trailing"]
    assert runs[1]["new_messages"] == 2  # only the turn from the cooldown
    assert "- employer: Acme Corp" in env.body("PROFILE.md")
    assert env.svc.status()["buckets"][0]["pending_conversations"] == []


def test_explicit_remember_bypasses_cooldown(make_env) -> None:
    env = make_env()
    env.warm()
    env.turn("c1", "My name is Alice and I live in Berlin.")
    env.idle()
    r = env.turn("c1", "Please remember that the launch is on March 3.")
    assert r.when == "now"
    env.idle()
    assert "The launch is on March 3" in env.body("MEMORY.md")


def test_failed_run_does_not_start_cooldown_and_is_retried_at_next_trigger(make_env, model_server) -> None:
    env = make_env(server=model_server)
    env.warm()
    model_server.server_error(500)
    model_server.server_error(500)
    env.turn("c1", "My name is Alice and I live in Berlin.")
    env.idle()
    run = env.runs()[-1]
    assert run["outcome"] == "error" and run["error_kind"] == "server"
    status = env.svc.status()
    assert not status["buckets"][0]["cooling_down"]
    assert status["buckets"][0]["pending_conversations"] == ["c1"]
    assert status["recent_errors"][0]["error_kind"] == "server"
    assert status["usage"]["errors"] == 2
    model_server.reply_json(answer(profile="## Profile\n- name: Alice\n- location: Berlin\n"))
    r = env.turn("c1", "Also I really like long walks in the park.")
    assert r.when == "now"  # no cooldown after a failure
    env.idle()
    assert env.runs()[-1]["outcome"] == "updated"
    # The retry still sees the turn from the failed run as new.
    prompt = model_server.chat_requests[-1].prompt_text
    assert "[NEW" in prompt and "My name is Alice" in prompt.split("[NEW", 1)[1]
    assert "- name: Alice" in env.text("PROFILE.md")


def test_requests_during_a_run_are_coalesced_into_one_follow_up(make_env, model_server) -> None:
    entered, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def responder(body: dict) -> dict:
        calls.append(body["messages"][-1]["content"])
        if len(calls) == 1:
            entered.set()
            release.wait(10)
        return answer(memory=f"# MEMORY\n\n## Notes\n- run {len(calls)}\n")

    model_server.responder = responder
    env = make_env(server=model_server, memory={"cooldown_minutes": 0})
    env.warm()
    env.turn("c1", "We are planning the quarterly roadmap this week.")
    assert entered.wait(10)
    whens = [env.turn("c1", f"Another important planning detail number {i}.").when for i in range(3)]
    assert whens == ["coalesced"] * 3
    release.set()
    env.idle()
    assert len(calls) == 2  # one run + ONE follow-up
    second = calls[1]
    assert all(f"planning detail number {i}" in second for i in range(3))
    assert "[SEEN" in second and "quarterly roadmap" in second.split("[SEEN", 1)[1].split("\n", 1)[0]
    assert [r["trigger"] for r in env.runs()] == ["auto", "follow-up"]


def test_watermark_tells_the_model_what_is_new(make_env, model_server) -> None:
    env = make_env(server=model_server)
    model_server.reply_json(answer(should=False))
    model_server.reply_json(answer(should=False))
    env.warm()
    env.turn("c1", "First real message about the project plan.")
    env.idle()
    env.clock.advance(minutes=6)
    env.turn("c1", "Second real message about the budget.")
    env.idle()
    first, second = (r.prompt_text for r in model_server.chat_requests)
    assert "[NEW" in first and "project plan" in first
    new_part = "\n".join(line for line in second.splitlines() if line.startswith("[NEW"))
    assert "budget" in new_part and "project plan" not in new_part
    seen_part = "\n".join(line for line in second.splitlines() if line.startswith("[SEEN"))
    assert "project plan" in seen_part or "Sure, noted." in seen_part


# -- restart --------------------------------------------------------------------------------------------


def test_cooldown_watermark_and_pending_survive_restart(make_env, model_server) -> None:
    env = make_env(server=model_server)
    model_server.reply_json(answer(memory="# MEMORY\n\n## Notes\n- plan A\n"))
    env.warm()
    env.turn("c1", "We are going to work on plan A this quarter.")
    env.idle()
    assert env.turn("c1", "And the budget for plan A is ten thousand.").when == "after cooldown"
    svc = env.restart()
    status = svc.status()
    assert status["buckets"][0]["cooling_down"]
    assert status["buckets"][0]["pending_conversations"] == ["c1"]
    # Cooldown persisted: a new turn still waits.
    assert env.turn("c1", "Plan A also needs a designer next month.").when == "after cooldown"
    env.svc.shutdown()
    env.clock.advance(minutes=6)
    model_server.reply_json(answer(memory="# MEMORY\n\n## Notes\n- plan A\n- budget 10k, designer\n"))
    # A fresh start runs the due work by itself.
    svc = ExtractionService(env.settings, env.store, env.log, clock=env.clock, model=lambda: env.client, timers=False)
    env.svc = svc
    svc.start()
    env.idle()
    assert len(model_server.chat_requests) == 2
    second = model_server.chat_requests[1].prompt_text
    new_part = "\n".join(line for line in second.splitlines() if line.startswith("[NEW"))
    assert "budget" in new_part and "designer" in new_part and "this quarter" not in new_part
    assert "budget 10k" in env.text("MEMORY.md")
    assert svc.status()["buckets"][0]["pending_conversations"] == []


# -- the hand-edit race -----------------------------------------------------------------------------------


def test_a_person_editing_memory_while_the_model_thinks_wins(make_env, model_server) -> None:
    thinking, edited = threading.Event(), threading.Event()
    prompts: list[str] = []

    def responder(body: dict) -> dict:
        prompt = body["messages"][-1]["content"]
        prompts.append(prompt)
        memory_block = prompt.split("<<< MEMORY.md (current body) >>>\n", 1)[1].split("\n<<< end >>>", 1)[0]
        if len(prompts) == 1:
            thinking.set()
            edited.wait(10)
        return answer(memory=memory_block.rstrip("\n") + "\n- Launch moved to May\n")

    model_server.responder = responder
    env = make_env(server=model_server)
    env.warm()
    env.turn("c1", "Heads up: the launch moved to May, please keep that in mind.")
    assert thinking.wait(10)
    snap = env.store.read(AGENT, "MEMORY.md")
    env.store.write(AGENT, "MEMORY.md", snap.text + "\n## Mine\n- my hand-written note\n", expected_sha=snap.sha,
                    actor="person")
    edited.set()
    env.idle()
    memory = env.text("MEMORY.md")
    assert "- my hand-written note" in memory and "- Launch moved to May" in memory
    assert len(prompts) == 2 and "my hand-written note" in prompts[1]
    run = env.runs()[-1]
    assert run["outcome"] == "updated" and run["attempts"] == 2
    assert memory.count("Launch moved to May") == 1
    assert env.daily().count("## ") == 1  # the daily entry is written once


# -- broken model output ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "kind"),
    [
        ("this is not JSON at all", "invalid_output"),
        ({"should_update": "perhaps", "memory_update": ["x"]}, "invalid_output"),
        (answer(memory="m" * 1_000_000), "invalid_output"),
    ],
    ids=["not-json", "wrong-types", "one-megabyte"],
)
def test_broken_model_output_never_touches_files(make_env, model_server, bad, kind: str) -> None:
    env = make_env(server=model_server)
    before = {rel: env.text(rel) for rel in ("PROFILE.md", "MEMORY.md")}
    model_server.push(bad, bad)
    env.warm()
    env.turn("c1", "My name is Alice and I live in Berlin.")
    env.idle()
    assert {rel: env.text(rel) for rel in before} == before
    assert env.daily() == ""
    run = env.runs()[-1]
    assert run["outcome"] == "error" and run["error_kind"] == kind
    assert env.svc.status()["last_run"]["error_kind"] == kind
    assert env.svc.status()["buckets"][0]["pending_conversations"] == ["c1"]


def test_a_secret_in_the_answer_is_redacted_before_the_file(make_env, model_server) -> None:
    env = make_env(server=model_server)
    model_server.reply_json(answer(
        memory="# MEMORY\n\n## Access\n- staging key sk-live-abcdefghijklmnopqrstuvwxyz012345\n",
        body="- stored the password: hunter22 for staging",
    ))
    env.warm()
    env.turn("c1", "We are setting up the staging environment today.")
    env.idle()
    memory, daily = env.text("MEMORY.md"), env.daily()
    assert "sk-live-abcdefghijklmnopqrstuvwxyz012345" not in memory and "[REDACTED:api_key]" in memory
    assert "hunter22" not in daily
    assert env.runs()[-1]["redactions"] == 2


def test_secrets_in_the_chat_never_reach_the_model(make_env, model_server) -> None:
    env = make_env(server=model_server)
    model_server.reply_json(answer(should=False))
    env.warm()
    env.turn("c1", "Remember that the db password is Tr0ub4dor&3 and the token is ghp_0123456789abcdefghijklmnopqrstuvwxyzAB")
    env.idle()
    raw = str(model_server.chat_requests[0].body)
    assert "Tr0ub4dor" not in raw and "ghp_0123456789" not in raw
    assert "[REDACTED:password]" in raw


def test_rules_mode_redacts_too(make_env) -> None:
    env = make_env()
    env.turn("c1", "Remember that the wifi password is s3cretWifi99")
    env.idle()
    memory = env.text("MEMORY.md")
    # Neither the secret nor its placeholder is a memory (issue 16.6): nothing is written at all.
    assert "s3cretWifi99" not in memory and "REDACTED" not in memory
    assert "s3cretWifi99" not in env.daily() and "secret" in env.runs()[-1]["reason"]


def test_a_rewrite_that_drops_most_of_memory_is_rejected(make_env, model_server) -> None:
    env = make_env(server=model_server)
    snap = env.store.read(AGENT, "MEMORY.md")
    big = snap.text + "\n## Projects\n" + "".join(f"- project {i} with a fairly long description\n" for i in range(30))
    env.store.write(AGENT, "MEMORY.md", big, expected_sha=snap.sha, actor="person")
    model_server.reply_json(answer(memory="# MEMORY\n\n- just this\n"))
    env.warm()
    env.turn("c1", "Let's wrap up the projects discussion for today.")
    env.idle()
    assert env.text("MEMORY.md") == big
    run = env.runs()[-1]
    assert run["outcome"] == "error" and run["error_kind"] == "invalid_output" and "shrink" in run["error"]


# -- model failures -------------------------------------------------------------------------------------


def test_retries_on_429_and_500_inside_one_run(make_env, model_server) -> None:
    env = make_env(server=model_server, model={"max_retries": 2})
    model_server.rate_limited(retry_after=0)
    model_server.server_error(500)
    model_server.reply_json(answer(profile="## Profile\n- name: Alice\n"))
    env.warm()
    env.turn("c1", "My name is Alice and I live in Berlin.")
    env.idle()
    assert env.runs()[-1]["outcome"] == "updated"
    assert len(model_server.chat_requests) == 3
    assert "- name: Alice" in env.text("PROFILE.md")


def test_timeout_is_recorded_and_retried_at_the_next_trigger(make_env, model_server) -> None:
    env = make_env(server=model_server, model={"timeout_seconds": 0.3, "max_retries": 0})
    model_server.hang(10)
    env.warm()
    env.turn("c1", "My name is Alice and I live in Berlin.")
    env.idle()
    run = env.runs()[-1]
    assert run["outcome"] == "error" and run["error_kind"] == "timeout"
    assert env.text("PROFILE.md").count("Alice") == 0
    model_server.reply_json(answer(profile="## Profile\n- name: Alice\n"))
    env.turn("c1", "And I work as a data engineer at Acme.")
    env.idle()
    assert env.runs()[-1]["outcome"] == "updated"


def test_context_too_large_retries_once_with_a_smaller_prompt(make_env, model_server) -> None:
    env = make_env(server=model_server, memory={"cooldown_minutes": 0})
    model_server.reply_json(answer(should=False))
    env.warm()
    env.turn("c1", "We are discussing the architecture of the new service.")
    env.idle()
    model_server.context_too_large()
    model_server.reply_json(answer(memory="# MEMORY\n\n- arch: hexagonal\n"))
    env.turn("c1", "We settled on a hexagonal architecture for it.")
    env.idle()
    assert env.runs()[-1]["outcome"] == "updated"
    last = model_server.chat_requests[-1].prompt_text
    assert "[SEEN" not in last


def test_model_mode_never_falls_back_to_rules(make_env, model_server) -> None:
    env = make_env(server=model_server, model={"max_retries": 0})
    model_server.server_error(503)
    env.turn("c1", "Remember that my name is Alice.")
    env.idle()
    assert "Alice" not in env.text("PROFILE.md") and "Alice" not in env.text("MEMORY.md")
    assert env.svc.status()["mode"] == "model"


# -- manual and shutdown ----------------------------------------------------------------------------------


def test_extract_now_runs_synchronously_without_gates(make_env) -> None:
    env = make_env()
    assert not env.turn("c9", "Call me Bob").scheduled  # gated out: too few messages
    out = env.svc.extract_now(AGENT, "c9")
    assert out.trigger == "manual" and out.outcome == "updated"
    assert "- name: Bob" in env.text("PROFILE.md")
    again = env.svc.extract_now(AGENT, "c9")
    assert again.outcome == "skipped" and "nothing new" in again.reason


def test_shutdown_keeps_pending_work_for_the_next_start(make_env) -> None:
    env = make_env()
    env.warm()
    env.turn("c1", "My name is Alice and I live in Berlin.")
    env.idle()
    env.turn("c1", "I work at Acme Corp as a data engineer.")  # waits for the cooldown
    env.svc.shutdown()
    env.clock.advance(minutes=10)
    env.svc = ExtractionService(env.settings, env.store, env.log, clock=env.clock, timers=False)
    env.svc.start()
    env.idle()
    assert "- employer: Acme Corp" in env.text("PROFILE.md")


def test_a_service_that_was_not_started_runs_nothing_and_start_resumes_its_work(make_env) -> None:
    env = make_env()
    env.svc.shutdown()
    before = {t.ident for t in threading.enumerate()}
    idle = ExtractionService(env.settings, env.store, env.log, clock=env.clock, timers=True)
    try:
        # What a CLI process does: the turn is logged and scheduled, and nothing runs in the background.
        assert idle.record_turn(AGENT, "c1", "Remember that the sky is green.", "ok").when == "now"
        assert idle.run_due() == []
        assert idle.runs() == [] and "sky is green" not in env.daily()
        assert {t.ident for t in threading.enumerate()} <= before
        assert idle.status()["buckets"][0]["pending_conversations"] == ["c1"]
        idle.start()  # the daemon's start: the pending run resumes
        assert idle.wait_idle(30)
        assert [r["outcome"] for r in idle.runs()] == ["updated"]
        assert "sky is green" in env.daily()
    finally:
        idle.shutdown()


def test_owners_are_separate_buckets(make_env) -> None:
    env = make_env()
    env.turn("c1", "Remember that the sky is green.", owner="u1")
    env.idle()
    env.turn("c2", "Remember that the grass is blue.", owner="u2")
    env.idle()
    buckets = {(b["agent"], b["owner"]) for b in env.svc.status()["buckets"]}
    assert buckets == {(AGENT, "u1"), (AGENT, "u2")}
    assert all(r["outcome"] == "updated" for r in env.runs())


# -- triage and the real timer ------------------------------------------------------------------------------


def test_triage_skips_the_model_for_commands_and_questions(make_env, model_server) -> None:
    env = make_env(server=model_server)
    env.warm()
    r = env.turn("c1", "Write a bash one-liner that finds the ten largest files.")
    assert r.scheduled
    env.idle()
    assert model_server.chat_requests == []
    run = env.runs()[-1]
    assert run["outcome"] == "skipped" and "triage" in run["reason"]
    assert not env.svc.status()["buckets"][0]["cooling_down"]
    model_server.reply_json(answer(memory="# MEMORY\n\n- launch in May\n"))
    assert env.turn("c1", "The launch moved to May, keep that in mind.").when == "now"
    env.idle()
    prompt = model_server.chat_requests[0].prompt_text
    new_part = "\n".join(line for line in prompt.splitlines() if line.startswith("[NEW"))
    assert "launch moved" in new_part and "bash one-liner" not in new_part
    assert "launch in May" in env.text("MEMORY.md")


def test_the_timer_starts_the_trailing_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mateclaw_mem.clock import SystemClock

    for key in [k for k in os.environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key, raising=False)
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    settings = load_settings(cfg, tmp_path / "ws", {"mate": {"memory": {"cooldown_minutes": 0.003}}})  # 180 ms
    clock = SystemClock(ZoneInfo("Europe/Berlin"))
    store = WorkspaceStore.from_settings(settings, clock)
    store.ensure_agent(AGENT)
    log = ConversationLog(settings.state_dir / "log.db")
    svc = ExtractionService(settings, store, log, clock=clock, timers=True)
    svc.start()
    try:
        svc.record_turn(AGENT, "c1", "hi", "hello")
        svc.record_turn(AGENT, "c1", "My name is Alice and I live in Berlin.", "ok")
        assert svc.wait_idle(10)
        r = svc.record_turn(AGENT, "c1", "I work at Acme Corp as a data engineer.", "ok")
        if r.when == "after cooldown":  # (on a very slow machine the cooldown may already be over)
            deadline = time.monotonic() + 10
            while len(svc.runs()) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
        assert svc.wait_idle(10)
        assert "- employer: Acme Corp" in store.read(AGENT, "PROFILE.md").text
    finally:
        svc.shutdown()
        log.close()


def test_manual_extraction_of_an_unknown_conversation_is_not_found(make_env) -> None:
    from mateclaw_mem.errors import NotFoundError

    env = make_env()
    with pytest.raises(NotFoundError, match="no logged messages for conversation 'nope'"):
        env.svc.extract_now(AGENT, "nope")
    assert env.runs() == []


def test_the_one_due_time_rule() -> None:
    from mateclaw_mem.memory.extraction.queue import due_at

    assert due_at(1_000, 5_000, explicit=False) == 5_000  # cooling down: wait for its end
    assert due_at(1_000, 5_000, explicit=True) == 1_000  # an explicit "remember" does not wait
    assert due_at(6_000, 5_000, explicit=False) == 6_000  # cooldown over: now
