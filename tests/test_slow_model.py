"""A slow or confused model never stalls or poisons the prompt (issue 20, points 5 and 6): the
assembled prompt alternates roles after a window summary, a summary not ready in time is finished
in the background, an echoed or placeholder "summary" is rejected, and `summarize` over HTTP answers
202 with a status URL when the run outlasts a short wait."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from mateclaw_mem.llm.client import ModelClient
from mateclaw_mem.llm.prompts import summary as summary_prompt
from mateclaw_mem.llm.roles import roles_alternate
from mateclaw_mem.memory.context.summary_checks import summary_problem
from mateclaw_mem.memory.context.window import SUMMARY_HEADER, Summarizer, WindowDefense
from mateclaw_mem.settings import WindowSettings
from tests.support.model_server import Answer, ModelServer
from tests.support.server import ApiServer, daemon_services

SYSTEM = [{"role": "system", "content": "You are helpful."}]


def _history(pairs: int, size: int = 400) -> list[dict[str, Any]]:
    out = []
    for i in range(pairs):
        out.append({"role": "user", "content": f"question {i}: " + "q" * size})
        out.append({"role": "assistant", "content": f"answer {i}: " + "a" * size})
    return out


def _defense(clock: Any, *, client: ModelClient | None = None, wait_ms: int = 1500) -> WindowDefense:
    settings = WindowSettings(default_max_input_tokens=6000, summary_max_tokens=100, summary_wait_ms=wait_ms)
    return WindowDefense(settings, Summarizer(clock, model=lambda: client, max_tokens=100))


def _client(server: ModelServer) -> ModelClient:
    return ModelClient(base_url=server.base_url, model="test-model", max_retries=0, timeout_seconds=30)


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _assert_well_formed(messages: list[dict[str, Any]]) -> None:
    assert roles_alternate(messages), [m["role"] for m in messages]
    assert messages[0]["role"] == "system" and all(m["role"] != "system" for m in messages[1:])


# -- alternation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["rules", "model"])
def test_after_a_summary_no_two_messages_share_a_role(clock, model_server, mode) -> None:
    client = _client(model_server) if mode == "model" else None
    model_server.default = Answer(content="The person asked about q; the assistant answered a.")
    d = _defense(clock, client=client)
    hist = _history(30)
    w = d.fit(SYSTEM, hist, {"role": "user", "content": "and now?"})
    assert w.stage == 1 and w.summary_source == mode
    _assert_well_formed(w.messages)
    # The summary joined the tail's first user message (the tail starts with a user turn).
    joined = w.messages[1]["content"]
    assert joined.startswith(SUMMARY_HEADER.format(n=w.summarised) + w.summary)
    assert joined.endswith(hist[w.summarised]["content"]) and hist[w.summarised]["role"] == "user"
    assert w.messages[-1] == {"role": "user", "content": "and now?"}
    # A history ending with a user message: the current one joins it rather than follow it.
    w = d.fit(SYSTEM, [*hist, {"role": "user", "content": "hello?"}], {"role": "user", "content": "anyone?"})
    _assert_well_formed(w.messages)
    assert w.messages[-1]["content"].endswith("hello?\n\nanyone?")
    if client is not None:
        client.close()


def test_the_assembled_context_alternates_in_the_services(services) -> None:
    services.store.ensure_agent("default")
    ctx = services.context.build("default", history=_history(40, size=2000), current="the question",
                                 budget=20_000)
    assert ctx.window is not None and ctx.window.stage == 1 and ctx.window.summary_source == "rules"
    _assert_well_formed(ctx.messages)
    assert "--- AGENTS.md ---" in ctx.messages[0]["content"]
    assert ctx.as_dict()["window"]["summary_source"] == "rules"


# -- a slow model ---------------------------------------------------------------------------------


def test_a_slow_summary_is_finished_in_the_background_for_the_next_turn(clock, model_server) -> None:
    client = _client(model_server)
    d = _defense(clock, client=client, wait_ms=200)
    released = threading.Event()

    def slow(_body: dict[str, Any]) -> Answer:
        released.wait(30)  # answers only once the test has seen the first assembly return
        return Answer(content="MODEL SUMMARY one")

    model_server.responder = slow
    hist = _history(30)
    first = d.fit(SYSTEM, hist, {"role": "user", "content": "next"})
    assert first.stage == 1 and first.summary_source == "rules (model not ready)"
    assert "- user: question 0:" in first.summary and any("not ready" in n for n in first.notes)
    _assert_well_formed(first.messages)
    again = d.fit(SYSTEM, hist, {"role": "user", "content": "next"})  # still computing: not asked twice
    assert again.summary_source == "rules (model not ready)"
    released.set()
    wait_for(lambda: d.summarizer.calls >= 1 and "MODEL SUMMARY" in (
        d.fit(SYSTEM, hist, {"role": "user", "content": "next"}).summary or ""), "the background summary")
    later = d.fit(SYSTEM, hist, {"role": "user", "content": "next"})
    assert later.summary_source == "model" and later.summary == "MODEL SUMMARY one"
    assert len(model_server.chat_requests) == 1  # one computation for the same messages

    # The conversation grows by a turn: its previous model summary stands in (plus a rules digest of
    # what it does not cover) while the new one is computed.
    released.clear()
    grown = [*hist, {"role": "user", "content": "question 30"}, {"role": "assistant", "content": "answer 30"}]
    w = d.fit(SYSTEM, grown, {"role": "user", "content": "next"})
    assert w.summary_source == "model (previous)" and w.summary.startswith("MODEL SUMMARY one")
    assert "Since then:" in w.summary and "question 25" in w.summary
    _assert_well_formed(w.messages)
    released.set()
    wait_for(lambda: len(model_server.chat_requests) == 2 and d.summarizer.calls == 2, "the second summary")
    assert d.fit(SYSTEM, grown, {"role": "user", "content": "next"}).summary_source == "model"
    client.close()


def test_a_hanging_model_does_not_hold_the_prompt(clock, model_server) -> None:
    client = ModelClient(base_url=model_server.base_url, model="test-model", max_retries=0, timeout_seconds=2)
    d = _defense(clock, client=client, wait_ms=100)
    model_server.hang(5)
    w = d.fit(SYSTEM, _history(30), {"role": "user", "content": "next"})
    assert w.stage == 1 and w.summary_source == "rules (model not ready)"
    d.summarizer.close()
    client.close()


# -- answers that are not summaries ---------------------------------------------------------------


@pytest.mark.parametrize("answer", [
    summary_prompt.SYSTEM_PROMPT.format(max_tokens=100),
    "Write a concise summary in the language of the conversation: who asked for what, facts and numbers the\n"
    "person gave, decisions taken, open questions and commitments, and anything the assistant promised to do.\n"
    "Leave out greetings and small talk. Do not invent anything.",
    "...",
    "…",
    "   ",
])
def test_an_echo_or_placeholder_is_rejected_and_not_cached(clock, model_server, answer) -> None:
    client = _client(model_server)
    d = _defense(clock, client=client)
    model_server.reply(answer)
    model_server.reply("A real summary: the person asked about q.")
    hist = _history(30)
    w = d.fit(SYSTEM, hist, {"role": "user", "content": "next"})
    assert w.summary_source == "rules (model answer rejected)"
    assert "- user: question 0:" in w.summary and any("rejected" in n for n in w.notes)
    assert d.summarizer.calls == 0  # nothing cached: the next assembly asks the model again
    assert d.fit(SYSTEM, hist, {"role": "user", "content": "next"}).summary == "A real summary: the person asked about q."
    client.close()


def test_a_real_summary_is_not_mistaken_for_an_echo() -> None:
    assert summary_problem("The person is planning a trip to Lisbon; the assistant promised a packing list.",
                           100) is None
    assert summary_problem("- user asked for decisions taken on the budget", 100) is None


# -- summarize over HTTP --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow_api(tmp_path_factory) -> Iterator[tuple[httpx.Client, ModelServer]]:
    from mateclaw_mem.api.app import create_app

    with ModelServer() as model:
        workspace = tmp_path_factory.mktemp("slow-api")
        services = daemon_services(workspace, model={"base_url": model.base_url, "model": "test-model",
                                                     "timeout_seconds": 30, "max_retries": 0})
        services.seed_agents()
        services.build()
        services.extraction.start()
        try:
            with ApiServer(create_app(services, mcp=False)) as server, \
                    httpx.Client(base_url=server.url, timeout=30) as http:
                http.services = services  # type: ignore[attr-defined]
                yield http, model
        finally:
            services.close()


MEM = "/api/v1/memory/default"
NO_UPDATE = {"should_update": False, "reason": "nothing worth keeping"}


def test_summarize_answers_202_and_the_status_url_reaches_the_outcome(slow_api) -> None:
    http, model = slow_api
    release = threading.Event()

    def slow(_body: dict[str, Any]) -> Answer:
        release.wait(30)  # longer than the request's wait, whatever the machine's speed
        return Answer(content=NO_UPDATE)

    model.responder = slow
    try:
        r = http.post(f"{MEM}/conversations/slow1/turns", json={"user": "We talked about the weather.", "assistant": "Ok."})
        assert r.status_code == 202, r.text
        r = http.post(f"{MEM}/summarize/slow1")
        assert r.status_code == 202, r.text
        accepted = r.json()
        assert accepted["status"] == "running" and accepted["status_url"].endswith(accepted["run_id"])
        assert r.headers["location"] == accepted["status_url"]
        status = http.get(accepted["status_url"])
        assert status.status_code == 200, status.text
        assert status.json()["run_id"] == accepted["run_id"] and status.json()["status"] == "running"
        assert status.json()["outcome"] is None
        release.set()
        wait_for(lambda: http.get(accepted["status_url"]).json()["status"] == "done", "the run to finish")
        done = http.get(accepted["status_url"]).json()
        assert done["run_id"] == accepted["run_id"] and done["outcome"] in ("no_change", "updated")
        runs = http.services.extraction.runs(agent="default")  # type: ignore[attr-defined]
        assert accepted["run_id"] in [run["run_id"] for run in runs]  # recorded in log.db under that id
    finally:
        model.responder = None
        release.set()


def test_summarize_that_finishes_in_time_answers_200_and_unknown_runs_are_404(slow_api) -> None:
    http, model = slow_api
    model.default = Answer(content=NO_UPDATE)
    http.post(f"{MEM}/conversations/fast1/turns", json={"user": "It rained today.", "assistant": "Ok."})
    r = http.post(f"{MEM}/summarize/fast1")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["outcome"] in ("no_change", "updated")
    # A finished run's id answers from the log too.
    found = http.get(f"{MEM}/summarize/runs/{body['run_id']}")
    assert found.status_code == 200 and found.json()["status"] == "done", found.text
    missing = http.get(f"{MEM}/summarize/runs/ext-nope")
    assert missing.status_code == 404 and "ext-nope" in missing.text
    assert http.post(f"{MEM}/summarize/never-logged").status_code == 404
