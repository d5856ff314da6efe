"""Imports of existing chat history (issue 37.3): ChatGPT, Claude, Open WebUI exports and JSONL into
the conversation log with their own times, through the CLI (`mateclaw-mem import-chats`) and HTTP
(`POST /api/v1/memory/{agent}/import-chats`); idempotent, resumable, validated before the first row."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from mateclaw_mem.cli.main import main
from mateclaw_mem.conversations.imports.records import MalformedExport
from mateclaw_mem.conversations.imports.service import CHUNK_MESSAGES
from mateclaw_mem.conversations.imports.source import read_export
from mateclaw_mem.errors import TooLargeError
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from tests.support.model_server import ModelServer
from tests.support.server import serve_api

SECRET = "sk-" + "A1b2C3d4E5" * 4  # a fake API key, 40 characters after the prefix


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def node(nid: str, parent: str | None, children: list[str], role: str | None, text: str | None,
         at: str | None = None, **extra: Any) -> dict[str, Any]:
    message = None
    if role is not None:
        message = {"id": nid, "author": {"role": role, "name": None, "metadata": {}},
                   "create_time": ms(at) / 1000 if at else None,
                   "content": {"content_type": "text", "parts": [text]}, "status": "finished_successfully",
                   "recipient": "all", "metadata": extra}
    return {"id": nid, "message": message, "parent": parent, "children": children}


def chatgpt_export() -> list[dict[str, Any]]:
    """One conversation where the person edited their first question: the old branch (u1-a1) is not the
    one `current_node` ends on, the edited one (u1b-a1b-u2-a2) is."""
    mapping = {n["id"]: n for n in [
        node("root", None, ["sys"], None, None),
        node("sys", "root", ["u1", "u1b"], "system", "You are ChatGPT.", is_visually_hidden_from_conversation=True),
        node("u1", "sys", ["a1"], "user", "I work at Globex as a plumber.", "2023-03-01T09:00:00"),
        node("a1", "u1", [], "assistant", "OLD BRANCH answer", "2023-03-01T09:00:05"),
        node("u1b", "sys", ["a1b"], "user", "I work at Acme as an engineer, my name is Samuel.", "2023-03-01T09:01:00"),
        node("a1b", "u1b", ["u2"], "assistant", "Nice to meet you, Samuel.", "2023-03-01T09:01:05"),
        node("u2", "a1b", ["a2"], "user", f"Here is my key {SECRET} for the staging setup, keep it safe.",
             "2023-03-02T10:00:00"),
        node("a2", "u2", [], "assistant", "Please rotate that key.", "2023-03-02T10:00:07"),
    ]}
    return [{"id": "c-77", "title": "Intro", "create_time": ms("2023-03-01T08:59:00") / 1000,
             "current_node": "a2", "mapping": mapping}]


def claude_export() -> list[dict[str, Any]]:
    return [{"uuid": "cl-1", "name": "Trip", "created_at": "2024-05-01T08:00:00Z", "chat_messages": [
        {"uuid": "m1", "sender": "human", "text": "Plan my trip to Lisbon, itinerary attached.",
         "content": [{"type": "text", "text": "Plan my trip to Lisbon, itinerary attached."}],
         "created_at": "2024-05-01T08:00:10.123456Z",
         "attachments": [{"file_name": "itinerary.txt", "file_size": 40,
                          "extracted_content": "Flight TP1350 lands 14:05 on June 3"}], "files": []},
        {"uuid": "m2", "sender": "assistant", "text": "",
         "content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Day 1: Alfama."}],
         "created_at": "2024-05-01T08:00:30Z", "attachments": [], "files": []},
    ]}]


def openwebui_export() -> list[dict[str, Any]]:
    messages = {
        "q1": {"id": "q1", "parentId": None, "childrenIds": ["r1", "r1b"], "role": "user",
               "content": "Which tea should I buy?", "timestamp": 1717225200},
        "r1": {"id": "r1", "parentId": "q1", "childrenIds": [], "role": "assistant",
               "content": "REGENERATED AWAY", "timestamp": 1717225210},
        "r1b": {"id": "r1b", "parentId": "q1", "childrenIds": [], "role": "assistant",
                "content": "Try a Darjeeling.", "timestamp": 1717225260},
    }
    return [{"id": "ow-9", "title": "Tea", "created_at": 1717225100, "updated_at": 1717225260,
             "chat": {"id": "ow-9", "history": {"messages": messages, "currentId": "r1b"},
                      "messages": list(messages.values())}}]


def jsonl_text(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MATECLAW_WORKSPACE", str(tmp_path / "workspace"))
    (tmp_path / "cfg.yaml").write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    monkeypatch.setenv("MATECLAW_CONFIG", str(tmp_path / "cfg.yaml"))

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    assert run("init")[0] == 0
    return run


def rows(tmp_path: Path, conversation: str | None = None) -> list[tuple[str, str, str, int, str]]:
    db = sqlite3.connect(tmp_path / "workspace/.mateclaw/log.db")
    try:
        sql = "SELECT conversation_id, role, content, ts_ms, trigger_source FROM messages"
        args: tuple[str, ...] = ()
        if conversation is not None:
            sql, args = sql + " WHERE conversation_id = ?", (conversation,)
        return [tuple(r) for r in db.execute(sql + " ORDER BY id", args)]
    finally:
        db.close()


def write(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


# -- the formats ---------------------------------------------------------------------------------


def test_chatgpt_export_imports_the_active_branch_with_its_times_and_redacted(cli, tmp_path: Path) -> None:
    path = write(tmp_path, "conversations.json", chatgpt_export())
    code, out, err = cli("import-chats", str(path))
    assert code == 0, err
    got = rows(tmp_path)
    assert [(c, r, t) for c, r, _, t, _ in got] == [
        ("chatgpt:c-77", "user", ms("2023-03-01T09:01:00")), ("chatgpt:c-77", "assistant", ms("2023-03-01T09:01:05")),
        ("chatgpt:c-77", "user", ms("2023-03-02T10:00:00")), ("chatgpt:c-77", "assistant", ms("2023-03-02T10:00:07")),
    ]
    assert {src for *_, src in got} == {"import"}
    stored = " ".join(content for _, _, content, _, _ in got)
    assert "Globex" not in stored and "OLD BRANCH" not in stored  # the edited-away branch stays out
    assert SECRET not in stored and "[REDACTED:api_key]" in stored
    assert SECRET not in (tmp_path / "workspace/.mateclaw/log.db").read_bytes().decode("latin-1")
    assert "1 system" in out and "2 on an edited or regenerated branch" in out
    assert "2023-03-01 .. 2023-03-02" in out and "--as-of" in out


def test_claude_export_keeps_its_attachment_text_and_iso_times(cli, tmp_path: Path) -> None:
    path = write(tmp_path, "claude.json", claude_export())
    code, _, err = cli("import-chats", str(path), "--format", "claude")
    assert code == 0, err
    (c1, r1, t1, ts1, _), (_, r2, t2, ts2, _) = rows(tmp_path)
    assert (c1, r1, r2) == ("claude:cl-1", "user", "assistant")
    assert t1.startswith("Plan my trip to Lisbon") and "[attachment: itinerary.txt]" in t1 and "TP1350" in t1
    assert t2 == "Day 1: Alfama."  # the thinking block is left out
    assert ts1 == ms("2024-05-01T08:00:10.123") and ts2 == ms("2024-05-01T08:00:30")


def test_openwebui_export_follows_the_current_branch_and_unix_seconds(cli, tmp_path: Path) -> None:
    path = write(tmp_path, "chat-export-1717225999000.json", openwebui_export())
    code, out, err = cli("import-chats", str(path))  # told from the file
    assert code == 0, err
    assert [(c, r, t, ts) for c, r, t, ts, _ in rows(tmp_path)] == [
        ("openwebui:ow-9", "user", "Which tea should I buy?", 1717225200000),
        ("openwebui:ow-9", "assistant", "Try a Darjeeling.", 1717225260000),
    ]
    assert "(openwebui)" in out


def test_jsonl_groups_by_conversation_skips_system_lines_and_reads_every_time_spelling(cli, tmp_path: Path) -> None:
    path = write(tmp_path, "history.jsonl", jsonl_text([
        {"role": "system", "content": "be brief", "timestamp": 1700000000, "conversation": "a"},
        {"role": "user", "content": "first in a", "timestamp": 1700000001, "conversation": "a"},
        {"role": "user", "content": "first in b", "timestamp": "2023-11-14T23:00:00+01:00", "conversation": "b"},
        {"role": "assistant", "content": "second in a", "timestamp": 1700000002500, "conversation": "a"},
    ]))
    code, out, err = cli("import-chats", str(path), "--json")
    assert code == 0, err
    assert [(c, t, ts) for c, _, t, ts, _ in rows(tmp_path)] == [  # b began first: conversations go in date order
        ("jsonl:b", "first in b", ms("2023-11-14T22:00:00")),
        ("jsonl:a", "first in a", 1700000001000), ("jsonl:a", "second in a", 1700000002500),
    ]
    summary = json.loads(out)
    assert summary["format"] == "jsonl" and summary["skipped"] == {"system": 1} and summary["new_messages"] == 3


def test_a_zipped_export_is_read_from_its_conversations_json(cli, tmp_path: Path) -> None:
    import zipfile

    with zipfile.ZipFile(tmp_path / "export.zip", "w") as zf:
        zf.writestr("chat.html", "<html></html>")
        zf.writestr("conversations.json", json.dumps(chatgpt_export()))
    code, out, err = cli("import-chats", str(tmp_path / "export.zip"))
    assert code == 0, err
    assert len(rows(tmp_path)) == 4 and "export.zip/conversations.json (chatgpt)" in out


# -- idempotent, resumable ----------------------------------------------------------------------


def test_a_second_import_adds_nothing_and_says_so(cli, tmp_path: Path) -> None:
    path = write(tmp_path, "conversations.json", chatgpt_export())
    assert cli("import-chats", str(path))[0] == 0
    first = rows(tmp_path)
    code, out, _ = cli("import-chats", str(path))
    assert code == 10  # nothing to do
    assert rows(tmp_path) == first
    assert "added 0 messages" in out and "4 already in the log" in out and "nothing to hand over" in out


def test_an_export_where_a_conversation_grew_adds_only_its_new_messages(cli, tmp_path: Path) -> None:
    lines = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i}", "timestamp": 1700000000 + i,
              "conversation": "grow"} for i in range(6)]
    assert cli("import-chats", str(write(tmp_path, "h.jsonl", jsonl_text(lines[:4]))))[0] == 0
    code, out, _ = cli("import-chats", str(write(tmp_path, "h.jsonl", jsonl_text(lines))))
    assert code == 0
    assert [t for _, _, t, _, _ in rows(tmp_path)] == [f"message number {i}" for i in range(6)]
    assert "added 2 messages" in out and "4 already in the log" in out


def test_an_import_killed_after_a_chunk_continues_where_it_stopped(tmp_path: Path) -> None:
    n = CHUNK_MESSAGES * 2 + 17
    path = write(tmp_path, "big.jsonl", jsonl_text([
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"line {i} of a long chat about gardening",
         "timestamp": 1700000000 + i, "conversation": "long"} for i in range(n)]))
    settings = load_settings(write(tmp_path, "cfg.yaml", "timezone: UTC\n"), tmp_path / "workspace")

    class Killed(BaseException):
        pass

    def kill_after_first_chunk(phase: str, done: int, total: int) -> None:
        if phase == "write" and done >= CHUNK_MESSAGES:
            raise Killed

    services = Services(settings)
    try:
        services.seed_agents()
        imp = services.chat_import
        with pytest.raises(Killed):
            imp.run(imp.read(path, name="big.jsonl"), "default", progress=kill_after_first_chunk)
        assert len(rows(tmp_path)) == CHUNK_MESSAGES  # the committed chunk, whole
        summary = imp.run(imp.read(path, name="big.jsonl"), "default")
    finally:
        services.close()
    got = rows(tmp_path)
    assert [t for _, _, t, _, _ in got] == [f"line {i} of a long chat about gardening" for i in range(n)]
    assert summary.present_messages == CHUNK_MESSAGES and summary.new_messages == n - CHUNK_MESSAGES
    assert summary.extraction["conversations"] == 1  # handed over once the whole conversation is in


# -- checked before the first row ---------------------------------------------------------------


def test_a_malformed_export_names_file_and_record_and_imports_nothing(cli, tmp_path: Path) -> None:
    export = chatgpt_export()
    broken = json.loads(json.dumps(export[0]))
    broken["id"] = "abc"
    del broken["mapping"]["u2"]["message"]["author"]["role"]
    path = write(tmp_path, "conversations.json", [export[0], broken])
    code, out, err = cli("import-chats", str(path))
    assert code == 2 and out == ""
    assert f"{path}: conversation 2 (id abc): message 4 (node u2) has no author.role" in err
    assert "Traceback" not in err
    assert rows(tmp_path) == []  # conversation 1 neither


@pytest.mark.parametrize(("fmt", "data", "needle"), [
    ("claude", [{"uuid": "u", "chat_messages": [{"sender": "human", "text": "hi", "created_at": "yesterday"}]}],
     "x: conversation 1 (id u): message 1 has a created_at that is not an ISO-8601 time: 'yesterday'"),
    ("openwebui", [{"id": "w", "chat": {"history": {"messages": {"a": {"role": "user", "content": "x"}},
                                                    "currentId": "zz"}}}],
     "x: conversation 1 (id w): chat.history.currentId 'zz' is not a message of chat.history.messages"),
    ("jsonl", jsonl_text([{"role": "user", "content": "x", "timestamp": 1, "conversation": "c"},
                          {"role": "bot", "content": "y", "timestamp": 2, "conversation": "c"}]),
     "x: line 2 has role 'bot'; want user or assistant"),
    ("jsonl", '{"role": "user", "content": "x", "timestamp": 1}\n{"role": "user"',
     "x: line 1: no conversation (want a non-empty string)"),
    ("chatgpt", [{"id": "g", "current_node": "n2", "mapping": {"n2": {"id": "n2", "parent": "n1", "message": None}}}],
     "x: conversation 1 (id g): node n1 (the parent of node n2) is missing from its mapping"),
])
def test_each_format_names_the_broken_record(tmp_path: Path, fmt: str, data: Any, needle: str) -> None:
    path = write(tmp_path, "x", data)
    with pytest.raises(MalformedExport) as caught:
        read_export(path, name="x", fmt=fmt, tz=UTC)
    assert needle in caught.value.message


def test_a_named_format_the_file_is_not_and_an_undetectable_file_are_explained(cli, tmp_path: Path) -> None:
    path = write(tmp_path, "conversations.json", chatgpt_export())
    code, _, err = cli("import-chats", str(path), "--format", "claude")
    assert code == 2 and "looks like a chatgpt export, not claude (--format chatgpt" in err
    code, _, err = cli("import-chats", str(write(tmp_path, "odd.json", [{"sender": "x"}])))
    assert code == 2 and "cannot tell which export this is (its first record has sender)" in err
    code, _, err = cli("import-chats", str(tmp_path / "missing.json"))
    assert code == 3 and "no such file" in err


def test_the_size_limit_is_a_clear_error(tmp_path: Path) -> None:
    path = write(tmp_path, "conversations.json", chatgpt_export())
    with pytest.raises(TooLargeError, match=r"conversations\.json is larger than 100 bytes"):
        read_export(path, name="conversations.json", fmt=None, tz=UTC, max_bytes=100)


# -- dry run, estimate, extraction, dreams ------------------------------------------------------


def test_a_dry_run_writes_nothing_and_summarises(cli, tmp_path: Path) -> None:
    path = write(tmp_path, "conversations.json", chatgpt_export())
    code, out, _ = cli("import-chats", str(path), "--dry-run", "--json")
    assert code == 0 and rows(tmp_path) == []
    summary = json.loads(out)
    assert (summary["conversations"], summary["messages"], summary["new_messages"]) == (1, 4, 4)
    assert summary["first"] == "2023-03-01T10:01:00+01:00" and summary["last"] == "2023-03-02T11:00:07+01:00"
    assert summary["days"] == ["2023-03-01", "2023-03-02"] and summary["estimate"] is None  # rules mode
    assert summary["extraction"] == {}


def test_extract_and_dream_file_each_day_under_its_own_date(cli, tmp_path: Path) -> None:
    path = write(tmp_path, "conversations.json", chatgpt_export())
    code, out, err = cli("import-chats", str(path), "--dream", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["extraction"]["how"] == "now" and summary["extraction"]["scheduled"] == 1
    # What it learned (Acme, Samuel) was said on 03-01: filed under that day, not today nor the chat's last day.
    assert (tmp_path / "workspace/default/memory/2023-03-01.md").exists()
    assert not (tmp_path / "workspace/default/memory/2023-03-02.md").exists()  # that day said only a secret
    assert [d["day"] for d in summary["dreams"]] == ["2023-03-01", "2023-03-02"]
    assert all(d["status"] in ("done", "nothing_to_do", "skipped") for d in summary["dreams"]), summary["dreams"]
    assert "writing: 4/4 messages (100%)" in err and "dreaming: 2/2 days" in err  # progress, on stderr


def test_model_mode_estimates_the_extraction_and_the_budget_refuses_before_any_row(tmp_path: Path, monkeypatch,
                                                                                   capsys) -> None:
    answer = {"should_update": False, "reason": "nothing new", "edits": [], "daily_entry": None, "structured": []}
    long_chat = jsonl_text([{"role": "user" if i % 2 == 0 else "assistant",
                             "content": f"I am planning the garden, bed {i} gets tomatoes and basil this year.",
                             "timestamp": 1700000000 + 60 * i, "conversation": "garden"} for i in range(70)])
    path = write(tmp_path, "garden.jsonl", long_chat)
    with ModelServer(default=json.dumps(answer)) as model:
        cfg = write(tmp_path, "cfg.yaml", f"timezone: UTC\nmodel:\n  base-url: {model.base_url}\n  model: test-model\n")
        monkeypatch.setenv("MATECLAW_CONFIG", str(cfg))
        monkeypatch.setenv("MATECLAW_WORKSPACE", str(tmp_path / "workspace"))
        assert main(["init"]) == 0
        capsys.readouterr()
        assert main(["import-chats", str(path), "--dry-run", "--json"]) == 0
        estimate = json.loads(capsys.readouterr().out)["estimate"]
        assert estimate["calls"] == 3 and estimate["conversations"] == 1  # 70 messages, 30 a call
        assert main(["import-chats", str(path), "--max-tokens", str(estimate["total_tokens"] - 1)]) == 2
        err = capsys.readouterr().err
        assert f"over --max-tokens {estimate['total_tokens'] - 1}; nothing was imported" in err
        assert not model.chat_requests and rows(tmp_path) == []
        assert main(["import-chats", str(path), "--extract", "--max-tokens", str(estimate["total_tokens"])]) == 0
        sent = model.chat_requests
    # What was spent stays within the estimate (the server counts tokens by the same rule).
    assert 0 < len(sent) <= estimate["calls"]
    assert model.prompt_tokens <= estimate["prompt_tokens"]
    assert len(rows(tmp_path)) == 70


# -- HTTP ---------------------------------------------------------------------------------------


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path / "workspace", mcp=False)


def test_http_import_takes_a_multipart_file_or_the_raw_body_and_queues_extraction(client: httpx.Client,
                                                                                  tmp_path: Path) -> None:
    url = "/api/v1/memory/default/import-chats"
    body = json.dumps(chatgpt_export()).encode()
    r = client.post(url, params={"dryRun": "true"}, files={"file": ("conversations.json", body)})
    assert r.status_code == 200, r.text
    assert r.json()["dry_run"] is True and r.json()["new_messages"] == 4 and rows(tmp_path) == []
    r = client.post(url, files={"file": ("conversations.json", body)})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["format"] == "chatgpt" and out["new_messages"] == 4 and out["extraction"]["how"] == "queued"
    assert "/emergence" in out["next"]
    assert [ts for *_, ts, _ in rows(tmp_path)] == [ms("2023-03-01T09:01:00"), ms("2023-03-01T09:01:05"),
                                                     ms("2023-03-02T10:00:00"), ms("2023-03-02T10:00:07")]
    # The daemon's workers run the queued extraction: it files under the day the chat was held.
    assert client.services.extraction.wait_idle(timeout=30)  # type: ignore[attr-defined]
    assert (tmp_path / "workspace/default/memory/2023-03-01.md").exists()

    again = client.post(url, content=body, headers={"Content-Type": "application/json"})  # the raw body
    assert again.status_code == 200 and again.json()["new_messages"] == 0 and len(rows(tmp_path)) == 4
    lines = jsonl_text([{"role": "user", "content": "from the body", "timestamp": 1600000000, "conversation": "r"}])
    r = client.post(url, params={"format": "jsonl"}, content=lines, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 200 and rows(tmp_path, "jsonl:r") == [("jsonl:r", "user", "from the body", 1600000000000,
                                                                   "import")]
    # Past the app's general body limit (server.max-body-bytes, 2 MB): an export is bounded by the import's own.
    big = jsonl_text([{"role": "user", "content": f"note {i} " + "x" * 300, "timestamp": 1600000000 + i,
                       "conversation": "big"} for i in range(8000)])
    assert len(big) > client.services.settings.server.max_body_bytes  # type: ignore[attr-defined]
    r = client.post(url, content=big, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 200, r.text
    assert r.json()["new_messages"] == 8000 and len(rows(tmp_path, "jsonl:big")) == 8000


def test_http_import_refuses_a_malformed_export_naming_the_record(client: httpx.Client, tmp_path: Path) -> None:
    export = claude_export()
    del export[0]["chat_messages"][1]["sender"]
    r = client.post("/api/v1/memory/default/import-chats", files={"file": ("claude.json", json.dumps(export))})
    assert r.status_code == 400
    assert "claude.json: conversation 1 (id cl-1): message 2 has no sender" in r.text
    assert rows(tmp_path) == []
    assert client.post("/api/v1/memory/nobody/import-chats", content=b"[]").status_code == 404


def test_an_import_killed_with_sigkill_mid_way_is_completed_by_the_next_run_without_duplicates(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    n = 80_000  # seconds of writing: long enough to be killed in the middle on a loaded machine too
    path = write(tmp_path, "big.jsonl", jsonl_text([
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} about the allotment",
         "timestamp": 1700000000 + i, "conversation": f"c{i // 400}"} for i in range(n)]))
    cfg = write(tmp_path, "cfg.yaml", "timezone: UTC\n")
    env = {**os.environ, "MATECLAW_CONFIG": str(cfg), "MATECLAW_WORKSPACE": str(tmp_path / "workspace")}
    cmd = [sys.executable, "-m", "mateclaw_mem.cli.main", "import-chats", str(path)]
    assert subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", "init"], env=env,
                          capture_output=True, timeout=60).returncode == 0
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log_db = tmp_path / "workspace/.mateclaw/log.db"
    deadline = time.monotonic() + 60
    seen = 0  # rows seen before the kill
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            seen = len(rows(tmp_path)) if log_db.exists() else 0
        except sqlite3.Error:
            seen = 0
        if seen > 0:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    partial = rows(tmp_path)
    assert 0 < len(partial) < n, len(partial)  # killed mid-way
    per_conversation: dict[str, int] = {}
    for conv, *_ in partial:
        per_conversation[conv] = per_conversation.get(conv, 0) + 1
    # Committed a chunk at a time: a conversation (400 messages, one chunk) is whole or absent.
    assert set(per_conversation.values()) == {400}, per_conversation
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    # The interrupted import is finished at the next command's start (its journal, workspace/journal.py),
    # so the run itself then finds nothing new (exit 10).
    assert done.returncode == 10, done.stderr
    assert "interrupted import-chats" in done.stderr and "completed at start" in done.stderr
    got = [content for _, _, content, _, _ in rows(tmp_path)]
    assert len(got) == n and len(set(got)) == n  # every message once
