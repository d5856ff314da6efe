"""Failures are loud (issue 20, deliverable 4): every model step records its failures with a kind and
a reason in one table (log.db `model_step_failures`), `status` and `/health` show them per step over
the last 24 h, `consolidate-structured` exits 7 when the model failed, an AML answer without a
facts list is a failed job, and a start-up probe says whether the model answers and how fast.

Real parts: temp workspaces, real SQLite, the scripted OpenAI-compatible server, a real uvicorn for
`/health`, the CLI in-process.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mateclaw_mem.api.app import create_app
from mateclaw_mem.cli.main import main
from mateclaw_mem.conversations.aml import AmlMessage
from mateclaw_mem.llm.failures import STEPS, record_failure
from mateclaw_mem.llm.usage import DAY_MS
from mateclaw_mem.runtime.daemon import Daemon
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.runtime.status import collect
from mateclaw_mem.settings import load_settings
from tests.support.model_server import Answer, ModelServer
from tests.support.server import ApiServer, daemon_services

WAIT = 15.0  # we wait for an outcome, never assert how long it took
TS = 1683554160000
CHAT = [AmlMessage("user", "Caroline: What are your cats called?", TS),
        AmlMessage("user", "Melanie: Luna and Oliver! They keep me busy.", TS + 60_000)]
PROBE_TEXT = "Reply with the single word OK."


def _model_services(tmp_path: Path, server: ModelServer, **model: Any) -> Services:
    cfg = tmp_path / "model.yaml"
    cfg.write_text("timezone: UTC\n", encoding="utf-8")
    section = {"base_url": server.base_url, "model": "test-model", "timeout_seconds": 5, "max_retries": 0, **model}
    services = Services(load_settings(cfg, tmp_path / "ws", overrides={"model": section}))
    services.store.ensure_agent("default")
    return services


@pytest.fixture
def msvc(tmp_path: Path, model_server: ModelServer) -> Iterator[Services]:
    services = _model_services(tmp_path, model_server)
    yield services
    services.close()


def _failures(services: Services) -> dict[str, Any]:
    return collect(services)["model_health"]["failures_24h"]


# -- one table, read by status ----------------------------------------------------------------------


def test_status_lists_every_step_and_counts_failures_by_kind_over_the_last_day(msvc: Services) -> None:
    usage = msvc.model.usage  # type: ignore[union-attr]
    record_failure(msvc.model, "extraction", "invalid_output", "model answer for extraction was invalid twice",
                   agent="default")
    record_failure(msvc.model, "extraction", "timeout", "model timed out after 5s", agent="default", owner="ann")
    usage.record_failure("dream", "server", "long ago", ts_ms=int(time.time() * 1000) - DAY_MS - 60_000)
    record_failure(None, "dream", "server", "rules mode: nowhere to record, and no error either")

    failures = _failures(msvc)
    assert list(failures) == list(STEPS)  # every step, "0" said out loud
    assert failures["extraction"]["failures"] == 2
    assert failures["extraction"]["by_kind"] == {"invalid_output": 1, "timeout": 1}
    assert failures["extraction"]["last_kind"] == "timeout"
    assert failures["extraction"]["last_reason"] == "model timed out after 5s"
    assert failures["dream"] == {"failures": 0}  # the one from 25 h ago is out of the window


def test_a_failure_reason_is_redacted_before_it_is_stored(msvc: Services) -> None:
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
    record_failure(msvc.model, "summary", "server", f"the server said: bad key {secret}")
    reason = _failures(msvc)["summary"]["last_reason"]
    assert secret not in reason and "bad key" in reason


# -- AML facts --------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", [{}, {"facts": None}, {"items": [{"text": "x", "sources": [1]}]},
                                    "Melanie has two cats."], ids=["empty-object", "null", "other-key", "prose"])
def test_an_aml_answer_without_a_facts_list_fails_the_job_and_is_recorded(
        msvc: Services, model_server: ModelServer, answer: Any) -> None:
    for _ in range(2):  # the answer and the repair round trip
        model_server.reply(answer) if isinstance(answer, str) else model_server.reply_json(answer)
    msvc.aml.add("r1", "u1", "s1", CHAT)
    assert msvc.aml.facts is not None
    msvc.aml.facts.run_pending()
    job = msvc.aml.facts.store.job("r1", "u1")
    assert job is not None and job.status == "failed", job
    assert job.error and job.error.startswith("invalid_output")
    assert len(model_server.chat_requests) == 2
    if not isinstance(answer, str):  # the repair names what was missing
        assert 'no "facts" list' in model_server.chat_requests[1].prompt_text
    failures = _failures(msvc)["aml_facts"]
    assert failures["failures"] == 1 and failures["by_kind"] == {"invalid_output": 1}


def test_an_explicitly_empty_facts_list_is_a_done_job_with_nothing_to_keep(
        msvc: Services, model_server: ModelServer) -> None:
    model_server.reply_json({"facts": []})
    msvc.aml.add("r1", "u1", "s1", CHAT)
    assert msvc.aml.facts is not None
    msvc.aml.facts.run_pending()
    assert msvc.aml.facts.store.counts() == {"done": 1, "facts": 0}
    assert len(model_server.chat_requests) == 1  # no repair round trip
    assert _failures(msvc)["aml_facts"] == {"failures": 0}


# -- consolidate-structured exit codes ----------------------------------------------------------------

ENTRIES = [(f"k{i}", f"Entry number {i} about topic {i}.") for i in range(8)]


def _keep_all() -> dict[str, Any]:
    return {"entries": [{"key": k, "text": t, "merged_from": []} for k, t in ENTRIES], "dropped": []}


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
        model_server: ModelServer) -> Callable[..., tuple[int, str, str]]:
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text(f"timezone: UTC\nmodel:\n  base-url: {model_server.base_url}\n  model: test-model\n"
                   "  timeout-seconds: 5\n  max-retries: 0\n", encoding="utf-8")
    monkeypatch.setenv("MATECLAW_WORKSPACE", str(tmp_path / "workspace"))
    monkeypatch.setenv("MATECLAW_CONFIG", str(cfg))
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    assert run("init")[0] == 0
    return run


def _remember(cli: Callable[..., tuple[int, str, str]], type_: str) -> None:
    for key, text in ENTRIES:
        assert cli("remember", "default", type_, key, text)[0] == 0


def test_consolidate_structured_exits_7_when_the_model_failed_every_bucket(
        cli: Callable[..., tuple[int, str, str]], model_server: ModelServer) -> None:
    _remember(cli, "user")
    model_server.server_error(500)
    code, out, _ = cli("consolidate-structured")
    assert code == 7, out
    assert "NOT DONE: the model failed for every bucket" in out
    code, out, _ = cli("status", "--json")
    failures = json.loads(out)["model_health"]["failures_24h"]["structured_consolidation"]
    assert failures["failures"] == 1 and failures["by_kind"] == {"server": 1}
    assert failures["last_reason"].startswith("user entries: model server error (HTTP 500)")
    code, out, _ = cli("status")
    assert "model failures (24 h):" in out and "structured_consolidation: 1 (server 1)" in out


def test_consolidate_structured_says_which_buckets_failed_and_exits_7_on_a_partial_failure(
        cli: Callable[..., tuple[int, str, str]], model_server: ModelServer) -> None:
    _remember(cli, "user")
    _remember(cli, "feedback")
    model_server.reply_json(_keep_all())  # user: fine
    model_server.server_error(503)  # feedback: the model fails
    code, out, _ = cli("consolidate-structured", "--json")
    report = json.loads(out)
    assert code == 7
    assert [(b["type"], b["status"], b["error_kind"]) for b in report["buckets"]] == [
        ("user", "unchanged", None), ("feedback", "error", "server")]
    assert (report["failed"], report["modelFailed"]) == (1, 1)
    model_server.server_error(503)  # the failed bucket is due again: the next run retries it
    code, out, _ = cli("consolidate-structured")
    assert code == 7 and "NOT DONE: the model failed for every bucket" in out
    assert "feedback: error" in out


def test_consolidate_structured_still_exits_0_when_it_worked(
        cli: Callable[..., tuple[int, str, str]], model_server: ModelServer) -> None:
    _remember(cli, "user")
    model_server.reply_json(_keep_all())
    code, out, _ = cli("consolidate-structured")
    assert code == 0 and "NOT DONE" not in out
    assert "model failures (24 h): none" in cli("status")[1]


# -- the probe ---------------------------------------------------------------------------------------


def _probe_responder(answer: Answer | str) -> Callable[[dict[str, Any]], Any]:
    def respond(body: dict[str, Any]) -> Any:
        if PROBE_TEXT in json.dumps(body.get("messages")):
            return answer
        return None

    return respond


def test_model_check_probes_now_and_status_shows_the_last_probe(
        cli: Callable[..., tuple[int, str, str]], model_server: ModelServer) -> None:
    assert "model: not probed yet" in cli("status")[1]
    model_server.reply("OK")
    code, out, _ = cli("model", "check")
    assert code == 0 and "answering" in out and "not answering" not in out
    probe = model_server.chat_requests[-1].body
    assert probe is not None and 1 <= probe["max_tokens"] <= 8
    assert "model: answering, " in cli("status")[1]

    model_server.error(404, "model 'test-model' not found")
    code, out, _ = cli("model", "check")
    assert code == 7 and "not answering" in out and "not found" in out
    assert len(model_server.chat_requests) == 2  # no retries: one call answers the question
    status = json.loads(cli("status", "--json")[1])["model_health"]["probe"]
    assert status["state"] == "not answering" and "not found" in status["error"]


def test_model_check_in_rules_mode_says_there_is_no_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("MATECLAW_WORKSPACE", str(tmp_path / "workspace"))
    assert main(["init"]) == 0
    assert main(["model", "check"]) == 6
    assert "no model configured" in capsys.readouterr().err


def test_health_shows_the_probe_and_the_failures_per_step(msvc: Services, model_server: ModelServer) -> None:
    model_server.reply("OK")
    assert msvc.model_probe is not None
    result = msvc.model_probe.run()
    assert result.answering
    record_failure(msvc.model, "dream", "invalid_output", "model answer for dream was invalid twice")
    with ApiServer(create_app(msvc, mcp=False)) as server:
        model = httpx.get(server.url + "/health").json()["model"]
    assert model["probe"]["state"] == "answering"
    assert model["probe"]["latency_ms"] == result.latency_ms
    assert model["failures_24h"]["dream"]["by_kind"] == {"invalid_output": 1}
    assert model["failures_24h"]["extraction"] == {"failures": 0}


def test_rules_mode_health_has_no_model_section(services: Services) -> None:
    with ApiServer(create_app(services, mcp=False)) as server:
        assert httpx.get(server.url + "/health").json()["model"] is None


def _daemon(tmp_path: Path, server: ModelServer, **model: Any) -> Daemon:
    section = {"base_url": server.base_url, "model": "test-model", "max_retries": 0, **model}
    services = daemon_services(tmp_path / "workspace", model=section)
    return Daemon(services, host="127.0.0.1", port=0, app_factory=lambda s, host: create_app(s, host=host, mcp=False))


def _health_probe(daemon: Daemon, until: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while True:
        probe = httpx.get(daemon.url + "/health").json()["model"]["probe"]
        if until(probe) or time.monotonic() > deadline:
            return probe
        time.sleep(0.05)


def test_the_daemon_probes_the_model_at_start_in_the_background(tmp_path: Path) -> None:
    with ModelServer(responder=_probe_responder("OK")) as server:
        daemon = _daemon(tmp_path, server, timeout_seconds=5)
        daemon.start()
        try:
            probe = _health_probe(daemon, lambda p: p["state"] not in ("probing", "not probed yet"))
        finally:
            daemon.stop()
        assert probe["state"] == "answering" and isinstance(probe["latency_ms"], int)
        probes = [r for r in server.chat_requests if PROBE_TEXT in r.prompt_text]
        assert len(probes) == 1 and probes[0].body is not None and probes[0].body["max_tokens"] <= 8


def test_a_hanging_model_never_holds_up_start_up_or_health(tmp_path: Path) -> None:
    # The model accepts the probe and never answers (until the server stops).
    with ModelServer(responder=_probe_responder(Answer(content="OK", delay=60))) as server:
        daemon = _daemon(tmp_path, server, timeout_seconds=10)
        daemon.start()  # returns although the probe is still waiting
        try:
            probe = httpx.get(daemon.url + "/health", timeout=WAIT).json()["model"]["probe"]
            assert probe["state"] == "probing"
        finally:
            daemon.stop()  # closes the probe's connection instead of waiting for it


def test_a_probe_that_times_out_says_why(model_server: ModelServer, tmp_path: Path) -> None:
    services = _model_services(tmp_path, model_server, timeout_seconds=1)
    try:
        model_server.hang(30)
        assert services.model_probe is not None
        result = services.model_probe.run()
        assert not result.answering and result.error_kind == "timeout"
        status = services.model_probe.status()
        assert status["state"] == "not answering" and status["error_kind"] == "timeout"
        assert result.line().startswith("model test-model: not answering: ")
    finally:
        services.close()



def test_http_consolidation_is_502_when_the_model_failed_every_bucket(msvc: Services,
                                                                      model_server: ModelServer) -> None:
    msvc.store.ensure_agent("default")
    for key, text in ENTRIES:
        msvc.structured.remember("default", "user", key, text, actor="person")
    model_server.server_error(500)
    with ApiServer(create_app(msvc, mcp=False)) as server:
        r = httpx.post(server.url + "/api/v1/memory/default/structured-consolidation")
    assert r.status_code == 502, r.text
    assert "the model failed for every bucket" in r.text and '"modelFailed":1' in r.text.replace(" ", "")
