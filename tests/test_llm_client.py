from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from mateclaw_mem.errors import ConfigError, ModelError
from mateclaw_mem.llm.client import ModelClient
from mateclaw_mem.llm.jsonparse import JSONExtractError, extract_json_object
from mateclaw_mem.llm.prompts.extraction import ExtractionResult
from mateclaw_mem.llm.usage import UsageLog
from mateclaw_mem.settings import load_settings
from tests.support.model_server import ModelServer, estimate_tokens

MSGS = [{"role": "user", "content": "Answer in JSON please."}]


class Answer(BaseModel):
    a: int
    b: str = ""


@pytest.fixture
def usage(tmp_path: Path) -> UsageLog:
    log = UsageLog(tmp_path / ".mateclaw" / "log.db")
    yield log
    log.close()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def client(model_server: ModelServer, usage: UsageLog, sleeps: list[float]) -> ModelClient:
    c = ModelClient(
        base_url=model_server.base_url, model="test-model", timeout_seconds=2, max_retries=2, usage=usage,
        backoff_base=0.001, retry_after_cap=0.05, sleep=sleeps.append,
    )
    yield c
    c.close()


def test_chat_returns_text_and_records_usage(client: ModelClient, model_server: ModelServer, usage: UsageLog) -> None:
    model_server.reply("hello there")
    result = client.chat(MSGS, step="unit")
    assert result.text == "hello there"
    assert result.completion_tokens == estimate_tokens("hello there")
    assert result.prompt_tokens > 0
    summary = usage.summary()
    assert summary["calls"] == 1 and summary["ok"] == 1
    assert summary["by_step"]["unit"]["prompt_tokens"] == result.prompt_tokens
    req = model_server.chat_requests[0]
    assert req.body["model"] == "test-model" and req.body["messages"] == MSGS
    assert req.path == "/v1/chat/completions"


def test_json_in_fences_with_prose_is_accepted(client: ModelClient, model_server: ModelServer) -> None:
    model_server.reply('Sure! Here it is:\n```json\n{"a": 3, "b": "x"}\n```\nAnything else?')
    assert client.chat_json(MSGS, Answer, step="unit") == Answer(a=3, b="x")
    assert model_server.chat_requests[0].body["response_format"] == {"type": "json_object"}


def test_one_repair_retry_tells_the_model_what_was_wrong(client: ModelClient, model_server: ModelServer) -> None:
    model_server.reply("I think a is three")
    model_server.reply_json({"a": 3})
    assert client.chat_json(MSGS, Answer, step="unit").a == 3
    reqs = model_server.chat_requests
    assert len(reqs) == 2
    repair = reqs[1].messages
    assert repair[-2] == {"role": "assistant", "content": "I think a is three"}
    assert "could not be used" in repair[-1]["content"] and "JSON" in repair[-1]["content"]


def test_invalid_twice_is_invalid_output(client: ModelClient, model_server: ModelServer, usage: UsageLog) -> None:
    model_server.reply("not json")
    model_server.reply_json({"a": "three"})  # wrong type
    with pytest.raises(ModelError) as exc:
        client.chat_json(MSGS, Answer, step="unit")
    assert exc.value.kind == "invalid_output" and not exc.value.retryable
    assert "a:" in exc.value.message
    assert len(model_server.chat_requests) == 2
    assert set(usage.summary()["by_step"]) == {"unit", "unit.repair"}


def test_wrong_types_are_rejected_by_validation(client: ModelClient, model_server: ModelServer) -> None:
    model_server.reply_json({"should_update": "maybe", "memory_update": ["a", "b"]})
    model_server.reply_json({"should_update": "maybe", "memory_update": ["a", "b"]})
    with pytest.raises(ModelError) as exc:
        client.chat_json(MSGS, ExtractionResult, step="extraction")
    assert exc.value.kind == "invalid_output"
    assert "should_update" in model_server.chat_requests[1].messages[-1]["content"]


def test_a_one_megabyte_memory_update_is_invalid_output(client: ModelClient, model_server: ModelServer) -> None:
    huge = {"should_update": True, "reason": "x", "memory_update": "m" * 1_000_000}
    model_server.reply_json(huge)
    model_server.reply_json(huge)
    with pytest.raises(ModelError) as exc:
        client.chat_json(MSGS, ExtractionResult, step="extraction")
    assert exc.value.kind == "invalid_output" and "memory_update" in exc.value.message


def test_retries_on_429_and_500_then_succeeds(
    client: ModelClient, model_server: ModelServer, usage: UsageLog, sleeps: list[float]
) -> None:
    model_server.rate_limited()
    model_server.server_error(500)
    model_server.reply("ok")
    assert client.chat(MSGS, step="unit").text == "ok"
    assert len(model_server.chat_requests) == 3
    assert len(sleeps) == 2
    summary = usage.summary()
    assert summary["calls"] == 3 and summary["errors"] == 2
    assert summary["last_error"]["error_kind"] == "server"


def test_retry_after_is_honoured_up_to_the_cap(client: ModelClient, model_server: ModelServer, sleeps: list[float]) -> None:
    model_server.rate_limited(retry_after=0.02)
    model_server.rate_limited(retry_after=600)
    model_server.reply("ok")
    client.chat(MSGS, step="unit")
    assert sleeps == [0.02, 0.05]


def test_retries_are_bounded(client: ModelClient, model_server: ModelServer) -> None:
    for _ in range(5):
        model_server.rate_limited()
    with pytest.raises(ModelError) as exc:
        client.chat(MSGS, step="unit")
    assert exc.value.kind == "rate_limit" and exc.value.retryable
    assert len(model_server.chat_requests) == 3  # 1 + max_retries


def test_a_timeout_is_final_for_the_call(model_server: ModelServer, usage: UsageLog) -> None:
    # A timed-out generation may still run on the server: asking again would stack a second one.
    c = ModelClient(base_url=model_server.base_url, model="m", timeout_seconds=0.3, max_retries=2, usage=usage,
                    backoff_base=0.001)
    model_server.hang(10)
    model_server.reply("too late")
    with pytest.raises(ModelError) as exc:
        c.chat(MSGS, step="unit")
    assert exc.value.kind == "timeout" and exc.value.retryable  # worth trying later, not now
    assert "0.3s" in exc.value.message
    assert len(model_server.chat_requests) == 1 and model_server.pending() == 1
    assert usage.summary()["by_step"]["unit"]["errors"] == 1
    c.close()


def test_context_too_large_is_not_retried(client: ModelClient, model_server: ModelServer) -> None:
    model_server.context_too_large()
    with pytest.raises(ModelError) as exc:
        client.chat(MSGS, step="unit")
    assert exc.value.kind == "context_too_large" and not exc.value.retryable
    assert len(model_server.chat_requests) == 1


def test_auth_error(client: ModelClient, model_server: ModelServer) -> None:
    model_server.error(401, "Incorrect API key provided", code="invalid_api_key")
    with pytest.raises(ModelError) as exc:
        client.chat(MSGS, step="unit")
    assert exc.value.kind == "auth" and not exc.value.retryable


def test_malformed_http_body_is_a_retryable_server_error(client: ModelClient, model_server: ModelServer) -> None:
    model_server.raw_body("<html>bad gateway</html>")
    model_server.reply("ok")
    assert client.chat(MSGS, step="unit").text == "ok"
    assert len(model_server.chat_requests) == 2


def test_server_without_response_format_falls_back_to_plain_prompting(usage: UsageLog) -> None:
    with ModelServer(reject_response_format=True) as server:
        c = ModelClient(base_url=server.base_url, model="m", timeout_seconds=2, usage=usage)
        server.reply_json({"a": 1})
        server.reply_json({"a": 2})
        assert c.chat_json(MSGS, Answer, step="unit").a == 1
        assert c.chat_json(MSGS, Answer, step="unit").a == 2
        formats = [r.body.get("response_format") for r in server.chat_requests]
        assert formats == [{"type": "json_object"}, None, None]  # learnt once
        c.close()


def test_json_mode_off_never_sends_response_format(model_server: ModelServer) -> None:
    c = ModelClient(base_url=model_server.base_url, model="m", json_mode="off")
    model_server.reply_json({"a": 1})
    c.chat_json(MSGS, Answer, step="unit")
    assert "response_format" not in model_server.chat_requests[0].body
    c.close()


def test_embed(client: ModelClient, model_server: ModelServer, usage: UsageLog) -> None:
    vectors = client.embed(["alpha", "beta", "alpha"])
    assert len(vectors) == 3 and len(vectors[0]) == 16
    assert vectors[0] == vectors[2] != vectors[1]
    body = model_server.requests[-1].body
    assert model_server.requests[-1].path == "/v1/embeddings" and body["input"] == ["alpha", "beta", "alpha"]
    assert usage.summary()["by_step"]["embed"]["calls"] == 1


def test_from_settings_reads_the_model_section(model_server: ModelServer, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TEST_MODEL_KEY", "sk-test-key-value-for-the-header-0000")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("", encoding="utf-8")
    settings = load_settings(cfg, tmp_path / "ws", {"model": {
        "base_url": model_server.base_url, "model": "qwen", "api_key_env": "TEST_MODEL_KEY", "json_mode": "off"}})
    c = ModelClient.from_settings(settings)
    model_server.reply("hi")
    c.chat(MSGS, step="unit")
    req = model_server.chat_requests[0]
    assert req.body["model"] == "qwen"
    assert req.headers.get("authorization") == "Bearer sk-test-key-value-for-the-header-0000"
    c.close()
    with pytest.raises(ConfigError):
        ModelClient.from_settings(load_settings(cfg, tmp_path / "ws"))


def test_models_endpoint_and_request_recording(model_server: ModelServer) -> None:
    import urllib.request

    with urllib.request.urlopen(model_server.base_url + "/models") as resp:
        data = json.loads(resp.read())
    assert data["data"][0]["id"] == "test-model"
    assert model_server.requests[-1].method == "GET"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('<think>hmm {"a": 0}</think>\n{"a": 2}', {"a": 2}),
        ('Result: {"a": 3} -- done', {"a": 3}),
        ('```\n{"a": 4}\n```', {"a": 4}),
    ],
)
def test_extract_json_object(text: str, expected: dict) -> None:
    assert extract_json_object(text) == expected


@pytest.mark.parametrize("text", ["", "no json here", "[1, 2]", '{"a": '])
def test_extract_json_object_errors(text: str) -> None:
    with pytest.raises(JSONExtractError):
        extract_json_object(text)
