"""The daemon against an OpenAI-compatible server, configured by `model.base-url` and `model.model`
only: turns reach the model through the real openai client, its answers land in the files, a dream
uses it too, and a failing model is an error that changes nothing — never a silent switch to rules."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mateclaw_mem.runtime.model_probe import PROBE_MESSAGES
from tests.support.model_server import Answer, ModelServer
from tests.test_daemon_e2e import MEM, Daemon, wait_for

MEMORY_BODY = "# MEMORY.md — long-term memory\n\n## Pets\n\n- The user's cat is called Miso\n"


def respond(body: dict[str, Any]) -> Answer | dict[str, Any]:
    system = str(body["messages"][0]["content"])
    if "You consolidate the long-term memory" in system:  # the dreaming step
        return {"should_update": True, "reason": "the cat's name recurs; keep it with its age",
                "memory_content": MEMORY_BODY + "- Miso is 3 years old\n"}
    return {"should_update": True, "reason": "the user named their cat",
            "daily_entry": {"title": "Cat", "body": "- The cat is called Miso"},
            "memory_update": MEMORY_BODY, "profile_update": ""}


def test_model_mode_end_to_end(tmp_path: Path) -> None:
    with ModelServer(responder=respond) as model:
        (tmp_path / "mateclaw.yaml").write_text(
            f"timezone: Europe/Berlin\nmodel:\n  base-url: {model.base_url}\n  model: test-model\n"
            "  timeout-seconds: 5\n  max-retries: 1\n", encoding="utf-8")
        daemon = Daemon(tmp_path).start()
        try:
            memory = daemon.workspace / "default" / "MEMORY.md"
            with daemon.client() as http:
                health = http.get("/health").json()
                assert health["mode"] == "model"
                assert "mode: model test-model" in daemon.log()
                r = http.post(f"{MEM}/conversations/c1/turns",
                              json={"user": "Remember that my cat is called Miso.", "assistant": "Lovely name!"})
                assert r.status_code == 202, r.text
                wait_for(lambda: "Miso" in memory.read_text(encoding="utf-8"), "the model's update in MEMORY.md")
                # The daily entry is written after MEMORY.md (extraction writes it last); the dream
                # below reads daily notes, so wait for the whole run rather than its first file.
                notes = daemon.workspace / "default" / "memory"
                wait_for(lambda: any("Miso" in p.read_text(encoding="utf-8") for p in notes.glob("*.md")),
                         "the model's daily entry")
                # The start-up probe (one tiny call) aside, the first chat is the extraction's.
                chats = [q for q in model.chat_requests if q.body and q.body["messages"] != PROBE_MESSAGES]
                assert chats and chats[0].body["model"] == "test-model"
                assert "my cat is called Miso" in json.dumps(chats[0].body, ensure_ascii=False)

                dream = http.post(f"{MEM}/emergence", json={})
                assert dream.status_code == 200, dream.text
                assert dream.json()["status"] == "done"
                assert "Miso is 3 years old" in memory.read_text(encoding="utf-8")
                assert "the cat's name recurs" in (daemon.workspace / "default" / "DREAMS.md").read_text("utf-8")

                # The model goes down: the manual run is an error, the file is untouched, no rules fallback.
                before = memory.read_bytes()
                model.responder = None
                for _ in range(6):
                    model.server_error(500)
                # Too short for the automatic gates; a manual run still sends it to the model.
                r = http.post(f"{MEM}/conversations/c2/turns", json={"user": "Miso is 3.", "assistant": "Ok."})
                assert r.json()["extraction"]["scheduled"] is False
                failed = http.post(f"{MEM}/summarize/c2")
                assert failed.status_code == 502, failed.text
                assert "model" in json.dumps(failed.json()).lower()
                assert memory.read_bytes() == before
        finally:
            assert daemon.stop() == 0



def test_sigterm_during_a_hanging_extraction_cancels_the_call_stops_cleanly_and_the_next_start_resumes(
        tmp_path: Path) -> None:
    """SIGTERM while an extraction waits on a model that never answers: the call is cancelled
    MODEL_CALL_GRACE after the signal, so the stop finishes before its deadline (exit 0, not a forced
    exit), and the conversation it cut short is extracted by the next start, against a model that
    answers."""
    hanging = Answer(content={"should_update": False, "reason": "late"}, delay=120)
    config = ("timezone: Europe/Berlin\nmodel:\n  base-url: {url}\n  model: test-model\n  timeout-seconds: 300\n"
              "mate:\n  memory:\n    cooldown-minutes: 0\n    min-messages-for-summarize: 0\n")
    with ModelServer(responder=lambda body: hanging) as model:
        (tmp_path / "mateclaw.yaml").write_text(config.replace("{url}", model.base_url), encoding="utf-8")
        daemon = Daemon(tmp_path).start()
        with daemon.client() as http:
            r = http.post(f"{MEM}/conversations/c1/turns",
                          json={"user": "Remember that my cat is called Miso.", "assistant": "Lovely name!"})
            assert r.status_code == 202, r.text
        wait_for(lambda: any("my cat is called Miso" in json.dumps(q.body) for q in model.chat_requests),
                 "the extraction's call to the model")
        assert daemon.stop() == 0, daemon.log()
        assert "cancelling the model calls still running" in daemon.log()
        assert "stopping took over" not in daemon.log()
    with ModelServer(responder=respond) as model:
        (tmp_path / "mateclaw.yaml").write_text(config.replace("{url}", model.base_url), encoding="utf-8")
        daemon = Daemon(tmp_path).start()
        try:
            memory = daemon.workspace / "default" / "MEMORY.md"
            wait_for(lambda: "Miso" in memory.read_text(encoding="utf-8"), "the resumed extraction in MEMORY.md")
        finally:
            assert daemon.stop() == 0


def test_a_stop_cut_short_at_the_deadline_exits_143_not_0(tmp_path: Path) -> None:
    """SIGTERM while a client is still sending a request's body: the HTTP server waits for that
    request, the stop's deadline passes, and the daemon exits with 128 + SIGTERM - not 0, a clean
    stop's status, which a supervisor or script could not tell apart."""
    import socket
    from urllib.parse import urlsplit

    daemon = Daemon(tmp_path).start()
    url = urlsplit(daemon.url)
    with socket.create_connection((url.hostname, url.port), timeout=30) as slow:
        # Headers and the first byte of a 1,000-byte body; the rest never comes (the body's read
        # deadline, server.body-read-timeout-seconds, is 30 s: far past the stop's).
        slow.sendall(f"POST /v1/aml/add HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
                     "Content-Length: 1000\r\n\r\n{".encode())
        time.sleep(0.3)  # (read by the server: the request is in flight)
        assert daemon.stop() == 128 + 15, daemon.log()
    assert "exiting now with status 143" in daemon.log()


def _proxy_config(tmp_path: Path, upstream: ModelServer) -> None:
    (tmp_path / "mateclaw.yaml").write_text(
        f"timezone: UTC\nproxy:\n  upstream:\n    base-url: {upstream.base_url}\n    model: llama-local\n"
        "    timeout-seconds: 300\n    idle-timeout-seconds: 300\n", encoding="utf-8")


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[BaseException]]:
    """`call()` on a thread of its own; what it raised lands in the list."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # (handed to the test)
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, raised


def test_sigterm_ends_a_proxied_stream_with_an_error_the_sdk_raises_and_the_stop_is_clean(tmp_path: Path) -> None:
    """SIGTERM while a chat client reads a proxied answer that streams for ever: MODEL_CALL_GRACE
    after the signal the stream ends with an error event in OpenAI's shape - the real `openai` client
    raises it, saying why - and the stop finishes cleanly (exit 0), not at its deadline. What the
    stream had said is learnt as from any stream that broke off, and counts as no upstream failure."""
    import openai

    with ModelServer() as upstream:
        upstream.stream_forever(interval=0.05)
        _proxy_config(tmp_path, upstream)
        daemon = Daemon(tmp_path).start()
        client = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="x", max_retries=0)
        stream = client.chat.completions.create(model="llama-local", stream=True,
                                                messages=[{"role": "user", "content": "tell me a long story"}])
        chunks = iter(stream)
        next(chunks)  # the answer is streaming
        thread, raised = _in_thread(lambda: list(chunks))
        t0 = time.monotonic()
        status = daemon.stop()
        took = time.monotonic() - t0
        thread.join(10)
        stream.close()
    assert status == 0, daemon.log()
    assert raised and isinstance(raised[0], openai.APIError), raised
    assert "mateclaw-mem is stopping" in str(raised[0])
    assert "ended 1 chat proxy answer(s) still open" in daemon.log()
    assert "stopping took over" not in daemon.log()
    assert took < 3.5, took  # (the deadline, which a forced exit waits out)


def test_sigterm_answers_a_proxied_chat_still_awaited_with_a_503_and_the_stop_is_clean(tmp_path: Path) -> None:
    """SIGTERM while a non-streamed chat waits for an upstream that does not answer: it is answered
    503 with the reason (the `openai` client raises InternalServerError with it), and the stop is
    clean."""
    import openai

    with ModelServer() as upstream:
        upstream.hang(120)
        _proxy_config(tmp_path, upstream)
        daemon = Daemon(tmp_path).start()
        client = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="x", max_retries=0, timeout=60)
        thread, raised = _in_thread(lambda: client.chat.completions.create(
            model="llama-local", messages=[{"role": "user", "content": "hello?"}]))
        wait_for(lambda: upstream.chat_requests, "the chat at the upstream")
        status = daemon.stop()
        thread.join(10)
    assert status == 0, daemon.log()
    assert raised and isinstance(raised[0], openai.InternalServerError), raised
    assert raised[0].status_code == 503
    assert "mateclaw-mem is stopping" in str(raised[0])
    assert "ended 1 chat proxy answer(s) still open" in daemon.log()
