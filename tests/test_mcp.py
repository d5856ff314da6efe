"""The MCP server over stdio: a real client (the SDK's) spawns `mateclaw-mem mcp` and speaks the protocol."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from mateclaw_mem.clock import SystemClock
from mateclaw_mem.workspace.store import WorkspaceStore


def _empty_config(tmp_path: Path) -> Path:
    path = tmp_path / "empty.yaml"
    path.write_text("{}\n", encoding="utf-8")
    return path


def run_session(tmp_path: Path, body: Callable[[Client], Awaitable[Any]], *, agent: str | None = None) -> Any:
    ws = tmp_path / "ws"
    if not ws.exists():  # only init and serve create a workspace; `mcp` serves an existing one
        from mateclaw_mem.cli.main import main as cli

        assert cli(["--workspace", str(ws), "--config", str(_empty_config(tmp_path)), "init", agent or "default"]) == 0
    args = ["-m", "mateclaw_mem.cli.main", "mcp", "--workspace", str(ws), "--tools", "all"]
    if agent:
        args += ["--agent", agent]
    # cwd = tmp_path: the repo's config/ is not picked up; the SDK passes only a minimal environment.
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(tmp_path))

    async def main() -> Any:
        async with Client(params, read_timeout_seconds=60) as client:
            return await body(client)

    return anyio.run(main)


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def store_for(tmp_path: Path) -> WorkspaceStore:
    return WorkspaceStore(tmp_path / "ws", clock=SystemClock())


def test_tools_are_listed_with_honest_annotations(tmp_path: Path) -> None:
    async def body(client: Client) -> dict[str, Any]:
        return {t.name: t for t in (await client.list_tools()).tools}

    tools = run_session(tmp_path, body)
    expected = {"list_workspace_memory_files", "read_workspace_memory_file", "write_workspace_memory_file",
                "edit_workspace_memory_file", "view", "create", "str_replace", "insert", "delete", "rename"}
    assert expected <= set(tools)
    for name in ("list_workspace_memory_files", "read_workspace_memory_file", "view"):
        assert tools[name].annotations.read_only_hint is True, name
    for name in ("write_workspace_memory_file", "edit_workspace_memory_file", "create", "str_replace", "delete",
                 "rename"):
        a = tools[name].annotations
        assert a.read_only_hint is False and a.destructive_hint is True, name
    assert tools["insert"].annotations.destructive_hint is False  # adds, never removes
    assert tools["edit_workspace_memory_file"].annotations.idempotent_hint is False
    assert tools["delete"].annotations.idempotent_hint is True
    for optional in ("search_memory", "remember", "recall", "forget"):
        if optional in tools:
            assert tools[optional].annotations.open_world_hint is False


def test_file_commands_over_stdio_stay_inside_the_workspace(tmp_path: Path) -> None:
    async def body(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["create"] = await client.call_tool("create", {"path": "/memories/plans.md", "file_text": "# Plans\nski\n"})
        out["replace"] = await client.call_tool(
            "str_replace", {"path": "/memories/plans.md", "old_str": "ski", "new_str": "ski in March"})
        out["insert"] = await client.call_tool(
            "insert", {"path": "/memories/plans.md", "insert_line": 5, "insert_text": "hike in May"})
        out["view"] = await client.call_tool("view", {"path": "/memories/plans.md"})
        out["rename"] = await client.call_tool(
            "rename", {"old_path": "/memories/plans.md", "new_path": "/memories/trips/plans.md"})
        out["folder"] = await client.call_tool("view", {"path": "/memories"})
        out["escape"] = await client.call_tool("create", {"path": "/memories/../../evil.md", "file_text": "x"})
        out["abs"] = await client.call_tool("view", {"path": "/etc/passwd"})
        out["hidden"] = await client.call_tool("view", {"path": "/memories/.mateclaw/log.md"})
        out["delete"] = await client.call_tool("delete", {"path": "/memories/trips/plans.md"})
        out["gone"] = await client.call_tool("view", {"path": "/memories/trips/plans.md"})
        return out

    out = run_session(tmp_path, body)
    for step in ("create", "replace", "insert", "view", "rename", "folder", "delete"):
        assert not out[step].is_error, (step, text(out[step]))
    viewed = text(out["view"])
    assert "ski in March" in viewed and "hike in May" in viewed and "\t# Plans" in viewed
    assert "/memories/trips/plans.md" in text(out["folder"])
    for step, words in (("escape", "'..'"), ("abs", "outside /memories"), ("hidden", "hidden"),
                        ("gone", "does not exist")):
        assert out[step].is_error, step
        assert words in text(out[step]), (step, text(out[step]))
    assert not (tmp_path / "evil.md").exists() and not (tmp_path / "ws" / "evil.md").exists()
    store = store_for(tmp_path)
    assert not store.read("default", "trips/plans.md").exists
    assert [v.actor for v in store.history("default", "trips/plans.md")][-1] == "mcp"  # delete kept, undoable


def test_workspace_tools_and_structured_entries_for_a_chosen_agent(tmp_path: Path) -> None:
    async def body(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        names = {t.name for t in (await client.list_tools()).tools}
        out["listed"] = await client.call_tool("list_workspace_memory_files", {})
        read = await client.call_tool("read_workspace_memory_file", {"path": "MEMORY.md"})
        sha = read.structured_content["sha"] if read.structured_content else None
        out["read"] = read
        out["write"] = await client.call_tool("write_workspace_memory_file", {
            "path": "MEMORY.md", "content": "## Work\nships the beta in June\n", "expected_sha": sha})
        out["stale"] = await client.call_tool("write_workspace_memory_file", {
            "path": "MEMORY.md", "content": "## Lost\n", "expected_sha": sha})
        out["edit"] = await client.call_tool("edit_workspace_memory_file", {
            "path": "MEMORY.md", "old_text": "June", "new_text": "July"})
        if {"remember", "recall", "forget"} <= names:
            out["remember"] = await client.call_tool("remember", {"type": "user", "key": "tea", "text": "likes sencha"})
            out["recall"] = await client.call_tool("recall", {"key": "tea"})
            out["forget"] = await client.call_tool("forget", {"type": "user", "key": "tea"})
            out["recall_gone"] = await client.call_tool("recall", {"key": "tea"})
        if "search_memory" in names:
            out["search"] = await client.call_tool("search_memory", {"query": "beta July"})
        out["names"] = names
        return out

    out = run_session(tmp_path, body, agent="helper")
    assert "MEMORY.md" in text(out["listed"])
    assert not out["write"].is_error, text(out["write"])
    assert out["stale"].is_error and "changed since it was read" in text(out["stale"])
    assert not out["edit"].is_error
    store = store_for(tmp_path)
    assert "ships the beta in July" in store.read("helper", "MEMORY.md").text
    assert store.agents() == ["helper"]  # confined to the chosen agent: no other was made
    assert {"remember", "recall", "forget", "search_memory"} <= out["names"], "services missing from this build"
    assert "likes sencha" in text(out["recall"])
    assert not out["forget"].is_error and out["recall_gone"].is_error
    assert "beta" in text(out["search"])


@pytest.mark.parametrize("bad_agent", ["../etc", ".hidden"])
def test_an_invalid_agent_is_refused_by_the_command(tmp_path: Path, bad_agent: str) -> None:
    import subprocess

    from mateclaw_mem.cli.main import main as cli

    assert cli(["--workspace", str(tmp_path / "ws"), "--config", str(_empty_config(tmp_path)), "init"]) == 0
    r = subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", "mcp", "--workspace", str(tmp_path / "ws"),
                        "--agent", bad_agent], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "invalid agent name" in r.stderr
    assert r.stdout == ""  # stdout belongs to the protocol


def test_isolation_an_owners_profile_written_over_mcp_is_enabled_and_bad_memories_paths_are_refused(
        tmp_path: Path) -> None:
    """Issue 35.6 through the SDK's client: an owner's PROFILE.md first made by an MCP write starts
    enabled (it was `enabled: false`, never in that owner's prompt), and `/memories` paths with an
    empty or blank part or a trailing '/' are errors naming the path, with nothing made or replaced."""
    from mateclaw_mem.cli.main import main as cli

    ws, config = tmp_path / "ws", tmp_path / "isolated.yaml"
    config.write_text("owner-isolation: true\n", encoding="utf-8")
    assert cli(["--workspace", str(ws), "--config", str(config), "init", "default"]) == 0
    params = StdioServerParameters(command=sys.executable, cwd=str(tmp_path), args=[
        "-m", "mateclaw_mem.cli.main", "mcp", "--workspace", str(ws), "--config", str(config), "--tools", "all"])

    async def main() -> dict[str, Any]:
        async with Client(params, read_timeout_seconds=60) as client:
            wrote = await client.call_tool("write_workspace_memory_file", {
                "path": "PROFILE.md", "owner": "carol", "content": "# Profile\nCarol keeps bees.\n"})
            read = await client.call_tool("read_workspace_memory_file", {"path": "PROFILE.md", "owner": "carol"})
            await client.call_tool("create", {"path": "/memories/keep.md", "file_text": "original\n"})
            bad = {p: await client.call_tool("create", {"path": p, "file_text": "x\n"})
                   for p in ("/memories/a//b.md", "/memories/ /x.md", "/memories/keep.md/")}
            return {"wrote": wrote, "read": read, "bad": bad}

    out = anyio.run(main)
    assert not out["wrote"].is_error, text(out["wrote"])
    assert out["read"].structured_content["enabled"] is True, text(out["read"])
    for path, result in out["bad"].items():
        assert result.is_error and path.removeprefix("/memories/") in text(result), (path, text(result))
    agent_dir = ws / "default"
    assert (agent_dir / "keep.md").read_text(encoding="utf-8").endswith("original\n")
    assert not (agent_dir / " ").exists() and not (agent_dir / "a").exists()
