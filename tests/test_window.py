from __future__ import annotations

from datetime import timedelta

import pytest

from mateclaw_mem.errors import ModelError
from mateclaw_mem.llm.client import ModelClient
from mateclaw_mem.llm.roles import roles_alternate
from mateclaw_mem.memory.context.tokens import estimate_tokens, message_tokens, messages_tokens
from mateclaw_mem.memory.context.window import SUMMARY_HEADER, TAIL_SHARE, Summarizer, WindowDefense, reported_limit
from mateclaw_mem.settings import WindowSettings
from tests.support.model_server import messages_tokens as server_messages_tokens

SYSTEM = [{"role": "system", "content": "You are helpful."}]


def _history(pairs: int, size: int = 200) -> list[dict]:
    out = []
    for i in range(pairs):
        out.append({"role": "user", "content": f"question {i}: " + "q" * size})
        out.append({"role": "assistant", "content": f"answer {i}: " + "a" * size})
    return out


def _tail(w) -> list[dict]:
    """The verbatim tail of a stage-1 window (before the current message). The summary shares its
    message with the tail's first user message, so that message is split off it again here."""
    head = SUMMARY_HEADER.format(n=w.summarised) + w.summary + "\n\n"
    joined = w.messages[1]
    assert joined["role"] == "user" and joined["content"].startswith(head), joined["content"][:200]
    return [{"role": "user", "content": joined["content"][len(head):]}, *w.messages[2:-1]]


def _client(server) -> ModelClient:
    return ModelClient(base_url=server.base_url, model="test-model", max_retries=0, timeout_seconds=5)


def _defense(clock, *, budget: int = 2000, client=None, pairs: int = 2) -> WindowDefense:
    settings = WindowSettings(default_max_input_tokens=budget, compact_trigger_ratio=0.75,
                              preserve_recent_pairs=pairs, summary_max_tokens=100)
    return WindowDefense(settings, Summarizer(clock, model=lambda: client, max_tokens=100))


def test_token_estimate_is_documented_and_matches_the_model_server() -> None:
    assert estimate_tokens("abcdefgh") == 2 and estimate_tokens("abcdefghi") == 3
    assert estimate_tokens("用户喜欢跑步") == 6
    assert estimate_tokens("跑步 ok") == 2 + 1
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "用户喜欢周日早上跑步 and tea"}]
    assert messages_tokens(msgs) == server_messages_tokens(msgs)


def test_under_the_trigger_nothing_changes(clock) -> None:
    d = _defense(clock, budget=100_000)
    hist = _history(30)
    w = d.fit(SYSTEM, hist, {"role": "user", "content": "now"})
    assert w.stage == 0 and w.messages == [*SYSTEM, *hist, {"role": "user", "content": "now"}]


def test_stage1_rules_summary_is_a_user_message_and_keeps_the_recent_tail(clock) -> None:
    d = _defense(clock, budget=6000)
    hist = _history(30, size=400)  # ~6,400 tokens: past 75% of 6,000
    current = {"role": "user", "content": "and now?"}
    w = d.fit(SYSTEM, hist, current)
    assert w.stage == 1
    summary = w.messages[1]
    assert summary["role"] == "user" and summary["content"].startswith("[Summary of the earlier part")
    assert all(m["role"] != "system" for m in w.messages[1:])
    assert roles_alternate(w.messages) and w.summary_source == "rules"
    tail = _tail(w)
    assert tail == hist[-len(tail):] and len(tail) >= 10 and tail[0]["role"] == "user"
    assert w.summarised == len(hist) - len(tail)
    assert "- user: question 0:" in w.summary  # deterministic digest: first lines, oldest first
    assert w.messages[-1] == current and w.tokens <= 6000
    assert d.fit(SYSTEM, hist, current).summary == w.summary  # deterministic


def test_tail_honours_preserve_recent_pairs_above_ten_messages(clock) -> None:
    d = _defense(clock, budget=8000, pairs=8)
    hist = _history(30, size=400)
    w = d.fit(SYSTEM, hist, {"role": "user", "content": "x"})
    assert w.stage == 1 and len(_tail(w)) == 16


def test_the_tail_is_as_many_recent_messages_as_fit_its_token_budget(clock) -> None:
    d = _defense(clock, budget=3000)
    hist = _history(120, size=20)  # ~2,400 tokens of short turns: past 75% of 3,000
    w = d.fit(SYSTEM, hist, {"role": "user", "content": "x"})
    tail = _tail(w)
    share = int(TAIL_SHARE * 0.75 * 3000)
    assert w.stage == 1 and len(tail) > 10  # short turns: more than the floor stays verbatim
    assert tail == hist[-len(tail):] and tail[0]["role"] == "user"
    assert messages_tokens(tail) - 2 <= share + message_tokens(tail[0])  # at most one message to keep the turn whole
    assert messages_tokens(hist[-len(tail) - 2:]) - 2 > share  # and one more turn would not have fitted


def test_the_tail_never_falls_below_protect_last_min_messages(clock) -> None:
    settings = WindowSettings(default_max_input_tokens=20_000, preserve_recent_pairs=0, protect_last_min_messages=6)
    d = WindowDefense(settings, Summarizer(clock, max_tokens=100))
    hist = _history(20, size=4000)  # each message far over the tail's token budget
    w = d.fit(SYSTEM, hist, {"role": "user", "content": "x"}, budget=20_000)
    assert w.stage == 1 and _tail(w)[-6:] == hist[-6:]


def test_stage1_model_summary_is_bounded_and_cached_for_30_minutes(clock, model_server) -> None:
    client = _client(model_server)
    d = _defense(clock, budget=6000, client=client)
    hist = _history(30, size=400)
    model_server.reply("The person asked thirty questions about q; the assistant answered with a.")
    w = d.fit(SYSTEM, hist, {"role": "user", "content": "next"})
    assert w.stage == 1 and w.summary.startswith("The person asked thirty questions")
    req = model_server.chat_requests[-1]
    assert req.body["max_tokens"] == 100 and "question 0:" in req.prompt_text
    assert "question 29:" not in req.prompt_text  # the recent tail is not summarised
    d.fit(SYSTEM, hist, {"role": "user", "content": "next"})
    clock.advance(timedelta(minutes=29))
    d.fit(SYSTEM, hist, {"role": "user", "content": "next"})
    assert len(model_server.chat_requests) == 1 and d.summarizer.calls == 1
    clock.advance(timedelta(minutes=2))
    model_server.reply("fresh summary")
    assert d.fit(SYSTEM, hist, {"role": "user", "content": "next"}).summary == "fresh summary"
    assert len(model_server.chat_requests) == 2
    client.close()


def test_stage2_on_context_too_large_keeps_the_last_two_turns_and_retries_once(clock, model_server) -> None:
    client = _client(model_server)
    d = _defense(clock, budget=100_000, client=client)  # far under the trigger: no summary
    hist = _history(12)
    current = {"role": "user", "content": "the question"}
    model_server.context_too_large(4096)
    model_server.reply("the answer")

    def send(messages):
        return client.chat(messages, step="chat").text

    answer, w = d.send_with_defense(SYSTEM, hist, current, send)
    assert answer == "the answer" and w.stage == 2
    reqs = model_server.chat_requests
    assert len(reqs) == 2  # no summary call in between: stage 2 stops calling the model for summaries
    assert len(reqs[0].messages) == 1 + 24 + 1
    assert reqs[1].messages == [*SYSTEM, *hist[-4:], current]
    client.close()


def test_stage3_after_a_second_refusal_drops_from_the_front_keeping_the_last_two(clock, model_server) -> None:
    client = _client(model_server)
    d = _defense(clock, budget=100_000, client=client)
    hist = _history(12, size=400)
    current = {"role": "user", "content": "the question"}
    model_server.context_too_large(4096)
    model_server.context_too_large(260)
    model_server.reply("finally")

    def send(messages):
        return client.chat(messages, step="chat").text

    answer, w = d.send_with_defense(SYSTEM, hist, current, send)
    assert answer == "finally" and w.stage == 3
    third = model_server.chat_requests[2].messages
    assert third[0] == SYSTEM[0] and third[-2:] == [hist[-1], current]
    assert len(third) < len(model_server.chat_requests[1].messages)
    assert reported_limit("This model's maximum context length is 4096 tokens. However") == 4096
    client.close()


def test_three_refusals_raise_and_other_errors_pass_through(clock, model_server) -> None:
    client = _client(model_server)
    d = _defense(clock, budget=100_000, client=client)

    def send(messages):
        return client.chat(messages, step="chat").text

    for _ in range(3):
        model_server.context_too_large(10)
    with pytest.raises(ModelError) as err:
        d.send_with_defense(SYSTEM, _history(6), {"role": "user", "content": "q"}, send)
    assert err.value.kind == "context_too_large" and len(model_server.chat_requests) == 3
    model_server.error(401, "bad key")
    with pytest.raises(ModelError) as err:
        d.send_with_defense(SYSTEM, _history(6), {"role": "user", "content": "q"}, send)
    assert err.value.kind == "auth" and len(model_server.chat_requests) == 4
    client.close()


def test_stage3_before_sending_when_the_summary_is_not_enough(clock) -> None:
    d = _defense(clock, budget=600)
    hist = _history(12, size=300)  # the 10-message tail alone is ~800 tokens
    current = {"role": "user", "content": "q"}
    w = d.fit(SYSTEM, hist, current)
    assert w.stage == 3 and w.tokens <= 600
    assert w.messages[0] == SYSTEM[0] and w.messages[-2:] == [hist[-1], current]
    assert w.summary is None and w.dropped > 0


def test_the_summary_never_replaces_the_last_two_messages_even_if_nothing_fits(clock) -> None:
    d = _defense(clock, budget=256)
    hist = [{"role": "user", "content": "u" * 4000}, {"role": "assistant", "content": "a" * 4000}]
    w = d.fit(SYSTEM, hist, {"role": "user", "content": "q" * 4000})
    assert w.messages[-2:] == [hist[-1], {"role": "user", "content": "q" * 4000}]
    assert any("still over budget" in n for n in w.notes)


def test_context_service_send_runs_the_defense_with_the_assembled_prompt(services, model_server) -> None:
    services.store.ensure_agent("default")
    client = _client(model_server)
    hist = _history(6)
    ctx = services.context.build("default", history=hist, current="the question")
    model_server.context_too_large()
    model_server.reply("ok")
    answer = services.context.send(ctx, lambda messages: client.chat(messages, step="chat").text)
    assert answer == "ok" and ctx.window.stage == 2
    sent = model_server.chat_requests[-1].messages
    assert sent[0]["role"] == "system" and "--- AGENTS.md ---" in sent[0]["content"]
    assert sent[1:] == [*hist[-4:], {"role": "user", "content": "the question"}] and ctx.messages == sent
    client.close()
