"""Agents exist only when created (`init`, `POST /api/v1/agents`, the daemon's start), and every face
answers one that was never created the same way: HTTP 404, CLI exit 3, the MCP endpoint 404, each
naming the agent and how to create it, and none of them makes a folder for it. MCP over HTTP lives
at `/agents/<agent>/mcp` (and `/mcp` for the default agent), driven here by the real SDK client.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from mateclaw_mem.cli.main import main
from tests.support.server import serve_api

HOW = "mateclaw-mem init ghost"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path_factory.mktemp("agents") / "workspace")


def _folders(client: httpx.Client) -> list[str]:
    root: Path = client.services.store.root  # type: ignore[attr-defined]
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def test_post_agents_creates_a_fully_seeded_agent_once(client: httpx.Client) -> None:
    r = client.post("/api/v1/agents", json={"agentId": "work"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["created"] is True and body["mcpPath"] == "/agents/work/mcp"
    assert set(body["seededFiles"]) == {"AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"}
    again = client.post("/api/v1/agents", json={"agentId": "work"})
    assert again.status_code == 200 and again.json()["created"] is False and again.json()["seededFiles"] == []
    assert "work" in client.get("/api/v1/agents").json()["agents"]
    assert client.post("/api/v1/agents", json={"agentId": "../x"}).status_code == 422
    assert client.post("/api/v1/agents", json={}).status_code == 422


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/api/v1/memory/ghost/conversations/x/turns", {"user": "remember that I like tea"}),
    ("POST", "/api/v1/memory/ghost/emergence", {}),
    ("POST", "/api/v1/memory/ghost/context", {"query": "tea"}),
    ("PUT", "/api/v1/agents/ghost/workspace/memory/file", {"path": "PROFILE.md", "content": "x\n"}),
    ("GET", "/api/v1/agents/ghost/workspace/memory", None),
    ("GET", "/api/v1/agents/ghost/workspace/memory/search?q=tea", None),
    ("POST", "/api/v1/agents/ghost/structured", {"type": "user", "key": "tea", "text": "sencha"}),
    ("GET", "/api/v1/agents/ghost/memory", None),
])
def test_rest_answers_an_unknown_agent_404_and_makes_nothing(client: httpx.Client, method: str, path: str,
                                                              body: Any) -> None:
    r = client.request(method, path, json=body)
    assert r.status_code == 404, r.text
    assert "no agent 'ghost'" in r.json()["detail"]["reason"] and HOW in r.json()["detail"]["reason"]
    assert "ghost" not in _folders(client)


def test_mcp_over_http_per_agent_and_default(client: httpx.Client) -> None:
    assert client.post("/api/v1/agents", json={"agentId": "work"}).status_code in (200, 201)
    base = str(client.base_url)

    async def session() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with Client(base + "/agents/work/mcp") as mcp:
            out["work_info"] = mcp.server_info
            out["work_instructions"] = mcp.instructions
            await mcp.call_tool("write_workspace_memory_file", {"path": "notes/marker.md", "content": "work-marker\n"})
            out["work_read"] = (await mcp.call_tool("read_workspace_memory_file",
                                                    {"path": "notes/marker.md"})).structured_content
        async with Client(base + "/mcp") as mcp:
            out["default_info"] = mcp.server_info
            out["default_instructions"] = mcp.instructions
            out["default_read"] = await mcp.call_tool("read_workspace_memory_file", {"path": "notes/marker.md"})
        return out

    out = anyio.run(session)
    assert out["work_info"].name == "mateclaw-mem (work)" and "agent 'work'" in out["work_instructions"]
    assert out["default_info"].name == "mateclaw-mem (default)" and "agent 'default'" in out["default_instructions"]
    assert "work-marker" in out["work_read"]["content"]
    assert out["default_read"].is_error  # the marker went to work only
    store = client.services.store  # type: ignore[attr-defined]
    assert "work-marker" in store.read("work", "notes/marker.md").text
    assert not store.read("default", "notes/marker.md").exists


def test_mcp_endpoint_of_an_unknown_agent_is_404_and_the_old_path_says_where_it_moved(client: httpx.Client) -> None:
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
           "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"accept": "application/json, text/event-stream"}
    r = client.post("/agents/ghost/mcp", json=rpc, headers=accept)
    assert r.status_code == 404 and HOW in r.json()["detail"]["reason"]
    r = client.post("/mcp/agents/work", json=rpc, headers=accept)
    assert r.status_code == 404 and "/agents/work/mcp" in r.json()["detail"]["reason"]
    assert "ghost" not in _folders(client)


# -- the CLI ------------------------------------------------------------------------------------------


@pytest.fixture
def cli_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from tests.support.isolation import no_config_here

    ws = no_config_here(monkeypatch, tmp_path)
    assert main(["init"]) == 0  # the workspace and its default agent exist; "ghost" never does
    return ws


@pytest.mark.parametrize("argv", [
    ["write", "ghost", "PROFILE.md", "--text", "x"],
    ["edit", "ghost", "PROFILE.md", "--old", "a", "--new", "b"],
    ["cat", "ghost", "PROFILE.md"],
    ["ls", "ghost"],
    ["history", "ghost", "PROFILE.md"],
    ["context", "ghost"],
    ["reindex", "ghost"],
    ["export", "ghost"],
    ["dream", "ghost"],
    ["extract", "ghost", "chat-1"],
    ["search", "tea", "--agent", "ghost"],
    ["remember", "ghost", "user", "tea", "sencha"],
    ["recall", "ghost"],
    ["consolidate-structured", "ghost"],
    ["status", "ghost"],
    ["mcp", "--agent", "ghost"],
    ["learn", "show", "ghost"],
])
def test_cli_answers_an_unknown_agent_with_exit_3(cli_workspace: Path, argv: list[str],
                                                  capsys: pytest.CaptureFixture) -> None:
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "no agent 'ghost'" in err and HOW in err and "Traceback" not in err
    assert not (cli_workspace / "ghost").exists()


def test_init_creates_what_the_other_commands_then_accept(cli_workspace: Path) -> None:
    assert main(["init", "ghost"]) == 0
    assert sorted(p.name for p in (cli_workspace / "ghost").iterdir()) == [
        "AGENTS.md", "MEMORY.md", "PROFILE.md", "SOUL.md"]
    assert main(["write", "ghost", "notes/a.md", "--text", "hello\n"]) == 0
    assert main(["cat", "ghost", "notes/a.md"]) == 0
