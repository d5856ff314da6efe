""""No owner" is None inside the services. "" - the spelling of the SQL columns, of an empty query
parameter, of `--owner ""` - is accepted where it arrives and means exactly the same."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mateclaw_mem.cli.main import main
from mateclaw_mem.conversations.facts import FactStore
from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from tests.support.server import serve_api

MEM = "/api/v1/memory/default"
WS = "/api/v1/agents/default/workspace/memory"


def test_the_log_keeps_no_owner_under_one_key(tmp_path: Path) -> None:
    log = ConversationLog(tmp_path / "log.db")
    try:
        log.append("a", "c1", [NewMessage("user", "first")], now_ms=1)
        log.append("a", "c1", [NewMessage("user", "second")], owner="", now_ms=2)
        log.append("a", "c1", [NewMessage("user", "bob's")], owner="bob", now_ms=3)
        for owner in (None, ""):
            assert [m.content for m in log.messages("a", "c1", owner=owner)] == ["first", "second"]
            assert log.conversation_flags("a", "c1", owner)["message_count"] == 2
            assert [m.content for m in log.before("a", "c1", 10**6, owner=owner, limit=5)] == ["first", "second"]
        assert [m.content for m in log.messages("a", "c1", owner="bob")] == ["bob's"]
        assert [m.owner for m in log.since(0)] == [None, None, "bob"]
        log.append_once("r1", "h", "{}", "a", "c2", [NewMessage("user", "x")], now_ms=4)
        again = log.append_once("r1", "h", "{}", "a", "c2", [NewMessage("user", "x")], owner="", now_ms=5)
        assert again.replayed and len(log.messages("a", "c2")) == 1
    finally:
        log.close()


def test_two_users_with_the_same_request_id_each_get_their_fact_job(tmp_path: Path) -> None:
    # request_id is unique per user, as Add's idempotency is: a second user's r1 is a job of its own.
    store = FactStore(tmp_path / "log.db")
    try:
        assert store.enqueue("r1", "aml", "alice", "s1", [1], now_ms=1)
        assert store.enqueue("r1", "aml", "bob", "s1", [2], now_ms=1)
        assert not store.enqueue("r1", "aml", "bob", "s1", [2], now_ms=2)  # bob's retry: the same job
        alice, bob = store.job("r1", "alice"), store.job("r1", "bob")
        assert alice is not None and bob is not None and alice.id != bob.id and bob.message_ids == (2,)
    finally:
        store.close()


def test_a_fact_jobs_table_keyed_across_users_is_rebuilt_per_user(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "log.db"
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE aml_fact_jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL UNIQUE,"
                " agent TEXT NOT NULL, owner TEXT NOT NULL, conversation_id TEXT NOT NULL, message_ids TEXT NOT NULL,"
                " status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, error TEXT, created_ms INTEGER NOT NULL,"
                " updated_ms INTEGER NOT NULL)")
    old.execute("INSERT INTO aml_fact_jobs (request_id, agent, owner, conversation_id, message_ids, status,"
                " created_ms, updated_ms) VALUES ('r1', 'aml', 'alice', 's1', '[1]', 'done', 1, 1)")
    old.commit()
    old.close()
    store = FactStore(path)
    try:
        kept = store.job("r1", "alice")
        assert kept is not None and kept.status == "done"  # the old row kept, with its id
        assert store.enqueue("r1", "aml", "bob", "s1", [2], now_ms=2)  # refused before the rebuild
    finally:
        store.close()


def test_a_fact_job_without_owner_reads_back_as_none(tmp_path: Path) -> None:
    store = FactStore(tmp_path / "log.db")
    try:
        assert store.enqueue("r1", "aml", None, "s1", [1], now_ms=1)
        assert not store.enqueue("r1", "aml", "", "s1", [1], now_ms=2)  # the same request, the same job
        job = store.job("r1")
        assert job is not None and job.owner is None
        store.finish(job, [("a fact", [1], 1)], now_ms=3)
        assert [f.owner for f in store.facts_since(0)] == [None]
    finally:
        store.close()


def test_context_and_structured_memory_take_an_empty_owner_as_none(services: Services) -> None:
    services.store.ensure_agent("default")
    services.structured.remember("default", "user", "tea", "Sencha.", actor="api", owner="")
    for owner in (None, ""):
        ctx = services.context.build("default", owner=owner, query="tea?")
        assert ctx.owner is None and "- tea: Sencha." in ctx.system
    assert services.structured.always_on_block("default", owner="") is services.structured.always_on_block("default")


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path / "ws", mcp=False)


def test_http_an_empty_owner_is_no_owner(client: httpx.Client) -> None:
    r = client.post(f"{MEM}/conversations/c7/turns",
                    json={"user": "I moved to Porto", "assistant": "Nice.", "owner": "", "endUserId": ""})
    assert r.status_code == 202, r.text
    assert client.services.extraction.wait_idle(30)  # type: ignore[attr-defined]
    for params in ({"owner": ""}, {}):  # the turn is found as a conversation without owner
        r = client.post(f"{MEM}/summarize/c7", params=params)
        assert r.status_code == 200, r.text
    r = client.post(f"{MEM}/context", json={"query": "where do I live?", "owner": "", "endUserId": ""})
    assert r.status_code == 200 and r.json()["owner"] is None
    assert client.get(f"{MEM}/dreaming/status", params={"owner": ""}).status_code == 200
    r = client.put(f"{WS}/file", json={"path": "notes/a.md", "content": "# A\n", "owner": ""})
    assert r.status_code == 200, r.text
    assert client.get(f"{WS}/file", params={"path": "notes/a.md", "owner": ""}).json()["content"].endswith("# A\n")


def test_cli_an_empty_owner_is_no_owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture) -> None:
    from tests.support.isolation import no_config_here

    no_config_here(monkeypatch, tmp_path)  # from tmp_path, on tmp_path/workspace, no settings file
    assert main(["init"]) == 0
    services = Services(load_settings(workspace=tmp_path / "workspace"))
    try:
        services.log.append("default", "c1", [NewMessage("user", "I work as a nurse"),
                                              NewMessage("assistant", "Noted.")], now_ms=1)
    finally:
        services.close()
    capsys.readouterr()
    assert main(["extract", "default", "c1", "--owner", "", "--json"]) in (0, 10)
    assert json.loads(capsys.readouterr().out)["outcome"] != "error"
    assert main(["context", "default", "--owner", "", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["owner"] is None
