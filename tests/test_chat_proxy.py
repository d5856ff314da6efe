"""The OpenAI-compatible chat proxy (issue 37, point 1), end to end: the real `openai` SDK talks to a
real daemon (uvicorn) whose upstream is the scripted OpenAI-compatible server. Each test checks that
memory reached the upstream's request, the answer reached the client unchanged, and the turn was
learned (a fact said in one turn is in PROFILE.md and in the memory of the next turn's request)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from mateclaw_mem.api.app import create_app
from mateclaw_mem.memory.proxy.service import MEMORY_HEADING
from tests.support.model_server import Answer, ModelServer
from tests.support.server import ApiServer, daemon_services


@pytest.fixture
def upstream() -> Iterator[ModelServer]:
    with ModelServer(default="Happy to help!", model="llama-local") as server:
        yield server


def _daemon(tmp_path: Path, upstream: ModelServer, window_tokens: int | None = None,
            **proxy: Any) -> tuple[Any, ApiServer]:
    agent = {"conversation": {"window": {"default-max-input-tokens": window_tokens}}} if window_tokens else {}
    services = daemon_services(
        tmp_path / "ws", timezone="UTC",
        proxy={"upstream": {"base-url": upstream.base_url, "model": "llama-local", **proxy}},
        mate={"memory": {"cooldown-minutes": 0, "min-messages-for-summarize": 2,
                         "provider-prefetch-timeout-ms": 30000, "provider-prefetch-total-budget-ms": 60000},
              **({"agent": agent} if agent else {})},
    )
    services.seed_agents()
    services.build()
    services.extraction.start()
    return services, ApiServer(create_app(services, mcp=False)).start()


@pytest.fixture
def daemon(tmp_path: Path, upstream: ModelServer) -> Iterator[tuple[Any, ApiServer]]:
    services, server = _daemon(tmp_path, upstream)
    try:
        yield services, server
    finally:
        server.stop()
        services.close()


def _client(server: ApiServer, path: str = "/v1", **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + path, api_key="unused", max_retries=0, timeout=30, **kw)


def _wait(pred: Any, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def _profile(services: Any, agent: str = "default", owner: str | None = None) -> str:
    return services.store.read(agent, "PROFILE.md", owner=owner).body


def _chat_requests(upstream: ModelServer) -> list[Any]:
    return [r for r in upstream.requests if r.path.endswith("/chat/completions")]


def test_a_fact_said_in_turn_one_is_learned_and_in_the_memory_of_turn_two(daemon, upstream) -> None:
    services, server = daemon
    client = _client(server)
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a terse assistant."},
                                     {"role": "user", "content": "My name is Priya and I live in Lyon."}]
    first = client.chat.completions.create(model="llama-local", messages=history)  # type: ignore[arg-type]
    assert first.choices[0].message.content == "Happy to help!"  # the upstream's answer, unchanged
    sent = _chat_requests(upstream)[-1].messages
    assert sent[0]["role"] == "system" and sent[0]["content"].startswith("You are a terse assistant.")
    assert MEMORY_HEADING in sent[0]["content"] and "--- AGENTS.md ---" in sent[0]["content"]
    assert _wait(lambda: "Lyon" in _profile(services)), _profile(services)
    history += [{"role": "assistant", "content": "Happy to help!"},
                {"role": "user", "content": "Where do I live again?"}]
    r = client.chat.completions.with_raw_response.create(model="llama-local", messages=history)  # type: ignore[arg-type]
    assert r.headers.get("x-mateclaw-turn")  # what it knew when it answered
    second = _chat_requests(upstream)[-1].messages
    assert "Lyon" in second[0]["content"]  # learned in turn 1, in the memory of turn 2
    assert [m["content"] for m in second[1:]] == [m["content"] for m in history[1:]]  # the client's messages kept
    # The re-sent history was not logged twice: two user messages in one conversation (learned after
    # the answer, so waited for).
    def users() -> list[str]:
        return [m.content for m in services.log.since(0) if m.role == "user"]

    assert _wait(lambda: len(users()) == 2)
    time.sleep(0.2)
    assert users() == ["My name is Priya and I live in Lyon.", "Where do I live again?"]
    assert len({m.conversation_id for m in services.log.since(0)}) == 1


def test_streaming_relays_every_chunk_and_learns_the_streamed_answer(daemon, upstream) -> None:
    services, server = daemon
    upstream.push("I will remember that you prefer green tea over coffee, Priya.")
    stream = _client(server).chat.completions.create(
        model="llama-local", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Remember that I prefer green tea over coffee."}])
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "I will remember that you prefer green tea over coffee, Priya."
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0  # include_usage passed through
    assert _chat_requests(upstream)[-1].body["stream_options"] == {"include_usage": True}
    assert _wait(lambda: any("green tea" in m.content for m in services.log.since(0) if m.role == "assistant"))


def test_tool_calls_pass_through_untouched(daemon, upstream) -> None:
    _, server = daemon
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Lyon"}'}}
    upstream.push(Answer(content="", tool_calls=[call]))
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    out = _client(server).chat.completions.create(model="llama-local", tools=tools,  # type: ignore[arg-type]
                                                  messages=[{"role": "user", "content": "Weather in Lyon?"}])
    assert out.choices[0].finish_reason == "tool_calls"
    got = out.choices[0].message.tool_calls
    assert got is not None and got[0].function.name == "get_weather" and got[0].function.arguments == '{"city":"Lyon"}'
    assert _chat_requests(upstream)[-1].body["tools"] == tools
    # The tool's answer goes back as the client wrote it (tool_call_id kept).
    upstream.push("It is sunny in Lyon.")
    msgs = [{"role": "user", "content": "Weather in Lyon?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24C"}]
    done = _client(server).chat.completions.create(model="llama-local", tools=tools, messages=msgs)  # type: ignore[arg-type]
    assert done.choices[0].message.content == "It is sunny in Lyon."
    sent = _chat_requests(upstream)[-1].messages
    assert sent[-1] == msgs[-1] and sent[-2] == msgs[-2]


def test_upstream_errors_come_back_in_openais_shape_with_its_status(daemon, upstream) -> None:
    _, server = daemon
    upstream.error(429, "slow down")
    with pytest.raises(openai.RateLimitError) as caught:
        _client(server).chat.completions.create(model="llama-local", messages=[{"role": "user", "content": "hi"}])
    assert "slow down" in str(caught.value)


def test_an_upstream_that_hangs_or_streams_forever_is_bounded(tmp_path: Path, upstream: ModelServer) -> None:
    services, server = _daemon(tmp_path, upstream, **{"idle-timeout-seconds": 0.5, "timeout-seconds": 1.5})
    try:
        upstream.push(Answer(content="late", delay=5))
        with pytest.raises(openai.APIStatusError) as caught:
            _client(server).chat.completions.create(model="llama-local", messages=[{"role": "user", "content": "hi"}])
        assert caught.value.status_code == 504
        upstream.stream_forever(interval=0.05)
        stream = _client(server).chat.completions.create(model="llama-local", stream=True,
                                                         messages=[{"role": "user", "content": "tell me"}])
        with pytest.raises(openai.APIError) as ended:
            for _ in stream:
                pass
        assert "timeout-seconds" in str(ended.value)  # the stream ended, and said why
        # Counted by the stream's closing task, after the client has the error chunk: waited for.
        assert _wait(lambda: services.chat_proxy.stats.as_dict()["upstream_failures"] == 2)
        report = dict(services.status_reporters())["chat_proxy"]()
        assert report["upstream_failures"] == 2 and "timeout-seconds" in report["last_upstream_error"]
    finally:
        server.stop()
        services.close()


def test_a_client_that_leaves_a_stream_closes_it_at_the_upstream(tmp_path: Path, upstream: ModelServer) -> None:
    """A chat client that hangs up mid-stream: the daemon stops reading the upstream and hangs up
    there too (nothing keeps generating, or holds a connection, for nobody), and goes on serving."""
    services, server = _daemon(tmp_path, upstream)
    try:
        for n in range(1, 4):
            upstream.stream_forever(interval=0.02)
            stream = _client(server).chat.completions.create(model="llama-local", stream=True,
                                                             messages=[{"role": "user", "content": f"story {n}"}])
            next(iter(stream))
            stream.close()
            assert _wait(lambda n=n: upstream.disconnects == n), upstream.disconnects
        upstream.push("still here")
        answer = _client(server).chat.completions.create(model="llama-local", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "still here"
    finally:
        server.stop()
        services.close()


def test_the_daemons_stop_ends_open_answers_and_refuses_later_ones_as_no_upstream_failure(
        tmp_path: Path, upstream: ModelServer) -> None:
    """`Upstream.end_calls` (the daemon's stop, MODEL_CALL_GRACE after the signal): a stream still
    open ends with an error event saying why, a later chat is answered 503 at once without reaching
    the upstream, and neither counts as the upstream failing."""
    services, server = _daemon(tmp_path, upstream)
    try:
        upstream.stream_forever(interval=0.05)
        stream = _client(server).chat.completions.create(model="llama-local", stream=True,
                                                         messages=[{"role": "user", "content": "tell me"}])
        chunks = iter(stream)
        next(chunks)
        assert services.chat_proxy.upstream.end_calls() == 1
        with pytest.raises(openai.APIError) as ended:
            for _ in chunks:
                pass
        assert "mateclaw-mem is stopping" in str(ended.value)
        sent = len(_chat_requests(upstream))
        with pytest.raises(openai.InternalServerError) as refused:
            _client(server).chat.completions.create(model="llama-local", messages=[{"role": "user", "content": "hi"}])
        assert refused.value.status_code == 503 and "mateclaw-mem is stopping" in str(refused.value)
        assert len(_chat_requests(upstream)) == sent
        time.sleep(0.3)  # (the stream's closing task counts failures after the client has its last chunk)
        assert services.chat_proxy.stats.as_dict()["upstream_failures"] == 0
    finally:
        server.stop()
        services.close()


def test_memoryless_requests_are_answered_but_never_learned(daemon, upstream) -> None:
    services, server = daemon
    _client(server, default_headers={"X-Mateclaw-Memoryless": "true"}).chat.completions.create(
        model="llama-local", messages=[{"role": "user", "content": "My name is Zed and I work at Initech."}])
    sent = _chat_requests(upstream)[-1].messages[0]["content"]
    assert "--- AGENTS.md ---" in sent and "--- PROFILE.md ---" not in sent  # identity only
    time.sleep(0.5)
    assert "Initech" not in _profile(services)
    assert all(m.memoryless for m in services.log.since(0))


def test_two_agents_and_two_owners_are_kept_apart(tmp_path: Path, upstream: ModelServer) -> None:
    services, server = _daemon(tmp_path, upstream)
    try:
        services.store.ensure_agent("work")
        _client(server, "/agents/work/v1").chat.completions.create(
            model="llama-local", messages=[{"role": "user", "content": "My name is Ada and I work at Initech."}])
        assert _wait(lambda: "Initech" in _profile(services, "work"))
        assert "Initech" not in _profile(services, "default")
        _client(server).chat.completions.create(model="llama-local", user="u1",
                                                messages=[{"role": "user", "content": "Where do I work?"}])
        assert "Initech" not in _chat_requests(upstream)[-1].messages[0]["content"]  # the other agent's memory
        assert _wait(lambda: {m.owner for m in services.log.since(0) if m.agent == "default"} == {"api:u1"})
    finally:
        server.stop()
        services.close()


def test_the_models_list_and_a_proxy_that_is_off(tmp_path: Path, daemon, upstream) -> None:
    _, server = daemon
    assert [m.id for m in _client(server).models.list()] == ["llama-local"]
    services = daemon_services(tmp_path / "off")
    services.seed_agents()
    with ApiServer(create_app(services, mcp=False)) as off:
        r = httpx.post(off.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 404 and "proxy.upstream.base-url" in r.json()["error"]["message"]
    services.close()
    r = httpx.post(server.url + "/v1/chat/completions", json={"messages": "hi"})
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]


def test_a_long_chat_is_fitted_by_the_window_defense_and_keeps_its_recent_turns(tmp_path: Path,
                                                                               upstream: ModelServer) -> None:
    services, server = _daemon(tmp_path, upstream, window_tokens=16000)
    try:
        messages: list[dict[str, Any]] = []
        for i in range(150):  # 300 messages of ~600 characters: ~45,000 tokens, over a 16k window
            messages += [{"role": "user", "content": f"turn {i}: " + "tell me more about the garden. " * 20},
                         {"role": "assistant", "content": f"answer {i}: " + "the garden is lovely. " * 25}]
        messages.append({"role": "user", "content": "And the last question: what about the roses?"})
        client = _client(server, default_headers={"X-Mateclaw-Conversation": "long-chat"})
        client.chat.completions.create(model="llama-local", messages=messages,  # type: ignore[arg-type]
                                       extra_body={"max_tokens": 100})
        sent = _chat_requests(upstream)[-1].messages
        assert len(sent) < len(messages)  # compacted ...
        assert sent[-1]["content"] == messages[-1]["content"]  # ... the question itself intact
        assert sent[-2]["content"] == messages[-2]["content"]  # ... and the recent tail verbatim
        assert not any(str(m["content"]).startswith("turn 0:") for m in sent)  # the oldest turns summarised
    finally:
        server.stop()
        services.close()


def test_memory_tools_the_model_calls_are_run_by_the_daemon_and_the_client_sees_the_final_answer(
        tmp_path: Path, upstream: ModelServer) -> None:
    services = daemon_services(
        tmp_path / "ws", timezone="UTC",
        proxy={"tools": True, "upstream": {"base-url": upstream.base_url, "model": "llama-local"}})
    services.seed_agents()
    services.build()
    server = ApiServer(create_app(services, mcp=False)).start()
    try:
        call = {"id": "call_m1", "type": "function",
                "function": {"name": "remember", "arguments": '{"type": "user", "key": "tea", "text": "Drinks oolong."}'}}
        upstream.push(Answer(content="", tool_calls=[call]), "Got it - oolong it is.")
        client_tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
        out = _client(server).chat.completions.create(model="llama-local", tools=client_tools,  # type: ignore[arg-type]
                                                      messages=[{"role": "user", "content": "I drink oolong."}])
        assert out.choices[0].message.content == "Got it - oolong it is."  # the final answer, no tool call left
        assert not out.choices[0].message.tool_calls
        first, second = _chat_requests(upstream)[-2:]
        offered = [t["function"]["name"] for t in first.body["tools"]]
        assert offered[0] == "get_weather" and {"remember", "search_memory", "memory_forget"} <= set(offered)
        assert second.messages[-1] == {"role": "tool", "tool_call_id": "call_m1", "content": second.messages[-1]["content"]}
        assert "tea" in second.messages[-1]["content"]
        assert "Drinks oolong." in services.store.read("default", "structured/user.md").body  # run by the daemon
        # A stream is answered whole after the rounds, then streamed back; bad arguments are the tool's error.
        bad = {"id": "call_m2", "type": "function", "function": {"name": "remember", "arguments": "not json"}}
        upstream.push(Answer(content="", tool_calls=[bad]), "Sorry, I could not save that.")
        chunks = list(_client(server).chat.completions.create(
            model="llama-local", stream=True, messages=[{"role": "user", "content": "Remember my cat."}]))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Sorry, I could not save that."
        assert "must be a JSON object" in _chat_requests(upstream)[-1].messages[-1]["content"]
    finally:
        server.stop()
        services.close()


def test_the_same_words_said_again_are_a_new_turn_and_a_regenerated_answer_is_not(daemon, upstream) -> None:
    services, server = daemon
    client = _client(server, default_headers={"X-Mateclaw-Conversation": "again"})
    history: list[dict[str, Any]] = [{"role": "user", "content": "Yes, go on."}]
    client.chat.completions.create(model="llama-local", messages=history)  # type: ignore[arg-type]
    history += [{"role": "assistant", "content": "Happy to help!"}, {"role": "user", "content": "Yes, go on."}]
    client.chat.completions.create(model="llama-local", messages=history)  # type: ignore[arg-type]
    client.chat.completions.create(model="llama-local", messages=history)  # type: ignore[arg-type] # regenerate

    def users() -> int:
        return sum(1 for m in services.log.messages("default", "chat-again") if m.role == "user")

    assert _wait(lambda: users() == 2)
    time.sleep(0.3)
    assert users() == 2  # said twice: two turns; the regenerated answer added none
