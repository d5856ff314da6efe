"""The HTTP API (memory, workspace, health, auth, MCP over HTTP) against a real uvicorn server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from tests.support.server import serve_api

KEY = "api-key-\u00e9-never-shown"
WS = "/api/v1/agents/default/workspace/memory"
MEM = "/api/v1/memory/default"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path / "ws")


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path / "ws", api_key=KEY)


def reason(r: httpx.Response) -> str:
    detail = r.json()["detail"]
    assert isinstance(detail["reason"], str) and detail["reason"]
    return detail["reason"]


# ---------------------------------------------------------------------------- health and docs


def test_health_says_mode_version_and_index_without_auth(keyed: httpx.Client) -> None:
    r = keyed.get("/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["mode"] == "rules" and body["version"]
    assert body["auth"] is True
    assert "index" in body
    assert KEY not in r.text


def test_openapi_lists_every_area(client: httpx.Client) -> None:
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    for path in (
        "/health",
        "/api/v1/memory/{agentId}/conversations/{conversationId}/turns",
        "/api/v1/memory/{agentId}/summarize/{conversationId}",
        "/api/v1/memory/{agentId}/emergence",
        "/api/v1/memory/{agentId}/structured-consolidation",
        "/api/v1/memory/{agentId}/dreaming/status",
        "/api/v1/memory/{agentId}/context",
        "/api/v1/agents/{agentId}/workspace/memory",
        "/api/v1/agents/{agentId}/workspace/memory/file",
        "/api/v1/agents/{agentId}/workspace/memory/search",
        "/api/v1/agents/{agentId}/workspace/memory/history",
        "/api/v1/agents/{agentId}/workspace/memory/undo",
        "/v1/aml/add",
    ):
        assert path in paths, path


# ---------------------------------------------------------------------------- workspace tools


def test_list_read_write_edit_round_trip(client: httpx.Client) -> None:
    files = client.get(WS).json()["files"]
    assert [f["path"] for f in files][:4] == ["AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"]
    r = client.put(f"{WS}/file", json={"path": "notes/ideas.md", "content": "# Ideas\n\n- a kite\n"})
    assert r.status_code == 200, r.text
    assert r.json()["changed"] is True
    new = next(f for f in client.get(WS, params={"prefix": "notes/"}).json()["files"])
    assert new["path"] == "notes/ideas.md" and new["enabled"] is False  # new files are not injected by surprise
    r = client.post(f"{WS}/file/edit", json={"path": "notes/ideas.md", "old": "a kite", "new": "a red kite"})
    assert r.status_code == 200 and r.json()["replacements"] == 1
    got = client.get(f"{WS}/file", params={"path": "notes/ideas.md"}).json()
    assert "- a red kite" in got["content"] and len(got["sha"]) == 64


def test_compare_and_swap_conflict_is_409_and_keeps_the_file(client: httpx.Client) -> None:
    old = client.get(f"{WS}/file", params={"path": "MEMORY.md"}).json()
    assert client.put(f"{WS}/file", json={"path": "MEMORY.md", "content": "## A\nfirst\n",
                                          "expected_sha": old["sha"]}).status_code == 200
    r = client.put(f"{WS}/file", json={"path": "MEMORY.md", "content": "## B\nlost\n", "expected_sha": old["sha"]})
    assert r.status_code == 409 and "changed since it was read" in reason(r)
    assert "first" in client.get(f"{WS}/file", params={"path": "MEMORY.md"}).json()["content"]


def test_enable_disable_history_and_undo(client: httpx.Client) -> None:
    client.put(f"{WS}/file", json={"path": "extra.md", "content": "extra\n"})
    assert client.post(f"{WS}/file/enable", json={"path": "extra.md"}).status_code == 200
    assert next(f for f in client.get(WS).json()["files"] if f["path"] == "extra.md")["enabled"] is True
    client.post(f"{WS}/file/disable", json={"path": "extra.md"})
    assert next(f for f in client.get(WS).json()["files"] if f["path"] == "extra.md")["enabled"] is False
    hist = client.get(f"{WS}/history", params={"path": "extra.md"}).json()["versions"]
    assert [v["actor"] for v in hist] == ["api", "api", "api"]
    r = client.post(f"{WS}/undo", json={"path": "extra.md"})
    assert r.status_code == 200
    assert next(f for f in client.get(WS).json()["files"] if f["path"] == "extra.md")["enabled"] is True


def test_a_person_writing_through_the_api_is_never_cut(client: httpx.Client) -> None:
    big = "## Long\n" + "word " * 2000 + "\n"  # over the 8,000-char MEMORY.md ceiling
    r = client.put(f"{WS}/file", json={"path": "MEMORY.md", "content": big, "by_person": True})
    assert r.status_code == 200 and r.json()["archived"] == []
    r = client.put(f"{WS}/file", json={"path": "MEMORY.md", "content": big + "## More\nx\n"})
    # A machine write over the person's text: theirs is not cut, and the new section lands in the
    # file (over budget, flagged by status) instead of going straight to the archive.
    assert r.status_code == 200 and r.json()["archived"] == []
    text = client.get(f"{WS}/file", params={"path": "MEMORY.md"}).json()["content"]
    assert big in text and "## More\nx" in text
    # The next machine write: the older machine section is what the ceiling moves out, never the person's.
    r = client.put(f"{WS}/file", json={"path": "MEMORY.md", "content": big + "## More\nx\n" + "## Bulk\n" + "y " * 200})
    assert r.status_code == 200 and r.json()["archived"]
    text = client.get(f"{WS}/file", params={"path": "MEMORY.md"}).json()["content"]
    assert big in text and "## Bulk" in text and "## More" not in text


@pytest.mark.parametrize(
    "method, path, kwargs, status, words",
    [
        ("get", f"{WS}/file", {"params": {"path": "../../etc/passwd.md"}}, 400, "'..'"),
        ("get", f"{WS}/file", {"params": {"path": "missing.md"}}, 404, "does not exist"),
        ("get", f"{WS}/file", {"params": {"path": "notes.txt"}}, 422, "path"),
        ("get", "/api/v1/agents/-bad!/workspace/memory", {}, 422, "agentId"),
        ("post", f"{WS}/file/edit", {"json": {"path": "MEMORY.md", "old": "absent", "new": "x"}}, 400, "not found"),
        ("post", f"{WS}/undo", {"json": {"path": "never.md"}}, 404, "no earlier versions"),
    ],
)
def test_errors_have_a_reason_and_the_right_status(client, method, path, kwargs, status, words) -> None:
    r = getattr(client, method)(path, **kwargs)
    assert r.status_code == status, r.text
    assert words in reason(r)


def test_validation_errors_are_422_with_field_details(client: httpx.Client) -> None:
    r = client.put(f"{WS}/file", json={"path": "x.md"})
    assert r.status_code == 422
    assert "content" in reason(r)
    assert r.json()["detail"]["errors"][0]["loc"][-1] == "content"
    r = client.post(f"{MEM}/conversations/c1/turns", json={"user": "hi", "trigger_source": "mail"})
    assert r.status_code == 422 and "trigger_source" in reason(r)


# ---------------------------------------------------------------------------- auth


def test_key_guards_every_route_but_health(keyed: httpx.Client) -> None:
    assert keyed.get(WS).status_code == 401
    assert keyed.get(WS, headers={"X-Api-Key": "wrong"}).status_code == 403
    r = keyed.get(WS, headers={"Authorization": b"Bearer " + KEY.encode()})
    assert r.status_code == 200
    r = keyed.post(f"{MEM}/conversations/c1/turns", json={"user": "hello"})
    assert r.status_code == 401 and KEY not in r.text
    for path in ("/mcp", "/agents/helper/mcp", "/mcp/agents/helper"):  # the key first, then the agent
        r = keyed.post(path, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                       headers={"accept": "application/json, text/event-stream"})
        assert r.status_code == 401 and KEY not in r.text
    assert keyed.get("/health").status_code == 200


# ---------------------------------------------------------------------------- memory lifecycle


def test_turn_is_recorded_at_once_and_explicit_remember_lands_in_files(client: httpx.Client) -> None:
    services = client.services  # type: ignore[attr-defined]
    r = client.post(f"{MEM}/conversations/c1/turns",
                    json={"user": "remember that my sister is called Ada", "assistant": "Noted."})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["recorded"] is True and body["extraction"]["scheduled"] is True
    assert services.extraction.wait_idle(30)
    found = client.get(f"{WS}/search", params={"q": "sister Ada"}).json()["hits"]
    assert found, "the extracted fact should be searchable in the files"
    r = client.post(f"{MEM}/conversations/c2/turns", json={"user": "ok", "memoryless": True})
    assert r.status_code == 202 and r.json()["extraction"]["scheduled"] is False


def test_summarize_runs_extraction_now(client: httpx.Client) -> None:
    client.post(f"{MEM}/conversations/c9/turns",
                json={"user": "I moved to Lisbon last month and I work as a nurse", "assistant": "Nice!"})
    client.services.extraction.wait_idle(30)  # type: ignore[attr-defined]
    r = client.post(f"{MEM}/summarize/c9")
    assert r.status_code == 200, r.text
    assert r.json()["outcome"] in ("updated", "no_change", "skipped")


def test_context_assembles_enabled_files_for_an_owner(client: httpx.Client) -> None:
    profile = client.get(f"{WS}/file", params={"path": "PROFILE.md"}).json()["content"]
    r = client.put(f"{WS}/file", json={"path": "PROFILE.md", "content": profile + "\n- favourite tea: sencha\n"})
    assert r.status_code == 200, r.text
    r = client.post(f"{MEM}/context", json={"query": "what tea do I like?", "endUserId": "u1"})
    assert r.status_code == 200, r.text
    ctx = r.json()
    assert ctx["messages"][0]["role"] == "system" and "sencha" in ctx["messages"][0]["content"]
    assert ctx["messages"][-1] == {"role": "user", "content": "what tea do I like?"}
    assert "enabled: true" not in ctx["messages"][0]["content"]  # frontmatter never injected


def test_structured_consolidation_and_dreaming(client: httpx.Client) -> None:
    r = client.post(f"{MEM}/structured-consolidation")
    assert r.status_code == 200, r.text
    assert {"ownersConsolidated", "updated", "entriesBefore", "entriesAfter"} <= set(r.json())
    r = client.post(f"{MEM}/emergence", json={})
    assert r.status_code in (200, 502), r.text
    r = client.get(f"{MEM}/dreaming/status")
    assert r.status_code == 200, r.text


# ---------------------------------------------------------------------------- MCP over HTTP


def test_mcp_is_mounted_and_speaks_the_protocol(client: httpx.Client) -> None:
    url = str(client.base_url) + "/mcp?tools=all"

    async def session() -> tuple[set[str], str]:
        async with Client(url) as mcp:
            names = {t.name for t in (await mcp.list_tools()).tools}
            await mcp.call_tool("create", {"path": "/memories/from-mcp.md", "file_text": "via http\n"})
            viewed = await mcp.call_tool("view", {"path": "/memories/from-mcp.md"})
            return names, viewed.content[0].text

    names, text = anyio.run(session)
    assert {"view", "create", "list_workspace_memory_files", "read_workspace_memory_file"} <= names
    assert "via http" in text
    assert "via http" in client.get(f"{WS}/file", params={"path": "from-mcp.md"}).json()["content"]


def test_mcp_serves_any_agent_under_its_own_path(client: httpx.Client) -> None:
    base = str(client.base_url)
    assert client.post("/api/v1/agents", json={"agentId": "helper"}).status_code == 201

    async def session() -> tuple[str, str, str, Any]:
        async with Client(base + "/agents/helper/mcp?tools=all") as mcp:
            info = mcp.server_info
            await mcp.call_tool("create", {"path": "/memories/helper-only.md", "file_text": "helper notes\n"})
            await mcp.call_tool("remember", {"type": "user", "key": "tea", "text": "Likes sencha"})
            mine = (await mcp.call_tool("view", {"path": "/memories"})).content[0].text
        async with Client(base + "/mcp?tools=all") as mcp:  # the default agent sees none of it
            default = (await mcp.call_tool("view", {"path": "/memories"})).content[0].text
        async with Client(base + "/agents/helper/mcp?tools=all") as mcp:
            recalled = (await mcp.call_tool("recall", {"type": "user"})).content[0].text
        return mine, default, recalled, info

    mine, default, recalled, info = anyio.run(session)
    assert info.name == "mateclaw-mem (helper)"
    assert "helper-only.md" in mine and "helper-only.md" not in default
    assert "sencha" in recalled
    r = client.get("/api/v1/agents/helper/workspace/memory/file", params={"path": "helper-only.md"})
    assert r.status_code == 200 and "helper notes" in r.json()["content"]
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"accept": "application/json, text/event-stream"}
    r = client.post("/agents/.hidden/mcp", json=rpc, headers=accept)
    assert r.status_code == 404 and "invalid agent name" in r.json()["detail"]["reason"]
    r = client.post("/mcp/agents/helper", json=rpc, headers=accept)  # the old path says where MCP moved
    assert r.status_code == 404 and "/agents/helper/mcp" in r.json()["detail"]["reason"]


def test_structured_remember_recall_forget_over_http(client: httpx.Client) -> None:
    base = "/api/v1/agents/default/structured"
    r = client.post(base, json={"type": "user", "key": "language", "text": "Prefers German for docs"})
    assert r.status_code == 200, r.text
    assert r.json()["created"] is True and r.json()["entry"]["key"] == "language"
    assert client.get(base, params={"type": "user", "key": "lang"}).status_code == 404  # whole keys only
    found = client.get(base, params={"type": "user", "key": "language"}).json()["entries"]
    assert [e["text"] for e in found] == ["Prefers German for docs"]
    assert client.post(base, json={"type": "mood", "key": "k", "text": "x"}).status_code == 422
    gone = client.delete(f"{base}/user/language")
    assert gone.status_code == 200 and gone.json()["key"] == "language"
    assert client.get(base).json()["entries"] == []
    assert client.delete(f"{base}/user/language").status_code == 404


# ---------------------------------------------------------------------------- failures keep the connection


def _raw_exchange(url: str, requests: list[bytes]) -> list[bytes]:
    """Send each request on ONE keep-alive connection; the status line of each answer (b"" once
    the server has closed the connection instead of answering)."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    lines: list[bytes] = []
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        reader = sock.makefile("rb")
        for request in requests:
            try:
                sock.sendall(request)
                status = reader.readline()
            except OSError:  # reset: the server closed the connection
                status = b""
            lines.append(status.strip())
            if not status:
                break
            length = 0
            while (header := reader.readline().strip()):
                name, _, value = header.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            reader.read(length)
    return lines


def _put(path: str, content: str) -> bytes:
    import json

    body = json.dumps({"path": path, "content": content}).encode()
    return (f"PUT {WS}/file HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def test_a_file_system_failure_is_an_answer_with_a_reason_and_the_connection_lives(client: httpx.Client) -> None:
    (client.services.store.root / "default" / "memory").write_text("a file where a folder belongs")  # type: ignore[attr-defined]
    r = client.put(f"{WS}/file", json={"path": "memory/note.md", "content": "x"})
    assert r.status_code == 409, r.text
    assert "not a folder" in reason(r) and str(client.services.store.root) not in reason(r)  # type: ignore[attr-defined]
    # On one keep-alive connection: the failed write is answered, and the next request is too.
    statuses = _raw_exchange(str(client.base_url), [_put("memory/note.md", "x"), _put("MEMORY.md", "# M\n")])
    assert statuses == [b"HTTP/1.1 409 Conflict", b"HTTP/1.1 200 OK"]


def test_an_unexpected_error_is_a_500_with_a_reason_and_the_connection_lives() -> None:
    from mateclaw_mem.api.guards import AnswerErrors
    from tests.support.server import ApiServer

    async def broken(scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] == "/boom":
            raise KeyError("a bug")
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    get = b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with ApiServer(AnswerErrors(broken)) as server:
        assert _raw_exchange(server.url, [get % b"/boom", get % b"/fine"]) == [
            b"HTTP/1.1 500 Internal Server Error", b"HTTP/1.1 200 OK"]
        assert httpx.get(server.url + "/boom").json() == {"detail": {"reason": "internal error; see the daemon log"}}


def test_a_body_that_trickles_in_is_answered_408(tmp_path: Path) -> None:
    import socket

    from mateclaw_mem.api.app import create_app
    from tests.support.server import ApiServer, daemon_services

    services = daemon_services(tmp_path / "ws", server={"body_read_timeout_seconds": 0.5})
    services.store.ensure_agent("default")
    try:
        with ApiServer(create_app(services, mcp=False)) as server:
            host, port = server.url.removeprefix("http://").split(":")
            with socket.create_connection((host, int(port)), timeout=30) as sock:
                # Headers promise 1,000 bytes; only a few ever come.
                sock.sendall(f"PUT {WS}/file HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             "Content-Length: 1000\r\n\r\n{\"path\": ".encode())
                answer = sock.makefile("rb").read()  # until the server closes the connection
            # The same for a chunked body (read by BodyLimit, not by the route).
            with socket.create_connection((host, int(port)), timeout=30) as sock:
                sock.sendall(f"PUT {WS}/file HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n5\r\n{\"pat\r\n".encode())
                chunked = sock.makefile("rb").read()
            ok = httpx.put(server.url + f"{WS}/file", json={"path": "MEMORY.md", "content": "# M\n"})
    finally:
        services.close()
    for raw in (answer, chunked):
        assert raw.startswith(b"HTTP/1.1 408 "), raw[:200]
        assert b"did not arrive within 0.5 seconds" in raw and b"body-read-timeout-seconds" in raw
    assert ok.status_code == 200  # a body that arrives in time is untouched
