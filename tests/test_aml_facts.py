"""AML model mode: source-bound facts extracted after Add, searched beside raw messages.

Real parts: SQLite log/index, the scripted OpenAI-compatible model server over HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.conversations.aml import AmlMessage, AmlService
from mateclaw_mem.conversations.facts import FactExtractor, FactStore
from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.llm.client import ModelClient
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from tests.support.aml_stores import STORES
from tests.support.model_server import ModelServer

TS = 1683554160000  # 2023-05-08 13:56 UTC
CHAT = [
    AmlMessage("user", "Caroline: What are your cats called?", TS),
    AmlMessage("user", "Melanie: Luna and Oliver! They keep me busy.", TS + 60_000),
]
FACT = {"facts": [{"text": "Melanie has two cats named Luna and Oliver.", "sources": [2]}]}


@pytest.fixture
def model_settings(tmp_path: Path, model_settings_overrides: dict[str, Any], monkeypatch: pytest.MonkeyPatch):
    for key in [k for k in __import__("os").environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key, raising=False)
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: UTC\n", encoding="utf-8")
    return load_settings(cfg, tmp_path / "ws", overrides=model_settings_overrides)


@pytest.fixture(params=STORES)
def aml(request: pytest.FixtureRequest, model_settings, clock) -> Iterator[AmlService]:
    """AmlService in model mode without the worker thread: tests run the jobs themselves. On either
    store: SQLite files, or PostgreSQL (fact jobs claimed under a lease, facts indexed as stored)."""
    if request.param == "postgresql":
        from mateclaw_mem.conversations.pg import open_pg_service

        client = ModelClient.from_settings(model_settings)
        svc = open_pg_service(model_settings, clock, model=lambda: client, dsn=request.getfixturevalue("pg_database"))
        yield svc
        svc.stop()
        client.close()
        return
    state = model_settings.state_dir
    state.mkdir(parents=True, exist_ok=True)
    log, index = ConversationLog(state / "log.db"), MessageIndex(state / "messages.db")
    store = FactStore(state / "log.db")
    client = ModelClient.from_settings(model_settings)
    svc = AmlService(log, index, clock, facts=FactExtractor(store, log, index, lambda: client, clock))
    yield svc
    for x in (client, store, index, log):
        x.close()


def test_facts_cite_their_messages_and_are_searched_beside_them(aml: AmlService, model_server: ModelServer) -> None:
    model_server.reply_json(FACT)
    aml.add("r1", "u1", "s1", CHAT)
    assert aml.facts is not None
    assert aml.facts.run_pending() == 1

    # The model saw the chunk with its speakers and dates and the numbers it may cite.
    prompt = json.dumps(model_server.chat_requests[0].body["messages"])
    assert "[2] NEW 2023-05-08 (Mon) Melanie: Luna and Oliver!" in prompt
    stored = aml.facts.store.facts_since(0)
    assert [(f.text, f.owner, f.conversation_id) for f in stored] == [
        ("Melanie has two cats named Luna and Oliver.", "u1", "s1")
    ]
    msg_ids = [m.id for m in aml.log.messages("aml", "s1", owner="u1")]
    assert stored[0].source_ids == (msg_ids[1],)  # bound to the message it came from

    items = aml.search("how many cats does Melanie have", "u1", 10)
    fact = next(i for i in items if i.id == f"f{stored[0].id}")
    assert fact.content == "[2023-05-08 Mon] fact: Melanie has two cats named Luna and Oliver."
    assert fact.created_at == "2023-05-08T13:57:00.000Z"  # the source message's time
    assert {i.id for i in items} >= {f"m{msg_ids[1]}"}  # raw messages are still returned
    assert all(i.id.startswith(("m", "f")) for i in items)
    # Facts belong to their user only.
    assert aml.search("cats Luna Oliver", "u2", 10) == []
    assert aml.search("cats Luna Oliver", "u", 10) == []


def test_a_failing_model_never_fails_the_add_and_the_error_is_recorded(
    aml: AmlService, model_server: ModelServer
) -> None:
    model_server.error(404, "model does not exist", code="model_not_found")
    body = aml.add("r1", "u1", "s1", CHAT)
    assert body["success"] is True
    assert aml.facts is not None
    aml.facts.run_pending()
    job = aml.facts.store.job("r1", "u1")
    assert job is not None and job.status == "failed" and "model does not exist" in (job.error or "")
    assert aml.facts.store.facts_since(0) == []
    # The raw messages are the truth and stay searchable.
    assert "[2023-05-08 Mon] Melanie: Luna and Oliver! They keep me busy." in [
        i.content for i in aml.search("cats called", "u1", 5)
    ]


def test_citing_a_message_that_was_not_shown_is_repaired_once_then_refused(
    aml: AmlService, model_server: ModelServer
) -> None:
    bad = {"facts": [{"text": "Melanie has cats.", "sources": [7]}]}
    model_server.reply_json(bad)
    model_server.reply_json(bad)
    aml.add("r1", "u1", "s1", CHAT)
    assert aml.facts is not None
    aml.facts.run_pending()
    assert len(model_server.chat_requests) == 2  # the answer and one repair round trip
    assert "not message numbers shown" in json.dumps(model_server.chat_requests[1].body["messages"])
    job = aml.facts.store.job("r1", "u1")
    assert job is not None and job.status == "failed" and job.error and job.error.startswith("invalid_output")
    assert aml.facts.store.facts_since(0) == []


def test_retried_add_queues_one_job_and_earlier_turns_are_context(aml: AmlService, model_server: ModelServer) -> None:
    model_server.reply_json({"facts": []})
    model_server.reply_json(FACT)
    aml.add("r1", "u1", "s1", CHAT[:1])
    aml.add("r2", "u1", "s1", CHAT[1:])
    aml.add("r2", "u1", "s1", CHAT[1:])  # the platform retries
    assert aml.facts is not None
    assert aml.facts.run_pending() == 2
    assert aml.facts.store.counts() == {"done": 2, "facts": 1}
    second = json.dumps(model_server.chat_requests[1].body["messages"])
    assert "[1] EARLIER 2023-05-08 (Mon) Caroline: What are your cats called?" in second
    assert "[2] NEW" in second


def test_services_wire_facts_in_model_mode_only(model_settings, settings, clock, model_server: ModelServer) -> None:
    model_server.reply_json(FACT)
    svc = Services(model_settings, clock)
    try:
        svc.aml.add("r1", "u1", "s1", CHAT)
        assert svc.aml.facts is not None
        # The model is handed over as a provider: an Add builds no client (nor imports openai for it).
        assert not svc.built("model"), "building Add/Search or an Add built the model client"
        svc.aml.facts.run_pending()  # no worker: building `aml` starts none (only start() does)
        assert svc.aml.facts.store.counts() == {"done": 1, "facts": 1}
        # The fact job asked for the one shared client: its call is in the daemon's usage log.
        assert svc.model is not None and svc.model.usage is not None
        assert svc.model.usage.summary()["by_step"]["aml_facts"]["calls"] == 1
        assert any(i.id.startswith("f") for i in svc.aml.search("Melanie cats", "u1", 5))
    finally:
        svc.close()
    rules = Services(settings, clock)
    try:
        assert rules.aml.facts is None
    finally:
        rules.close()


def test_facts_survive_an_index_rebuild(aml: AmlService, model_server: ModelServer, tmp_path: Path) -> None:
    model_server.reply_json(FACT)
    aml.add("r1", "u1", "s1", CHAT)
    assert aml.facts is not None
    aml.facts.run_pending()
    fresh = MessageIndex(tmp_path / "fresh.db")
    try:
        assert fresh.rebuild(aml.log, aml.facts.store) == 3
        assert any(h.role == "fact" for h in fresh.search("aml", "u1", "cats Luna", limit=5))
    finally:
        fresh.close()


def test_a_call_the_stop_cancels_leaves_the_job_for_the_next_run_and_uses_up_no_attempt(
    aml: AmlService, model_server: ModelServer
) -> None:
    """The daemon's stop cancels the model calls in flight (ModelClient.close): the job whose call it
    cut short is released as it was - not failed, its attempts untouched, claimable at once (on
    PostgreSQL too: no lease left to run out) - and the worker claims nothing more. Failed instead,
    three stops in a row lost its facts for good."""
    import threading

    model_server.hang(30)
    aml.add("r1", "u1", "s1", CHAT)
    aml.add("r2", "u1", "s1", [AmlMessage("user", "Melanie: Oliver is the older one.", TS + 120_000)])
    assert aml.facts is not None
    client = aml.facts.model()
    assert client is not None
    threading.Timer(0.3, client.close).start()
    assert aml.facts.run_pending() == 1  # the first job, cut short; the second left alone
    for rid in ("r1", "r2"):
        job = aml.facts.store.job(rid, "u1")
        assert job is not None and (job.status, job.attempts, job.error) == ("pending", 0, None), job
    claimed = aml.facts.store.claim()
    assert claimed is not None and claimed.request_id == "r1"  # no lease held on it
