"""A person's AML data deleted (`DELETE /v1/aml/users/{user_id}`) and expired (`aml.retention-days`):
every byte of the workspace scanned afterwards, another user's words as the positive control."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.aml import AmlMessage, AmlService
from mateclaw_mem.conversations.aml_users import AmlUsers
from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.memory.forget.scan import patterns, walk
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from mateclaw_mem.workspace.journal import Journal
from tests.support.server import serve_api

KEY = "users-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
VICTIM = "Zorbleflax quintessential marmalade harbour"
OTHER = "Grumwhistle saffron teapot lighthouse"
IMAGE = "https://img.example/zorbleflax-quokka.png"
TS = 1683554160000


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path / "ws", api_key=KEY, seed=False)


def _add(client: httpx.Client, user: str, request_id: str, *texts: str, session: str = "s1") -> None:
    body = {"request_id": request_id, "user_id": user, "session_id": session, "messages": [
        {"role": "user", "timestamp": TS + i, "content": t} for i, t in enumerate(texts)]}
    r = client.post("/v1/aml/add", json=body, headers=AUTH)
    assert r.status_code == 200, r.text


def _search(client: httpx.Client, user: str, query: str) -> list[dict]:
    r = client.post("/v1/aml/search", json={"query": query, "user_id": user, "top_k": 10}, headers=AUTH)
    assert r.status_code == 200, r.text
    return r.json()["data"]


def _scan(root: Path) -> dict[str, list[dict]]:
    # The phrases, and one rare word of each alone: the index keeps terms one by one (postings keys).
    return walk(root, {"victim": patterns(VICTIM), "other": patterns(OTHER), "image": patterns(IMAGE),
                       "victim_word": patterns("zorbleflax"), "other_word": patterns("grumwhistle")}).hits


def test_delete_user_leaves_no_byte_of_their_words(client: httpx.Client, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    ws = tmp_path / "ws"
    user = "bench:r1/victim"  # a "/" in the id: the route takes the rest of the path
    _add(client, user, "r1", f"Caroline: I keep a {VICTIM} near the door", "Mel: why that one?")
    _add(client, user, "r2", f"Caroline: because {VICTIM} reminds me of home",
         session="s2")
    body = {"request_id": "r3", "user_id": user, "session_id": "s3", "messages": [{"role": "user", "content": [
        {"type": "text", "text": f"a photo of the {VICTIM}"},
        {"type": "image_url", "image_url": {"url": IMAGE}}]}]}
    assert client.post("/v1/aml/add", json=body, headers=AUTH).status_code == 200
    _add(client, "other", "r1", f"Gina: my {OTHER} is blue")
    assert _search(client, user, "marmalade harbour") and _search(client, "other", "teapot lighthouse")
    services = client.services  # type: ignore[attr-defined]
    # index.db keeps no copy of Add's turns (issue 36.2: the file search reads the message index).
    assert services.file_index.sync_messages(services.log) == 0

    before = _scan(ws)  # the scan sees them before the delete: the text in the log (or its WAL), the words
    assert any(h["file"].startswith(".mateclaw/log.db") for h in before["victim"]), before["victim"]
    assert any(h["file"].startswith(".mateclaw/messages.db") for h in before["victim_word"]), before["victim_word"]
    # One copy of each message (issue 36.2): neither index keeps the text; messages.db reads the log's.
    assert not any(h["file"].startswith((".mateclaw/index.db", ".mateclaw/messages.db"))
                   for h in before["victim"]), before["victim"]
    assert before["image"] and before["victim_word"]

    assert client.delete(f"/v1/aml/users/{user}").status_code == 401  # authenticated like the other routes
    r = client.delete(f"/v1/aml/users/{user}", headers=AUTH)
    assert r.status_code == 200, r.text
    deleted = r.json()["deleted"]
    assert deleted["log.db:messages"] == 4 and deleted["log.db:requests"] == 3
    assert deleted["messages.db:docs"] == 4 and deleted["index.db:chunks"] == 0
    assert {s["db"] for s in r.json()["scrubbed"]} == {"log.db", "messages.db", "index.db"}

    after = _scan(ws)
    assert after["victim"] == [] and after["image"] == [] and after["victim_word"] == [], after
    assert any(h["file"].startswith(".mateclaw/log.db") for h in after["other"])  # positive control
    assert any(h["file"].startswith(".mateclaw/messages.db") for h in after["other_word"])
    assert _search(client, user, "marmalade harbour") == []
    assert _search(client, "other", "teapot lighthouse")[0]["content"].endswith(f"my {OTHER} is blue")

    # Its idempotency records went too: the same request id with another body is a new Add, not a 409.
    _add(client, user, "r1", "Caroline: a new start")
    assert [d["content"] for d in _search(client, user, "new start")] == ["[2023-05-08 Mon] Caroline: a new start"]
    again = client.delete(f"/v1/aml/users/{user}", headers=AUTH)
    assert again.json()["deleted"]["log.db:messages"] == 1
    assert client.delete(f"/v1/aml/users/{user}", headers=AUTH).json()["deleted"]["log.db:messages"] == 0

    # No log line of the whole exchange carried what was said.
    words = ("zorbleflax", "grumwhistle", "marmalade")
    assert not [rec.getMessage() for rec in caplog.records if any(w in rec.getMessage().lower() for w in words)]


def test_retention_expires_users_whose_last_add_is_older(tmp_path: Path) -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    settings = load_settings(workspace=tmp_path / "ws", overrides={"aml": {"retention-days": 30}})
    services = Services(settings, clock=clock)
    try:
        aml = services.aml
        aml.add("a1", "old", "s", [AmlMessage("user", f"I said {VICTIM} long ago")])
        clock.advance(days=20)
        aml.add("b1", "recent", "s", [AmlMessage("user", f"I said {OTHER} lately")])
        aml.add("a2", "kept", "s", [AmlMessage("user", "first words")])
        clock.advance(days=9)
        aml.add("a3", "kept", "s", [AmlMessage("user", "last words")])  # a newer Add keeps the whole user
        clock.advance(days=6)  # old: 35 days since its last Add; recent: 15; kept: 6
        assert services.aml_users.expire_due() == ["old"]
        assert services.aml_users.expire_due() == []  # once an hour
        assert aml.search("marmalade", "old", 5) == []
        assert aml.search("teapot", "recent", 5) and len(aml.search("words", "kept", 5)) == 2
        hits = _scan(tmp_path / "ws")
        assert hits["victim"] == [] and hits["victim_word"] == [] and hits["other"] and hits["other_word"]
        clock.advance(days=30)  # every user idle now; the scheduler's heartbeat (hourly gate passed) runs it
        services.aml_users._last_expiry = float("-inf")
        assert ("aml_retention", "2 user(s) deleted") in services.scheduler.tick_all()
    finally:
        services.close()


def test_retention_off_by_default(tmp_path: Path) -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    services = Services(load_settings(workspace=tmp_path / "ws"), clock=clock)
    try:
        services.aml.add("a1", "u", "s", [AmlMessage("user", "kept for ever")])
        clock.advance(timedelta(days=3650))
        assert services.settings.aml.retention_days == 0
        assert services.aml_users.expire() == [] and services.aml.search("ever", "u", 5)
    finally:
        services.close()


def test_model_mode_facts_and_their_jobs_go_too(tmp_path: Path, model_server: Any, clock: ManualClock,
                                                 model_settings_overrides: dict[str, Any]) -> None:
    fact = f"Melanie keeps a {OTHER} on the shelf"  # the other user's words come back as this user's fact
    model_server.reply_json({"facts": [{"text": f"Melanie keeps a {VICTIM} on the shelf", "sources": [1]}]})
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: UTC\n", encoding="utf-8")
    services = Services(load_settings(cfg, tmp_path / "ws", overrides=model_settings_overrides), clock=clock)
    try:
        aml = services.aml
        assert aml.facts is not None
        aml.add("r1", "victim", "s1", [AmlMessage("user", "Melanie: look at my shelf", TS)])
        assert aml.facts.run_pending() == 1
        model_server.reply_json({"facts": [{"text": fact, "sources": [1]}]})
        # The same request id as the victim's: jobs are keyed per user (another user's r1 gets its own).
        aml.add("r1", "other", "s1", [AmlMessage("user", "Melanie: and mine", TS)])
        assert aml.facts.run_pending() == 1
        assert any("fact:" in i.content for i in aml.search("marmalade harbour shelf", "victim", 5))
        deleted = services.aml_users.delete("victim")["deleted"]
        assert deleted["log.db:aml_facts"] == 1 and deleted["log.db:aml_fact_jobs"] == 1
        assert deleted["messages.db:docs"] == 2  # the turn and its fact
        hits = _scan(tmp_path / "ws")
        assert hits["victim"] == [] and hits["victim_word"] == []
        assert hits["other"] and hits["other_word"]
        assert aml.search("marmalade harbour shelf", "victim", 5) == []
        assert any(OTHER in i.content for i in aml.search("teapot lighthouse shelf", "other", 5))
    finally:
        services.close()


def test_a_fact_job_finishing_after_its_user_was_deleted_stores_nothing(
        tmp_path: Path, model_server: Any, clock: ManualClock, model_settings_overrides: dict[str, Any]) -> None:
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: UTC\n", encoding="utf-8")
    services = Services(load_settings(cfg, tmp_path / "ws", overrides=model_settings_overrides), clock=clock)
    try:
        aml = services.aml
        assert aml.facts is not None
        aml.add("r1", "victim", "s1", [AmlMessage("user", f"Melanie: my {VICTIM}", TS)])
        store = aml.facts.store
        job = store.job("r1", "victim")  # taken by the worker: the model is answering when the delete comes
        assert job is not None
        services.aml_users.delete("victim")
        store.finish(job, [(f"Melanie owns a {VICTIM}", [1], TS)], now_ms=TS)
        assert store.facts_since(0) == [] and store.job("r1", "victim") is None
        hits = _scan(tmp_path / "ws")
        assert hits["victim"] == [] and hits["victim_word"] == []
    finally:
        services.close()


class _AnotherProcessIndexes:
    """Where the file index's rows are deleted - after messages.db's, before the log's - another process
    sharing the files (its own connections and locks) catches its index up, as its next search does."""

    def __init__(self, ws: Path) -> None:
        self.path = ws / "no-file-index.db"  # (none here: nothing to scrub)
        self.log = ConversationLog(ws / "log.db")
        self.index = MessageIndex(ws / "messages.db")
        self.indexed = 0

    def delete_owner_messages(self, agent: str, owner: str) -> int:
        self.indexed += self.index.catch_up(self.log)
        return 0


def test_a_delete_leaves_nothing_another_process_indexed_meanwhile(tmp_path: Path) -> None:
    """An Add is indexed after its answer, so a user's last Adds may be in the log only while the user
    is deleted; another process indexing them between messages.db's rows and the log's must not leave
    them in messages.db (seen: one document and its words kept for good)."""
    clock = ManualClock(datetime(2024, 1, 1, tzinfo=UTC))
    log, index = ConversationLog(tmp_path / "log.db"), MessageIndex(tmp_path / "messages.db")
    other = _AnotherProcessIndexes(tmp_path)
    try:
        aml = AmlService(log, index, clock)
        index._indexer.stop()  # (the Add below stays in the log only until someone catches up)
        aml.add_json("r1", "victim", "s1", [AmlMessage("user", f"Caroline: {VICTIM}", TS)])
        aml.add_json("r1", "other", "s1", [AmlMessage("user", f"Gina: {OTHER}", TS)])
        assert aml.search("marmalade", "victim", 5)  # indexed (the search catches up)
        aml.add_json("r2", "victim", "s1", [AmlMessage("user", f"Caroline: again {VICTIM}", TS + 1)])
        users = AmlUsers(aml, clock, file_index=other, journal=Journal(tmp_path / "journal"))  # type: ignore[arg-type]
        deleted = users.delete("victim")["deleted"]
        assert other.indexed == 1  # the window was hit: the other process indexed the second Add in it
        assert deleted["messages.db:docs"] == 2 and deleted["log.db:messages"] == 2
        with sqlite3.connect(tmp_path / "messages.db") as conn:
            assert conn.execute("SELECT COUNT(*) FROM docs WHERE owner = 'victim'").fetchone()[0] == 0
        hits = _scan(tmp_path)
        assert not hits["victim_word"] and hits["other_word"]
        assert not aml.search("marmalade", "victim", 5) and aml.search("teapot", "other", 5)
    finally:
        for x in (index, log, other.index, other.log):
            x.close()
