"""Every model call is bounded: answer tokens, wall-clock time, calls in flight; roles alternate."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.errors import ModelError
from mateclaw_mem.llm.bounds import CallBounds
from mateclaw_mem.llm.client import ModelClient
from mateclaw_mem.llm.roles import normalise_roles, roles_alternate
from mateclaw_mem.llm.usage import UsageLog
from mateclaw_mem.memory.extraction.service import ExtractionService
from mateclaw_mem.settings import load_settings
from mateclaw_mem.workspace.store import WorkspaceStore
from tests.support.model_server import ModelServer, estimate_tokens

MSGS = [{"role": "user", "content": "Say something."}]


class Answer(BaseModel):
    a: int


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


@pytest.fixture
def make_client(model_server: ModelServer) -> Iterator[Callable[..., ModelClient]]:
    made: list[ModelClient] = []

    def make(**kw: object) -> ModelClient:
        kw.setdefault("base_url", model_server.base_url)
        kw.setdefault("model", "test-model")
        kw.setdefault("timeout_seconds", 5)
        c = ModelClient(backoff_base=0.001, retry_after_cap=0.01, **kw)  # type: ignore[arg-type]
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def run_in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, dict[str, object]]:
    out: dict[str, object] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except Exception as exc:  # handed to the test's assertions
            out["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, out


# -- streaming, deadlines, shutdown ---------------------------------------------------------------


def test_chat_streams_and_reads_the_usage_chunk(make_client, model_server: ModelServer) -> None:
    model_server.reply("a streamed answer that is long enough to arrive in several chunks")
    result = make_client().chat(MSGS, step="unit")
    assert result.text == "a streamed answer that is long enough to arrive in several chunks"
    assert result.completion_tokens == estimate_tokens(result.text) and not result.usage_estimated
    body = model_server.chat_requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_a_server_that_streams_forever_is_stopped_at_the_deadline(make_client, model_server: ModelServer,
                                                                   tmp_path: Path) -> None:
    usage = UsageLog(tmp_path / "log.db")
    client = make_client(timeout_seconds=0.4, max_retries=2, usage=usage)
    model_server.stream_forever()
    with pytest.raises(ModelError) as exc:
        client.chat(MSGS, step="dream")
    assert exc.value.kind == "timeout" and "stream was closed" in exc.value.message
    assert len(model_server.chat_requests) == 1  # not retried: the first generation may still run
    wait_for(lambda: model_server.disconnects == 1, "the server to see the stream closed")
    assert usage.summary()["by_step"]["dream"]["errors"] == 1
    usage.close()


def test_close_aborts_a_call_in_flight(make_client, model_server: ModelServer) -> None:
    client = make_client(timeout_seconds=60)
    model_server.stream_forever()
    thread, out = run_in_thread(lambda: client.chat(MSGS, step="unit"))
    wait_for(lambda: len(model_server.chat_requests) == 1, "the request")
    client.close()
    thread.join(10)
    assert not thread.is_alive()
    err = out["error"]
    assert isinstance(err, ModelError) and err.kind == "cancelled" and "shutting down" in err.message
    wait_for(lambda: model_server.disconnects == 1, "the server to see the stream closed")
    with pytest.raises(ModelError) as again:
        client.chat(MSGS, step="unit")
    assert again.value.kind == "cancelled"


def test_the_deadline_scales_with_the_answer_limit(make_client, model_server: ModelServer) -> None:
    client = make_client(timeout_seconds=0.2, timeout_per_1k_answer_tokens=0.3, timeout_per_1k_prompt_tokens=0)
    model_server.stream_forever()
    with pytest.raises(ModelError) as exc:
        client.chat(MSGS, step="unit", max_tokens=1000)
    assert exc.value.kind == "timeout" and "after 0.5s" in exc.value.message
    bounds = CallBounds(timeout_seconds=30, timeout_per_1k_prompt_tokens=5, timeout_per_1k_answer_tokens=50)
    assert bounds.timeout_for(prompt_tokens=3000, max_tokens=1000) == 30 + 15 + 50


def test_stream_options_rejected_is_learnt_once(make_client) -> None:
    with ModelServer(reject_stream_options=True) as server:
        client = make_client(base_url=server.base_url)
        server.reply("one")
        server.reply("two")
        assert client.chat(MSGS, step="unit").text == "one"
        assert client.chat(MSGS, step="unit").text == "two"
        sent = [r.body.get("stream_options") for r in server.chat_requests]
        assert sent == [{"include_usage": True}, None, None]


def test_no_usage_chunk_means_estimated_usage(make_client) -> None:
    with ModelServer(omit_usage=True) as server:
        server.reply("twelve chars")
        result = make_client(base_url=server.base_url).chat(MSGS, step="unit")
        assert result.usage_estimated and result.completion_tokens == estimate_tokens("twelve chars")


def test_repair_round_trip_and_response_format_fallback_still_work_streamed(make_client) -> None:
    with ModelServer(reject_response_format=True) as server:
        client = make_client(base_url=server.base_url)
        server.reply("not json")
        server.reply_json({"a": 7})
        assert client.chat_json(MSGS, Answer, step="unit").a == 7
        assert [r.body.get("response_format") for r in server.chat_requests] == [{"type": "json_object"}, None, None]


# -- max_tokens on every call ---------------------------------------------------------------------


def test_max_tokens_is_sent_on_every_call(make_client, model_server: ModelServer) -> None:
    client = make_client(step_max_tokens={"consolidation": 4000, "aml_facts": 800}, max_tokens=1024)
    for _ in range(4):
        model_server.reply("x")
    client.chat(MSGS, step="consolidation")
    client.chat(MSGS, step="aml_facts")
    client.chat(MSGS, step="something_new")
    client.chat(MSGS, step="aml_facts", max_tokens=55)  # the caller's value wins
    model_server.reply("bad")
    model_server.reply_json({"a": 1})
    client.chat_json(MSGS, Answer, step="consolidation")  # and its repair uses the base step's limit
    sent = [r.body.get("max_tokens") for r in model_server.chat_requests]
    assert sent == [4000, 800, 1024, 55, 4000, 4000]


def test_step_max_tokens_from_settings_keeps_the_other_defaults(model_server: ModelServer, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  step-max-tokens:\n    dream: 3000\n  max-tokens: 512\n", encoding="utf-8")
    settings = load_settings(cfg, tmp_path / "ws", {"model": {"base_url": model_server.base_url, "model": "m"}})
    client = ModelClient.from_settings(settings)
    try:
        assert client.max_tokens_for("consolidation") == 3000  # "dream" names the dream step
        assert client.max_tokens_for("structured_consolidation.repair") == 2000
        assert client.max_tokens_for("window.summary") == 512
    finally:
        client.close()


def test_extraction_sends_exactly_summary_max_tokens(model_server: ModelServer, tmp_path: Path,
                                                     clock: ManualClock) -> None:
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\nmate:\n  memory:\n    summary-max-tokens: 1000\n", encoding="utf-8")
    settings = load_settings(cfg, tmp_path / "workspace", {"model": {
        "base_url": model_server.base_url, "model": "test-model", "timeout_seconds": 5, "max_retries": 0}})
    store = WorkspaceStore.from_settings(settings, clock)
    store.ensure_agent("default")
    log = ConversationLog(settings.state_dir / "log.db")
    client = ModelClient.from_settings(settings)
    svc = ExtractionService(settings, store, log, clock=clock, model=lambda: client, timers=False)
    svc.start()
    try:
        svc.record_turn("default", "c1", "Remember that my cat is called Miso.", "Noted.")
        assert svc.wait_idle(timeout=30)
    finally:
        svc.shutdown()
        client.close()
        log.close()
    sent = [r.body.get("max_tokens") for r in model_server.chat_requests]
    assert sent and set(sent) == {1000}


# -- one call per server at a time ----------------------------------------------------------------


def test_calls_to_one_server_run_one_at_a_time_across_clients(make_client, model_server: ModelServer) -> None:
    first, second = make_client(), make_client()  # two instances: the limit is per server, process-wide
    model_server.reply("a", delay=0.3)
    model_server.reply("b", delay=0.3)
    threads = [run_in_thread(lambda c=c: c.chat(MSGS, step="unit")) for c in (first, second)]
    for t, _ in threads:
        t.join(10)
    assert sorted(str(out["value"].text) for _, out in threads) == ["a", "b"]  # type: ignore[union-attr]
    assert len(model_server.chat_requests) == 2 and model_server.max_in_flight == 1


def test_the_wait_for_a_slot_counts_against_the_deadline(make_client, model_server: ModelServer) -> None:
    busy = make_client(timeout_seconds=60)
    model_server.stream_forever()
    thread, out = run_in_thread(lambda: busy.chat(MSGS, step="dream"))
    wait_for(lambda: len(model_server.chat_requests) == 1, "the first call")
    waiting = make_client(timeout_seconds=0.3)
    with pytest.raises(ModelError) as exc:
        waiting.chat(MSGS, step="unit")
    assert exc.value.kind == "timeout" and "free slot" in exc.value.message
    with pytest.raises(ModelError) as emb:
        waiting.embed(["embeddings wait for a slot too"])
    assert emb.value.kind == "timeout"
    assert len(model_server.requests) == 1  # neither reached the server
    busy.close()
    thread.join(10)
    assert isinstance(out["error"], ModelError)


# -- roles ----------------------------------------------------------------------------------------


SUMMARY_SHAPE = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "[summary of earlier turns]"},
    {"role": "user", "content": "first question"},
    {"role": "assistant", "content": "first answer"},
    {"role": "assistant", "content": "a second assistant part"},
    {"role": "user", "content": "next question"},
]


def test_normalise_roles_merges_in_order() -> None:
    out = normalise_roles(SUMMARY_SHAPE)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[1]["content"] == "[summary of earlier turns]\n\nfirst question"
    assert out[2]["content"] == "first answer\n\na second assistant part"
    assert SUMMARY_SHAPE[1]["content"] == "[summary of earlier turns]"  # the input is not changed


def test_normalise_roles_fold() -> None:
    folded = normalise_roles(SUMMARY_SHAPE, fold_system=True)
    assert [m["role"] for m in folded] == ["user", "assistant", "user"]
    assert folded[0]["content"].startswith("You are helpful.\n\n[summary of earlier turns]")
    opens_with_assistant = normalise_roles([{"role": "system", "content": "S"}, {"role": "assistant", "content": "A"},
                                            {"role": "system", "content": "late note"}], fold_system=True)
    assert opens_with_assistant == [{"role": "user", "content": "S"}, {"role": "assistant", "content": "A"},
                                    {"role": "user", "content": "late note"}]
    assert roles_alternate(opens_with_assistant)


def test_a_strict_template_server_accepts_our_prompts(make_client) -> None:
    with ModelServer(strict_roles=True) as server:
        client = make_client(base_url=server.base_url)
        server.reply("fine")
        assert client.chat(SUMMARY_SHAPE, step="unit").text == "fine"
        assert roles_alternate(server.chat_requests[0].messages)
        server.reply("no json")
        server.reply_json({"a": 2})
        # The repair round trip appends assistant + user to a prompt that may already end oddly.
        assert client.chat_json([*SUMMARY_SHAPE, {"role": "assistant", "content": "prefill"}], Answer,
                                step="unit").a == 2
        assert all(roles_alternate(r.messages) for r in server.chat_requests)


def test_fold_mode_works_with_a_server_that_rejects_system(make_client) -> None:
    with ModelServer(reject_system=True) as server:
        with pytest.raises(ModelError) as exc:
            make_client(base_url=server.base_url).chat(SUMMARY_SHAPE, step="unit")
        assert exc.value.kind == "bad_request" and "System role not supported" in exc.value.message
        server.reply("folded fine")
        client = make_client(base_url=server.base_url, system_prompt="fold")
        assert client.chat(SUMMARY_SHAPE, step="unit").text == "folded fine"
        sent = server.chat_requests[-1].messages
        assert sent[0]["role"] == "user" and sent[0]["content"].startswith("You are helpful.")
