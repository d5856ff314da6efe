"""Model answers as small edits, checked for meaning: placeholders, echoes, evidence, and remember
requests that must never be lost (issue 20, points 1 and 2), against the scripted model server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from mateclaw_mem.markdown.edits import Edit, apply_edits
from mateclaw_mem.memory.extraction import remember
from mateclaw_mem.memory.extraction.output import SHRINK_GUARD_MIN_CHARS
from tests.support.extraction_env import AGENT, answer

MEMORY = "# Memory\n\n## Preferences\n- prefers dark mode\n- likes green tea\n\n## Work\n- works at Acme\n"
PINNED = "## Mine <!-- pin -->\n- my own words\n"


# -- the applier ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "expect_line", "gone"),
    [
        (Edit("update", section="Preferences", old="Prefers dark mode.", text="prefers light mode"),
         "- prefers light mode", "dark mode"),
        (Edit("update", old="prefers dark", text="prefers light mode"), "- prefers light mode", "dark mode"),
        (Edit("remove", old="likes green tea"), None, "green tea"),
        (Edit("add", section="Work", text="role: engineer"), "- role: engineer", None),
        (Edit("add", section="Travel", text="Lisbon in May"), "## Travel\n- Lisbon in May", None),
        (Edit("remove", section="Work"), None, "Acme"),
    ],
    ids=["update-exact", "update-contains", "remove-line", "add-to-section", "add-new-section", "remove-section"],
)
def test_an_edit_changes_only_what_it_names(edit: Edit, expect_line: str | None, gone: str | None) -> None:
    res = apply_edits(MEMORY, [edit], default_section="Notes")
    assert res.applied == [0] and res.skipped == []
    if expect_line:
        assert expect_line in res.body
    if gone:
        assert gone not in res.body
    untouched = [ln for ln in MEMORY.splitlines() if (not gone or gone not in ln) and ln.strip()
                 and not (edit.op == "remove" and edit.section and ln.startswith("## Work"))]
    for line in untouched:
        assert line in res.body.splitlines()


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (Edit("update", old="nothing like this", text="x y z"), "no line matches"),
        (Edit("update", old="- ", text="x"), "no line"),
        (Edit("remove", old="my own words"), "pinned"),
        (Edit("add", section="Mine", text="sneaked in"), "pinned"),
        (Edit("add", section="Preferences", text="- likes green tea"), "already there"),
        (Edit("add", text="## New heading\n- x"), "heading"),
    ],
)
def test_an_edit_that_cannot_apply_is_skipped_with_its_reason(edit: Edit, why: str) -> None:
    body = MEMORY + "\n" + PINNED
    res = apply_edits(body, [edit], default_section="Notes")
    assert res.body == body and res.applied == []
    assert why in res.skipped[0][1]


def test_an_ambiguous_line_is_not_guessed() -> None:
    body = "## A\n- meeting with Bob on Monday\n- meeting with Bob on Friday\n"
    res = apply_edits(body, [Edit("remove", old="meeting with Bob")])
    assert res.body == body and "2 lines match" in res.skipped[0][1]


# -- extraction answers as edits -----------------------------------------------------------------------


def edits_answer(edits: list[dict[str, Any]], *, title: str = "Preferences", body: str = "- updated") -> dict:
    return {"should_update": True, "reason": "correction", "edits": edits,
            "daily_entry": {"title": title, "body": body}}


def _new_ids(server) -> list[str]:
    prompt = server.chat_requests[-1].prompt_text
    return [line.split("#", 1)[1].split()[0] for line in prompt.splitlines() if line.startswith("[NEW #")]


def test_extraction_edits_touch_nothing_else(make_env, model_server) -> None:
    env = make_env(server=model_server)
    long_memory = MEMORY + "".join(f"\n## Topic {i}\n- fact number {i} that stays exactly as written\n"
                                   for i in range(20))
    snap = env.store.read(AGENT, "MEMORY.md")
    env.store.write(AGENT, "MEMORY.md", long_memory, expected_sha=snap.sha, actor="dreaming")
    ids: list[str] = []

    def responder(body: dict) -> dict:
        ids[:] = [ln.split("#", 1)[1].split()[0] for ln in body["messages"][-1]["content"].splitlines()
                  if ln.startswith("[NEW #")]
        user_ids = [i for i in ids]
        return edits_answer([
            {"op": "update", "file": "MEMORY.md", "section": "Preferences", "old": "prefers dark mode",
             "text": "prefers light mode", "evidence": user_ids[:1]},
            {"op": "add", "file": "PROFILE.md", "section": "Profile", "text": "timezone: Europe/Lisbon",
             "evidence": user_ids[:1]},
        ])

    model_server.responder = responder
    env.warm()
    env.turn("c1", "Actually I switched to light mode, and I moved to Lisbon.")
    env.idle()
    run = env.runs()[-1]
    assert run["outcome"] == "updated", run
    memory = env.body("MEMORY.md")
    assert "- prefers light mode" in memory and "dark mode" not in memory
    assert memory == long_memory.replace("prefers dark mode", "prefers light mode")
    assert "- timezone: Europe/Lisbon" in env.body("PROFILE.md")
    # The answer is a few lines, not the files written back.
    assert len(model_server.chat_requests) == 1


@pytest.mark.parametrize(
    "bad",
    [
        answer(memory="...", profile="..."),
        answer(title="...", body="..."),
        answer(title="08:36 ...", body="- ...\n- ..."),
        {"should_update": True, "reason": "one sentence", "daily_entry": {"title": "<title>", "body": "<bullets>"}},
        {"should_update": True, "reason": "x", "edits": [{"op": "add", "text": "<line>", "evidence": ["1"]}]},
        {"should_update": True, "reason": "x", "daily_entry": {
            "title": "Memory", "body": "Keep: stable facts about the person (name, role, employer, location, timezone,"
            " tools, likes, dislikes,\nSkip: small talk, questions, hypotheticals, the assistant's own answers."}},
    ],
    ids=["dots-bodies", "dots-daily", "time-dots-daily", "schema-words", "angle-edit", "echoed-instructions"],
)
def test_placeholders_and_echoes_never_reach_a_file(make_env, model_server, bad: dict) -> None:
    env = make_env(server=model_server)
    before = {rel: env.text(rel) for rel in ("MEMORY.md", "PROFILE.md")}
    model_server.reply_json(bad)
    model_server.reply_json(bad)  # the repair round trip gets the same again
    env.warm()
    env.turn("c1", "I have been learning the cello for two years now.")
    env.idle()
    run = env.runs()[-1]
    assert run["outcome"] == "error" and run["error_kind"] == "invalid_output", run
    assert {rel: env.text(rel) for rel in before} == before
    assert "..." not in env.daily() and "<" not in env.daily()
    assert "placeholder" in model_server.chat_requests[-1].prompt_text or "repeats the instructions" in \
        model_server.chat_requests[-1].prompt_text


def test_an_edit_citing_no_shown_message_is_sent_back(make_env, model_server) -> None:
    env = make_env(server=model_server)
    model_server.reply_json(edits_answer([{"op": "add", "section": "Hobbies", "text": "plays the cello",
                                           "evidence": ["99999"]}]))
    model_server.responder = lambda body: edits_answer([{"op": "add", "section": "Hobbies", "text": "plays the cello",
                                                         "evidence": _new_ids(model_server)[:1]}])
    env.warm()
    env.turn("c1", "I have been learning the cello for two years now.")
    env.idle()
    assert env.runs()[-1]["outcome"] == "updated"
    assert "are not NEW message ids shown" in model_server.chat_requests[1].prompt_text
    assert "- plays the cello" in env.body("MEMORY.md")


def test_whole_body_answers_still_pass_the_shrink_guard(make_env, model_server) -> None:
    env = make_env(server=model_server)
    big = MEMORY + "".join(f"\n## T{i}\n- a fact worth keeping, number {i}\n" for i in range(30))
    assert len(big) > SHRINK_GUARD_MIN_CHARS
    snap = env.store.read(AGENT, "MEMORY.md")
    env.store.write(AGENT, "MEMORY.md", big, expected_sha=snap.sha, actor="person")
    model_server.reply_json(answer(memory="## Preferences\n- prefers light mode\n"))
    env.warm()
    env.turn("c1", "I have been learning the cello for two years now.")
    env.idle()
    assert env.runs()[-1]["outcome"] == "error"
    assert env.body("MEMORY.md") == big


# -- a remember request is never lost ---------------------------------------------------------------------


NO_UPDATE = {"should_update": False, "reason": "nothing new", "daily_entry": None}
REQUEST = "Please remember that my locker code is in the blue notebook."


def test_no_update_to_a_remember_request_is_a_failed_run_that_is_retried(make_env, model_server, clock) -> None:
    env = make_env(server=model_server)
    model_server.reply_json(NO_UPDATE)
    model_server.reply_json(NO_UPDATE)
    env.turn("c1", REQUEST)
    env.idle()
    run = env.runs()[-1]
    assert run["outcome"] == "error" and run["error_kind"] == "invalid_output", run
    assert "explicitly asked to remember" in model_server.chat_requests[1].prompt_text
    status = env.svc.status()
    assert status["buckets"][0]["pending_conversations"] == ["c1"]
    assert status["buckets"][0]["next_run"] is not None  # a retry without a new trigger
    # The retry, when its time comes, records it.
    model_server.responder = lambda body: edits_answer(
        [{"op": "add", "section": "Notes", "text": "locker code is in the blue notebook",
          "evidence": _new_ids(model_server)[:1]}])
    clock.advance(timedelta(milliseconds=remember.RETRY_DELAYS_MS[0] + 1))
    env.svc.run_due()
    env.idle()
    assert env.runs()[-1]["outcome"] == "updated"
    assert "blue notebook" in env.body("MEMORY.md")
    assert env.svc.status()["buckets"][0]["pending_conversations"] == []


def test_after_the_retries_the_request_is_kept_as_said(make_env, model_server, clock) -> None:
    env = make_env(server=model_server)
    model_server.default = model_server.default.__class__(content='{"should_update": false, "reason": "no"}')
    env.turn("c1", REQUEST)
    env.idle()
    for delay in remember.RETRY_DELAYS_MS:
        clock.advance(timedelta(milliseconds=delay + 1))
        env.svc.run_due()
        env.idle()
    runs = env.runs()
    assert [r["outcome"] for r in runs] == ["error", "error", "updated"], runs
    assert runs[-1]["error_kind"] == remember.ERROR_KIND
    daily = env.daily()
    assert remember.TITLE in daily and "my locker code is in the blue notebook" in daily
    assert "unprocessed" in daily
    assert env.svc.status()["buckets"][0]["pending_conversations"] == []
    assert env.body("MEMORY.md") == env.store.read(AGENT, "MEMORY.md").body  # nothing else touched


def test_a_timeout_on_a_remember_request_is_retried_too(make_env, model_server, clock) -> None:
    env = make_env(server=model_server)
    model_server.server_error(500)
    model_server.server_error(500)
    env.turn("c1", REQUEST)
    env.idle()
    assert env.runs()[-1]["outcome"] == "error"
    assert env.svc.status()["buckets"][0]["next_run"] is not None


def test_a_remember_request_already_recorded_may_answer_no_update(make_env, model_server) -> None:
    env = make_env(server=model_server)
    snap = env.store.read(AGENT, "MEMORY.md")
    env.store.write(AGENT, "MEMORY.md", snap.text + "\n## Notes\n- my locker code is in the blue notebook\n",
                    expected_sha=snap.sha, actor="person")
    model_server.reply_json(NO_UPDATE)
    env.turn("c1", REQUEST)
    env.idle()
    assert env.runs()[-1]["outcome"] == "no_change"
    assert len(model_server.chat_requests) == 1


@pytest.mark.parametrize("text", ['{"should_update": false, "reason": "..."}', "...", "- ...\n- ...", "…",
                                  "Question: How should the billing export work? " + "Details follow. " * 30])
def test_a_window_summary_that_is_json_or_placeholders_is_refused(text: str) -> None:
    from mateclaw_mem.memory.context.summary_checks import summary_problem

    assert summary_problem(text, 300) is not None
    assert summary_problem("Dana asked for a Postgres migration plan; we agreed on 16.", 300) is None
