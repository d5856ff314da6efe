"""No secret anywhere: every secret pattern through every writer and every reader, and the one-time
redaction of a workspace an older version wrote raw.

Real parts only: temp workspaces, real SQLite, the scripted model server over HTTP, the real API under
uvicorn (AML), the real MCP server over stdio. The strongest check is `leaks`: the raw bytes of every
file of the workspace (memory files, history, archives, every SQLite database and its WAL).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.index.chunker import scopes_of
from mateclaw_mem.index.files.storage import tag
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.runtime.status import collect
from mateclaw_mem.settings import load_settings
from tests.conftest import TZ
from tests.support.model_server import ModelServer
from tests.support.server import ApiServer, daemon_services

AGENT = "default"
SCOPES = ("all", "memory", "profile", "persona", "conversations", "files")


@dataclass(frozen=True)
class Sample:
    rule: str
    phrase: str  # how it is said
    secret: str  # what must never come back

    @property
    def marks(self) -> tuple[str, ...]:
        """What counts as a leak: the secret, and its first 16 characters (a snippet may cut it)."""
        return (self.secret, self.secret[:16])


# One sample per redaction rule (tests/test_redaction.py proves each rule covers its pattern).
SAMPLES = [
    Sample("private_key", "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIQ7zkQ7zk\n-----END EC PRIVATE KEY-----",
           "MHcCAQEEIQ7zkQ7zk"),
    Sample("jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJRN3VzZXIifQ.Q7dozjgNryP4J3jVmNHl0w5N_XgL0n3I9P",
           "eyJzdWIiOiJRN3VzZXIifQ"),
    Sample("api_key", "sk-proj-Q7abcdefghijklmnopqrstuvwx0123", "sk-proj-Q7abcdefghijklmnopqrstuvwx0123"),
    Sample("aws_access_key", "AKIAQ7EXAMPLEKEY0123", "AKIAQ7EXAMPLEKEY0123"),
    Sample("aws_secret_key", "aws_secret_access_key = wJalrXUtnFEMIQ7/K7MDENG/bPxRfiCYQ7SECRET",
           "wJalrXUtnFEMIQ7/K7MDENG/bPxRfiCYQ7SECRET"),
    Sample("github_token", "ghp_Q7abcdefghijklmnopqrstuvwxyz0123456789", "ghp_Q7abcdefghijklmnopqrstuvwxyz0123456789"),
    Sample("gitlab_token", "glpat-Q7abcdefghij0123456789", "glpat-Q7abcdefghij0123456789"),
    Sample("slack_token", "xoxb-1234567890-Q7abcdefghij", "xoxb-1234567890-Q7abcdefghij"),
    Sample("google_api_key", "AIzaSyQ7" + "k" * 31, "AIzaSyQ7" + "k" * 31),
    Sample("stripe_key", "sk_live_Q7abcdefghijklmnop1234", "sk_live_Q7abcdefghijklmnop1234"),
    Sample("bearer_token", "Authorization: Bearer Q7abcdefghijklmnop.qrstuvwxyz", "Q7abcdefghijklmnop.qrstuvwxyz"),
    Sample("url_password", "postgres://bob:Q7s3cretpw@db.local/app", "Q7s3cretpw"),
    Sample("password", "the db password is Q7hunter2zz", "Q7hunter2zz"),
    Sample("password_zh", "服务器密码：Q7Passw0rd!", "Q7Passw0rd!"),
]
IDS = [s.rule for s in SAMPLES]


def said(sample: Sample) -> str:
    """A chat line holding the secret next to words a search for "staging setup" finds (no "Name:"
    in front: the message index would take it for a speaker)."""
    return f"staging setup today uses {sample.phrase}"


def found_in(text: str, samples: list[Sample] | tuple[Sample, ...]) -> list[str]:
    return [s.rule for s in samples if any(m in text for m in s.marks)]


def leaks(root: Path, samples: list[Sample] | tuple[Sample, ...]) -> list[str]:
    """"file: rule" for every file under `root` whose bytes hold a secret (or a lowercased one, as
    search tokens are), databases and their WAL included."""
    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for s in samples:
            if any(m.encode() in data or m.lower().encode() in data for m in s.marks):
                out.append(f"{path.relative_to(root)}: {s.rule}")
    return out


def make_services(root: Path, clock: ManualClock, server: ModelServer | None = None, **memory: Any) -> Services:
    for key in [k for k in os.environ if k.startswith("MATECLAW_")]:
        os.environ.pop(key)
    cfg = root / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    overrides: dict[str, Any] = {"mate": {"memory": memory}}
    if server is not None:
        overrides["model"] = {"base_url": server.base_url, "model": "test-model", "timeout_seconds": 5,
                              "max_retries": 0}
    services = Services(load_settings(cfg, root / "ws", overrides), clock)
    services.store.ensure_agent(AGENT)
    services.extraction.start()  # the workers, as the daemon runs them (extraction only)
    return services


@pytest.fixture
def make(tmp_path: Path, clock: ManualClock) -> Iterator[Any]:
    made: list[Services] = []

    def build(server: ModelServer | None = None, **memory: Any) -> Services:
        made.append(make_services(tmp_path, clock, server, **memory))
        return made[-1]

    yield build
    for s in made:
        s.close()


# -- writers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_the_conversation_log_never_holds_a_secret(make, sample: Sample) -> None:
    services = make()
    services.extraction.record_turn(AGENT, "c1", said(sample), f"Noted: {sample.phrase}")
    assert services.extraction.wait_idle(timeout=30)
    logged = " ".join(m.content for m in services.log.since(0))
    assert "staging setup today" in logged and "[REDACTED:" in logged
    assert found_in(logged, [sample]) == []
    assert leaks(services.settings.workspace, [sample]) == []


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_rules_mode_extraction_writes_no_secret(make, sample: Sample) -> None:
    services = make()
    services.extraction.record_turn(AGENT, "c1", f"Remember that the staging box uses {sample.phrase}", "Sure.")
    assert services.extraction.wait_idle(timeout=30)
    # The rules extractor ran and kept nothing: a placeholder is not a memory (issue 16.6).
    run = services.extraction.runs(limit=1)[0]
    assert run["outcome"] == "no_change" and "secret" in run["reason"], run
    assert leaks(services.settings.workspace, [sample]) == []


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_model_mode_extraction_redacts_text_keys_and_headings(make, model_server: ModelServer, sample: Sample) -> None:
    services = make(model_server)
    model_server.reply_json({
        "should_update": True, "reason": f"stored {sample.phrase}",
        "daily_entry": {"title": f"Staging {sample.phrase}", "body": f"- {sample.phrase}"},
        "memory_update": f"# MEMORY\n\n## Staging\n- {sample.phrase}\n",
        "profile_update": "",
        "structured": [{"type": "reference", "key": sample.phrase.replace("\n", " "), "text": sample.phrase}],
    })
    services.extraction.record_turn(AGENT, "c1", "hi", "hello")
    services.extraction.record_turn(AGENT, "c1", f"Remember this for staging please: {sample.phrase}", "Sure.")
    assert services.extraction.wait_idle(timeout=30)
    assert len(model_server.chat_requests) == 1
    assert found_in(json.dumps(model_server.chat_requests[0].body, ensure_ascii=False), [sample]) == []
    run = services.extraction.runs(limit=1)[0]
    assert run["outcome"] == "updated", run
    assert "[REDACTED:" in services.store.read(AGENT, "structured/reference.md").text
    assert leaks(services.settings.workspace, [sample]) == []


DAILY = datetime(2026, 11, 28, 14, 0, tzinfo=TZ)


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_a_model_dream_writes_no_secret_to_memory_the_archive_or_the_diary(
        make, model_server: ModelServer, sample: Sample) -> None:
    services = make(model_server)
    for day in (DAILY, DAILY.replace(day=29)):
        services.store.append_daily(AGENT, "Staging", "- The staging box runs on Fridays", actor="extraction",
                                    when=day)
    body = services.store.read(AGENT, "MEMORY.md").body
    model_server.reply_json({"should_update": True, "reason": f"kept the key {sample.phrase}",
                             "memory_content": body + f"\n## Staging\n\n- The staging box: {sample.phrase}\n"})
    out = services.dreaming.dream(AGENT)
    assert out.status == "done", out.reason
    assert "[REDACTED:" in services.store.read(AGENT, "MEMORY.md").text
    assert "[REDACTED:" in services.store.read(AGENT, "DREAMS.md").text
    assert found_in(out.reason, [sample]) == []
    assert leaks(services.settings.workspace, [sample]) == []


ENTRIES = [(f"entry-{i}", f"Fact number {i} about the person.") for i in range(8)]


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_structured_consolidation_writes_no_secret(make, model_server: ModelServer, sample: Sample) -> None:
    services = make(model_server)
    for key, text in ENTRIES:
        services.structured.remember(AGENT, "user", key, text, actor="api")
    model_server.reply_json({
        "entries": [{"key": "entry-0", "text": f"Merged: {sample.phrase}", "merged_from": ["entry-1"]},
                    *({"key": k, "text": t, "merged_from": []} for k, t in ENTRIES[2:7])],
        "dropped": [{"key": "entry-7", "reason": f"obsolete since {sample.phrase}"}],
    })
    report = services.structured_consolidation.run(AGENT)
    assert [b.status for b in report.buckets] == ["updated"], report.as_dict()
    assert "[REDACTED:" in services.store.read(AGENT, "structured/user.md").text
    assert found_in(json.dumps(report.as_dict(), ensure_ascii=False), [sample]) == []
    assert leaks(services.settings.workspace, [sample]) == []


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_remember_redacts_the_key_and_the_text(make, sample: Sample) -> None:
    services = make()
    result = services.structured.remember(AGENT, "reference", sample.phrase, f"staging uses {sample.phrase}",
                                          actor="tool", source=sample.phrase)
    assert result.created and "[REDACTED:" in result.entry.key
    text = services.store.read(AGENT, "structured/reference.md").text
    assert any(line.startswith("## ") and "[REDACTED:" in line for line in text.splitlines())  # the heading
    assert leaks(services.settings.workspace, [sample]) == []


# -- readers ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """One workspace every sample went into through the product: chat turns (log and indexes) and
    `remember` with a secret key and text."""
    root = tmp_path_factory.mktemp("world")
    services = make_services(root, ManualClock(datetime(2026, 11, 30, 9, 15, tzinfo=TZ)))
    for i, sample in enumerate(SAMPLES):
        services.extraction.record_turn(AGENT, f"c{i}", said(sample), "Noted the staging setup.")
        services.structured.remember(AGENT, "project", sample.phrase.replace("\n", " "), said(sample), actor="tool")
    assert services.extraction.wait_idle(timeout=60)
    services.file_index.sync_messages(services.log)
    yield services
    services.close()


def test_search_in_every_scope_returns_no_secret(world: Services) -> None:
    conversation_hits = 0
    for scope in SCOPES:
        result = world.search.search("staging setup", agent=AGENT, scope=scope, limit=50)
        conversation_hits += sum(h.kind == "conversation" for h in result.hits) if scope == "conversations" else 0
        assert found_in(json.dumps(result.to_dict(), ensure_ascii=False), SAMPLES) == [], scope
    assert conversation_hits >= len(SAMPLES)  # every logged turn was searchable, redacted


def test_the_prompt_for_a_query_holds_no_secret(world: Services) -> None:
    ctx = world.context.build(AGENT, query="what was the staging setup today?")
    assert ctx.recalled is not None and "[REDACTED:" in ctx.recalled.text  # past turns were recalled
    assert found_in(json.dumps(ctx.as_dict(), ensure_ascii=False, default=str), SAMPLES) == []
    assert found_in(ctx.system, SAMPLES) == []


def test_mcp_search_memory_returns_no_secret(world: Services) -> None:
    workspace = world.settings.workspace
    params = StdioServerParameters(command=sys.executable, cwd=str(workspace.parent),
                                   args=["-m", "mateclaw_mem.cli.main", "mcp", "--workspace", str(workspace)])

    async def main() -> list[str]:
        async with Client(params, read_timeout_seconds=60) as client:
            out = []
            for scope in ("all", "conversations"):
                result = await client.call_tool("search_memory", {"query": "staging setup", "scope": scope,
                                                                  "limit": 50})
                out.append("\n".join(c.text for c in result.content if getattr(c, "type", "") == "text"))
            return out

    texts = anyio.run(main)
    assert all("[REDACTED:" in t for t in texts), texts
    assert found_in("\n".join(texts), SAMPLES) == []


def test_aml_messages_and_model_facts_come_back_redacted_over_http(tmp_path: Path, model_server: ModelServer) -> None:
    # The model states each secret as a fact of the message it cites.
    def facts(body: dict[str, Any]) -> str:
        prompt = json.dumps(body["messages"], ensure_ascii=False)
        sample = next(s for s in SAMPLES if f"[{s.rule}]" in prompt)
        return json.dumps({"facts": [{"text": f"The staging setup uses {sample.phrase}", "sources": [1]}]})

    model_server.responder = facts
    services = daemon_services(tmp_path / "ws", model={"base_url": model_server.base_url, "model": "test-model",
                                                       "timeout_seconds": 5, "max_retries": 0})
    from mateclaw_mem.api.app import create_app

    try:
        with ApiServer(create_app(services, mcp=False)) as server, httpx.Client(base_url=server.url,
                                                                                 timeout=30) as client:
            for i, sample in enumerate(SAMPLES):
                r = client.post("/v1/aml/add", json={
                    "request_id": f"r{i}", "user_id": "u1", "session_id": f"s{i}",
                    "messages": [{"role": "user", "content": f"{said(sample)} [{sample.rule}]"}]})
                assert r.status_code == 200, r.text
                assert services.aml.facts is not None
                services.aml.facts.run_pending()  # the worker may have taken it: either way it is done now
            assert services.aml.facts.store.counts().get("done") == len(SAMPLES)
            r = client.post("/v1/aml/search", json={"query": "staging setup", "user_id": "u1", "top_k": 100})
            assert r.status_code == 200, r.text
            items = r.json()["data"]
    finally:
        services.close()
    assert sum(i["id"].startswith("f") for i in items) == len(SAMPLES)  # every fact came back...
    assert sum(i["id"].startswith("m") for i in items) == len(SAMPLES)  # ...and every message
    assert found_in(json.dumps(items, ensure_ascii=False), SAMPLES) == []
    assert leaks(tmp_path / "ws", SAMPLES) == []


# -- an existing workspace, written raw by an older version ---------------------------------------------


RAW = SAMPLES[2], SAMPLES[12]  # an API key and a password


def _old_workspace(state: Path) -> None:
    """log.db, messages.db and index.db as an older version left them: the secrets stored raw."""
    state.mkdir(parents=True)
    turns = [(1, "user", "What did we set up for staging?"), (2, "user", f"staging uses {RAW[0].phrase}"),
             (3, "assistant", f"Noted the staging box, and {RAW[1].phrase}")]
    with sqlite3.connect(state / "log.db") as db:
        db.executescript("""
            CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, agent TEXT NOT NULL,
                owner TEXT NOT NULL DEFAULT '', conversation_id TEXT NOT NULL, role TEXT NOT NULL,
                content TEXT NOT NULL, ts_ms INTEGER NOT NULL, trigger_source TEXT NOT NULL DEFAULT 'chat',
                finish_reason TEXT, memoryless INTEGER NOT NULL DEFAULT 0, request_id TEXT,
                created_ms INTEGER NOT NULL);
            CREATE TABLE aml_facts (id INTEGER PRIMARY KEY AUTOINCREMENT, agent TEXT NOT NULL,
                owner TEXT NOT NULL, conversation_id TEXT NOT NULL, text TEXT NOT NULL, source_ids TEXT NOT NULL,
                ts_ms INTEGER NOT NULL, job_id INTEGER NOT NULL, created_ms INTEGER NOT NULL);""")
        db.executemany("INSERT INTO messages (id, agent, conversation_id, role, content, ts_ms, created_ms)"
                       " VALUES (?, 'default', 'c1', ?, ?, 1764490000000, 1764490000000)", turns)
        db.execute("INSERT INTO aml_facts VALUES (1, 'default', '', 'c1', ?, '[2]', 1764490000000, 1, 0)",
                   (f"The staging setup uses {RAW[0].phrase}",))
    with sqlite3.connect(state / "messages.db") as db:
        db.executescript("""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE docs (id INTEGER PRIMARY KEY, agent TEXT NOT NULL, owner TEXT NOT NULL,
                conversation_id TEXT NOT NULL, role TEXT NOT NULL, speaker TEXT, content TEXT NOT NULL,
                ts_ms INTEGER NOT NULL, is_question INTEGER NOT NULL, body_len INTEGER NOT NULL,
                ctx_len INTEGER NOT NULL, nb_len INTEGER NOT NULL);
            CREATE VIRTUAL TABLE fts USING fts5(okey, body, ctx, nb, dt, tokenize='unicode61');""")
        from mateclaw_mem.index.messages.storage import FACT_BASE
        from mateclaw_mem.index.tokenizer import TOKENIZER_VERSION

        db.execute("INSERT INTO meta VALUES ('tokenizer', ?), ('watermark', '3'), ('fact_watermark', ?)",
                   (TOKENIZER_VERSION, str(FACT_BASE + 1)))
        docs = [*turns, (FACT_BASE + 1, "fact", f"The staging setup uses {RAW[0].phrase}")]
        for doc_id, role, content in docs:
            db.execute("INSERT INTO docs VALUES (?, 'default', '', 'c1', ?, NULL, ?, 1764490000000, 0, 5, 0, 5)",
                       (doc_id, role, content))
            # The raw words in the turn's own field and in its neighbours' (as the old indexer did).
            db.execute("INSERT INTO fts (rowid, okey, body, ctx, nb, dt) VALUES (?, ?, ?, ?, ?, '')",
                       (doc_id, "k", content.lower(), content.lower(), content.lower()))
    with sqlite3.connect(state / "index.db") as db:
        db.executescript("""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE files (id INTEGER PRIMARY KEY, agent TEXT NOT NULL, owner TEXT NOT NULL, rel TEXT NOT NULL,
                kind TEXT NOT NULL, mtime REAL NOT NULL, size INTEGER NOT NULL, sha TEXT NOT NULL,
                indexed_ms INTEGER NOT NULL);
            CREATE TABLE chunks (id INTEGER PRIMARY KEY, file_id INTEGER, agent TEXT NOT NULL, owner TEXT NOT NULL,
                rel TEXT NOT NULL, kind TEXT NOT NULL, title TEXT NOT NULL, line_start INTEGER NOT NULL,
                line_end INTEGER NOT NULL, text TEXT NOT NULL, sha TEXT NOT NULL, ntok INTEGER NOT NULL, day TEXT,
                ts_ms INTEGER, conversation_id TEXT, message_id INTEGER);
            CREATE UNIQUE INDEX files_key_old ON files (agent, owner, rel);
            CREATE INDEX chunks_file_old ON chunks (file_id);
            CREATE VIRTUAL TABLE fts USING fts5(title, body, tag, tokenize='unicode61');""")
        from mateclaw_mem.index.tokenizer import TOKENIZER_VERSION

        db.execute("INSERT INTO meta VALUES ('tokenizer', ?), ('messages_watermark', '3')", (TOKENIZER_VERSION,))
        tags = " ".join([tag("a", "default"), tag("o", ""), *(tag("s", s) for s in scopes_of("conversation"))])
        for doc_id, role, content in turns:
            db.execute("INSERT INTO chunks VALUES (?, NULL, 'default', '', 'conversations/c1', 'conversation', ?,"
                       " 0, 0, ?, 'x', 5, NULL, 1764490000000, 'c1', ?)", (doc_id, f"{role} message {doc_id}",
                                                                          content, doc_id))
            db.execute("INSERT INTO fts (rowid, title, body, tag) VALUES (?, '', ?, ?)",
                       (doc_id, content.lower(), tags))


def _everything_stored(state: Path) -> str:
    """Every value of every table (FTS5 shadow tables included) of the three databases, as text."""
    out = []
    for name in ("log.db", "messages.db", "index.db"):
        with sqlite3.connect(state / name) as db:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for t in tables:
                for row in db.execute(f'SELECT * FROM "{t}"'):
                    out.extend(v.decode("latin-1") if isinstance(v, bytes) else str(v) for v in row)
        db.close()
    return "\n".join(out)


def test_an_existing_workspace_is_redacted_once_in_place_and_status_counts_it(tmp_path: Path, clock) -> None:
    state = tmp_path / "ws" / ".mateclaw"
    _old_workspace(state)
    assert found_in(_everything_stored(state), RAW) == [s.rule for s in RAW]  # the old way: raw

    services = make_services(tmp_path, clock)
    try:
        report = collect(services)["redaction"]
        assert report["redacted_in_place"] == {
            "log.db": {"messages": 2, "aml_facts": 1}, "index.db": 2, "messages.db": 3}, report
        assert report["total"] == 8
        hits = services.search.search("staging", agent=AGENT, scope="conversations", limit=10).hits
        redacted = {h.message_id for h in hits if "[REDACTED:" in h.snippet}
        assert redacted == {2, 3}, hits
        found = services.message_index.search(AGENT, "", "staging setup", limit=10)
        assert {h.id for h in found} >= {2} and all("[REDACTED:" in h.content for h in found if h.id != 1)
    finally:
        services.close()
    stored = _everything_stored(state)
    assert found_in(stored, RAW) == []
    assert found_in(stored.lower(), [Sample(s.rule, s.phrase, s.secret.lower()) for s in RAW]) == []  # tokens
    assert leaks(tmp_path / "ws", RAW) == []  # not even in freed pages or the WAL

    again = make_services(tmp_path, clock)  # once: the markers stay, the counts with them
    try:
        assert collect(again)["redaction"]["total"] == 8
    finally:
        again.close()
