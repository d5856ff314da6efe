"""MCP tool profiles (issue 38.7) and lifecycle features shipped on (issue 38.6), through the real SDK
client: over the daemon's HTTP endpoint (`?tools=`) and over stdio (`mateclaw-mem mcp --tools`).

Each profile lists exactly its tools, the default is the small `core` one a local model can afford,
a tool outside the profile is refused with the profile that has it, and a tool whose feature is off
is not listed and, called, names the key that turns it on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters

from mateclaw_mem.mcp.profiles import CORE, LEARNING, MEMORY_TOOL
from tests.support.server import ApiServer, daemon_services

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "config" / "mateclaw.yaml"
ALL = 36  # every tool the server has (the shipped config turns every feature on)


def _serve(workspace: Path, **overrides: Any) -> Iterator[httpx.Client]:
    from mateclaw_mem.api.app import create_app

    services = daemon_services(workspace, **overrides)
    services.seed_agents()
    services.build()
    try:
        with ApiServer(create_app(services, mcp=True)) as server, \
                httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        services.close()


ON = {"mate": {"memory": {"fact": {"projection_enabled": True, "contradiction_check_enabled": True,
                                   "forget_enabled": True}}}}


@pytest.fixture(scope="module")
def on(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    yield from _serve(tmp_path_factory.mktemp("profiles-on") / "ws", **ON)


@pytest.fixture(scope="module")
def off(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    yield from _serve(tmp_path_factory.mktemp("profiles-off") / "ws", mate={"memory": {"fact": {
        "projection_enabled": False, "contradiction_check_enabled": False, "forget_enabled": False}}})


def _session(url: str, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    async def run() -> tuple[list[Any], list[Any]]:
        async with Client(url) as mcp:
            listed = (await mcp.list_tools()).tools
            return listed, [await mcp.call_tool(name, args) for name, args in calls]

    return anyio.run(run)


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def tokens(listed: list[Any]) -> int:
    """What the tool list costs the model: chars/4 of its JSON, as scripts/bench/mcp_profiles.py prints it."""
    body = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed]
    return len(json.dumps(body, separators=(",", ":"), ensure_ascii=False)) // 4


@pytest.mark.parametrize(("query", "expected"), [
    ("", CORE), ("?tools=core", CORE), ("?tools=memory-tool", MEMORY_TOOL), ("?tools=learning", LEARNING),
])
def test_each_profile_lists_exactly_its_tools(on: httpx.Client, query: str, expected: tuple[str, ...]) -> None:
    listed, _ = _session(f"{on.base_url}/mcp{query}", [])
    assert sorted(t.name for t in listed) == sorted(expected)


def test_all_lists_every_tool_and_core_is_small(on: httpx.Client) -> None:
    listed_all, _ = _session(f"{on.base_url}/mcp?tools=all", [])
    listed_core, _ = _session(f"{on.base_url}/agents/default/mcp", [])
    assert len(listed_all) == ALL and {t.name for t in listed_core} < {t.name for t in listed_all}
    assert len(listed_core) <= 8 and tokens(listed_core) <= 1500, tokens(listed_core)


def test_a_tool_outside_the_profile_is_refused_with_the_profile_that_has_it(on: httpx.Client) -> None:
    _, (viewed, learned, searched) = _session(f"{on.base_url}/mcp", [
        ("view", {"path": "/memories"}), ("learning_memory", {}), ("search_memory", {"query": "tea"})])
    assert viewed.is_error and "'core'" in text(viewed) and "--tools memory-tool" in text(viewed)
    assert learned.is_error and "--tools learning" in text(learned)
    assert not searched.is_error, text(searched)  # in the profile: served


def test_an_unknown_profile_is_a_400_naming_the_profiles(on: httpx.Client) -> None:
    r = on.post("/mcp?tools=everything", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"accept": "application/json, text/event-stream"})
    assert r.status_code == 400 and "memory-tool" in r.text and "everything" in r.text


def test_a_feature_that_is_off_hides_its_tools_and_a_call_names_the_key(off: httpx.Client) -> None:
    listed, (facts, inbox, forgot) = _session(f"{off.base_url}/mcp?tools=all", [
        ("memory_facts", {}), ("memory_contradictions", {}), ("memory_forget", {"text": "I like tea"})])
    names = {t.name for t in listed}
    assert not names & {"memory_facts", "memory_feedback", "memory_confirm", "memory_contradictions",
                        "memory_resolve_contradiction", "memory_forget", "morning_card_fact"}
    assert len(names) == ALL - 7
    assert facts.is_error and "mate.memory.fact.projection-enabled: true" in text(facts)
    assert "MATECLAW_MATE__MEMORY__FACT__PROJECTION_ENABLED=true" in text(facts)
    assert inbox.is_error and "contradiction-check-enabled: true" in text(inbox)
    assert forgot.is_error and "mate.memory.fact.forget-enabled: true" in text(forgot)


def test_the_shipped_config_turns_the_lifecycle_on(tmp_path: Path) -> None:
    from mateclaw_mem.mcp.features import tools_off
    from mateclaw_mem.settings import load_settings

    s = load_settings(SHIPPED, tmp_path / "ws")
    m = s.mate.memory
    assert tools_off(s) == {}
    assert (m.fact.projection_enabled, m.fact.contradiction_check_enabled, m.fact.forget_enabled) == (True,) * 3
    assert m.dream.morning_card_pointer and m.soul_update_interval == 20
    bare = load_settings(None, tmp_path / "ws").mate.memory  # the built-in defaults stay the seed's
    assert (bare.fact.projection_enabled, bare.soul_update_interval, bare.dream.morning_card_pointer) == (False, 0,
                                                                                                          False)


def test_stdio_serves_core_by_default_and_the_profile_asked_for(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
    cli = [sys.executable, "-m", "mateclaw_mem.cli.main"]
    subprocess.run([*cli, "init", "default", "--workspace", str(ws), "--config", str(SHIPPED)], cwd=tmp_path,
                   env=env, check=True, capture_output=True, timeout=120)

    async def listing(*extra: str) -> tuple[set[str], Any]:
        params = StdioServerParameters(command=sys.executable, cwd=str(tmp_path), env=env,
                                       args=[*cli[1:], "mcp", "--workspace", str(ws), "--config", str(SHIPPED),
                                             *extra])
        async with Client(params, read_timeout_seconds=60) as mcp:
            names = {t.name for t in (await mcp.list_tools()).tools}
            return names, await mcp.call_tool("view", {"path": "/memories"})

    names, viewed = anyio.run(listing)
    assert names == set(CORE) and viewed.is_error and "memory-tool" in text(viewed)
    names, viewed = anyio.run(listing, "--tools", "memory-tool")
    assert names == set(MEMORY_TOOL) and not viewed.is_error, text(viewed)


def test_the_cli_offers_every_profile_and_only_those() -> None:
    from mateclaw_mem.cli.main import build_parser
    from mateclaw_mem.mcp.profiles import PROFILES

    parser = build_parser(["mcp"])
    sub = next(a for a in parser._actions if a.dest == "command")
    tools = next(a for a in sub.choices["mcp"]._actions if a.dest == "tools")  # type: ignore[union-attr]
    assert list(tools.choices) == list(PROFILES) and tools.default == "core"
