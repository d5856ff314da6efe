"""The faces of facts (issue 17, point 3 and the turn record of point 9): HTTP on a real uvicorn,
the MCP tools through a real client, the CLI through its real parser -- and two owners whose facts,
feedback, recall and turns never reach each other through any of them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from mateclaw_mem.api.app import create_app
from mateclaw_mem.cli.main import main as cli
from mateclaw_mem.mcp.server import build_server
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from tests.support.server import ApiServer

AGENT = "default"
KEY = "facts-faces-key"
ON = ("owner-isolation: true\nmate:\n  memory:\n    fact:\n      projection-enabled: true\n")
ALICE = "## Preferences\n- prefers dark mode in the editor\n- drinks green tea every morning\n"
BOB = "## Music\n- likes opera nights at the Staatsoper\n- prefers dark mode in the editor\n"


def _services(root: Path, config: str) -> Services:
    cfg = root / "mateclaw.yaml"
    cfg.write_text(config, encoding="utf-8")
    env = f"MATECLAW_TEST_FACTS_{os.getpid()}_{id(root)}"
    os.environ[env] = KEY
    try:
        services = Services(load_settings(cfg, root / "ws", overrides={"server": {"api_key_env": env}}))
        assert services.api_key is not None
    finally:
        os.environ.pop(env, None)
    services.seed_agents()
    services.build()
    return services


def _write(services: Services, rel: str, body: str, owner: str | None) -> None:
    services.store.ensure_agent(AGENT, owner)
    snap = services.store.read(AGENT, rel, owner=owner)
    services.store.write(AGENT, rel, body, expected_sha=snap.sha, actor="person", owner=owner)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    root = tmp_path_factory.mktemp("facts-faces")
    services = _services(root, ON)
    _write(services, "MEMORY.md", ALICE, "alice")
    _write(services, "MEMORY.md", BOB, "bob")
    try:
        with ApiServer(create_app(services, mcp=False)) as server, \
                httpx.Client(base_url=server.url, timeout=30, headers={"X-Api-Key": KEY}) as client:
            client.services = services  # type: ignore[attr-defined]
            client.root = root  # type: ignore[attr-defined]
            yield client
    finally:
        services.close()


def url(path: str = "") -> str:
    return f"/api/v1/memory/{AGENT}/facts{path}"


def fact_of(api: httpx.Client, owner: str, text: str) -> dict[str, Any]:
    r = api.get(url(), params={"owner": owner})
    assert r.status_code == 200, r.text
    found = [f for f in r.json()["facts"] if text in f["text"]]
    assert found, r.json()
    return found[0]


# -- HTTP ----------------------------------------------------------------------------------------------------


def test_list_search_and_filter_are_the_owners_own(api: httpx.Client) -> None:
    alice = api.get(url(), params={"owner": "alice"}).json()
    assert alice["owner"] == "alice" and alice["count"] == 2
    assert {f["text"] for f in alice["facts"]} == {"prefers dark mode in the editor", "drinks green tea every morning"}
    assert all(f["owner"] == "alice" and f["scope"] == "personal" for f in alice["facts"])
    hits = api.get(url(), params={"owner": "alice", "q": "opera nights"}).json()
    assert hits["facts"] == []  # bob's opera is not alice's
    hits = api.get(url(), params={"owner": "alice", "q": "green tea", "limit": 1}).json()
    assert [f["text"] for f in hits["facts"]] == ["drinks green tea every morning"]
    assert api.get(url(), params={"owner": "alice", "file": "PROFILE.md"}).json()["facts"] == []
    assert api.get(url()).json()["facts"] == []  # no owner: the shared files, which hold none here
    assert api.get(url(), params={"limit": 0}).status_code == 422
    assert httpx.get(str(api.base_url) + url()).status_code == 401  # same auth as the rest


def test_feedback_changes_trust_is_in_the_history_and_stays_with_its_owner(api: httpx.Client) -> None:
    fact = fact_of(api, "alice", "green tea")
    bobs = fact_of(api, "bob", "opera")
    r = api.post(url(f"/{fact['id']}/feedback"), params={"owner": "alice"},
                 json={"feedback": "HELPFUL", "note": "yes, every day"})
    assert r.status_code == 200, r.text
    assert r.json()["helpful"] == 1 and r.json()["trust"] == pytest.approx(fact["trust"] + 0.1)
    got = api.get(url(f"/{fact['id']}"), params={"owner": "alice"}).json()
    assert got["history"][0]["kind"] == "helpful" and got["history"][0]["note"] == "yes, every day"
    r = api.post(url(f"/{fact['id']}/feedback"), params={"owner": "alice"}, json={"feedback": "UNHELPFUL"})
    assert r.json()["unhelpful"] == 1 and r.json()["trust"] == pytest.approx(fact["trust"] - 0.1)
    # Another owner's fact is not there for alice: not readable, not rateable, and untouched.
    for method, path, body in (("GET", "", None), ("POST", "/feedback", {"feedback": "UNHELPFUL"}),
                               ("POST", "/confirm", None), ("POST", "/edit", {"text": "likes rock"})):
        for owner in ("alice", None):
            r = api.request(method, url(f"/{bobs['id']}{path}"), params={"owner": owner} if owner else {},
                            json=body)
            assert r.status_code == 404, (method, path, owner, r.text)
            assert "opera" not in r.text
    after = fact_of(api, "bob", "opera")
    assert (after["trust"], after["unhelpful"], after["last_confirmed"]) == (bobs["trust"], 0, None)
    assert "opera" in (api.services.store.read(AGENT, "MEMORY.md", owner="bob").text)  # type: ignore[attr-defined]


def test_bad_input_is_a_422_and_an_unknown_fact_a_404(api: httpx.Client) -> None:
    fact = fact_of(api, "alice", "dark mode")
    for body in ({"feedback": "great"}, {"feedback": "HELPFUL", "extra": 1}, {}, {"feedback": 1}):
        r = api.post(url(f"/{fact['id']}/feedback"), params={"owner": "alice"}, json=body)
        assert r.status_code == 422, (body, r.text)
    assert api.post(url(f"/{fact['id']}/edit"), params={"owner": "alice"}, json={"text": ""}).status_code == 422
    assert api.get(url("/not..an id")).status_code == 422
    r = api.get(url("/0123456789abcdef"), params={"owner": "alice"})
    assert r.status_code == 404 and "0123456789abcdef" in r.json()["detail"]["reason"]


def test_confirm_edit_and_rebuild(api: httpx.Client) -> None:
    services: Services = api.services  # type: ignore[attr-defined]
    fact = fact_of(api, "alice", "dark mode")
    r = api.post(url(f"/{fact['id']}/confirm"), params={"owner": "alice"})
    assert r.status_code == 200 and r.json()["last_confirmed"] and r.json()["trust"] > fact["trust"]
    r = api.post(url(f"/{fact['id']}/edit"), params={"owner": "alice"}, json={"text": "prefers light mode now"})
    assert r.status_code == 200, r.text
    assert r.json()["text"] == "prefers light mode now"
    text = services.store.read(AGENT, "MEMORY.md", owner="alice").text
    assert "- prefers light mode now" in text and "dark mode" not in text
    assert "dark mode" in services.store.read(AGENT, "MEMORY.md", owner="bob").text  # bob's line is bob's
    r = api.post(url("/rebuild"))
    assert r.status_code == 200 and r.json()["facts"] >= 4 and r.json()["files"] >= 2
    assert fact_of(api, "alice", "light mode")["text"] == "prefers light mode now"  # survived the rebuild


def test_a_context_returns_its_turn_and_the_turn_record_is_the_owners(api: httpx.Client) -> None:
    services = api.services  # type: ignore[attr-defined]
    # Out of the prompt as a whole file, so its lines come as FACTS (a fact the prompt carries whole
    # is not said twice: tests/test_turns.py).
    _write(services, "MEMORY.md", "---\nenabled: false\n---\n" + ALICE, "alice")
    r = api.post(f"/api/v1/memory/{AGENT}/context", json={"query": "what do I drink, green tea?", "owner": "alice"})
    assert r.status_code == 200, r.text
    body = r.json()
    turn = body["turn"]
    # Isolation on: facts are the owner's, so they come in the per-turn block at the head of the
    # user message, never in the (cache-stable, TEAM/GLOBAL only) system message (issue 18).
    assert "drinks green tea every morning" in body["messages"][-1]["content"]
    assert "drinks green tea" not in body["messages"][0]["content"]
    assert "opera" not in str(body["messages"])
    memory = api.get(f"/api/v1/memory/{AGENT}/turns/{turn}/memory", params={"owner": "alice"})
    assert memory.status_code == 200, memory.text
    record = memory.json()
    tea = fact_of(api, "alice", "green tea")
    assert tea["id"] in [f["id"] for f in record["facts"]] and record["owner"] == "alice"
    assert "PROFILE.md" in [f["file"] for f in record["files"]]
    assert "green tea" not in memory.text  # ids and hashes, not copies
    history = api.get(url(f"/{tea['id']}"), params={"owner": "alice"}).json()["history"]
    assert [h["note"] for h in history if h["kind"] == "use"] == [turn]  # the use carries its turn
    for params in ({"owner": "bob"}, {}):
        r = api.get(f"/api/v1/memory/{AGENT}/turns/{turn}/memory", params=params)
        assert r.status_code == 404 and "tea" not in r.text
    assert api.get(f"/api/v1/memory/{AGENT}/turns/turn-nope/memory").status_code == 404


def test_projection_off_is_a_409_naming_the_key(tmp_path: Path) -> None:
    services = _services(tmp_path, "owner-isolation: true\n")
    try:
        with ApiServer(create_app(services, mcp=False)) as server, \
                httpx.Client(base_url=server.url, timeout=30, headers={"X-Api-Key": KEY}) as client:
            for method, path, body in (("GET", "", None), ("GET", "/0123456789abcdef", None),
                                       ("POST", "/0123456789abcdef/feedback", {"feedback": "HELPFUL"}),
                                       ("POST", "/0123456789abcdef/confirm", None), ("POST", "/rebuild", None)):
                r = client.request(method, url(path), json=body)
                assert r.status_code == 409, (path, r.text)
                assert "mate.memory.fact.projection-enabled" in r.json()["detail"]["reason"]
            turn = client.post(f"/api/v1/memory/{AGENT}/context", json={"query": "tea"}).json()["turn"]
            assert client.get(f"/api/v1/memory/{AGENT}/turns/{turn}/memory").status_code == 200
    finally:
        services.close()


# -- MCP -----------------------------------------------------------------------------------------------------


def _mcp(services: Services, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async def run() -> list[Any]:
        async with Client(build_server(services, AGENT)) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(run)


def _text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def test_mcp_tools_list_rate_and_confirm_the_owners_facts(api: httpx.Client) -> None:
    services: Services = api.services  # type: ignore[attr-defined]
    tea = fact_of(api, "alice", "green tea")
    opera = fact_of(api, "bob", "opera")
    listed, rated, confirmed, leak, leak_list = _mcp(services, [
        ("memory_facts", {"query": "green tea", "owner": "alice"}),
        ("memory_feedback", {"fact_id": tea["id"], "feedback": "helpful", "owner": "alice"}),
        ("memory_confirm", {"fact_id": tea["id"], "owner": "alice"}),
        ("memory_feedback", {"fact_id": opera["id"], "feedback": "UNHELPFUL", "owner": "alice"}),
        ("memory_facts", {"query": "opera", "owner": "alice"}),
    ])
    assert not listed.is_error and [f["text"] for f in listed.structured_content["facts"]] == [tea["text"]]
    assert not rated.is_error and rated.structured_content["helpful"] == tea["helpful"] + 1
    assert not confirmed.is_error and confirmed.structured_content["last_confirmed"]
    assert leak.is_error and "no fact" in _text(leak) and "opera" not in _text(leak)
    assert leak_list.structured_content["facts"] == []
    assert fact_of(api, "bob", "opera")["unhelpful"] == 0
    actors = {h["actor"] for h in services.facts.history(AGENT, "alice", tea["id"])}
    assert "mcp" in actors  # the model's feedback is told apart from a person's


def test_mcp_tools_say_when_projection_is_off(tmp_path: Path) -> None:
    services = _services(tmp_path, "{}\n")
    try:
        (listed,) = _mcp(services, [("memory_facts", {})])
        assert listed.is_error and "mate.memory.fact.projection-enabled" in _text(listed)
    finally:
        services.close()


# -- CLI -----------------------------------------------------------------------------------------------------


def sh(api: httpx.Client, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    root: Path = api.root  # type: ignore[attr-defined]
    try:
        code = cli([*args, "--workspace", str(root / "ws"), "--config", str(root / "mateclaw.yaml")])
    except SystemExit as exc:  # argparse's own usage errors
        code = int(exc.code or 0)
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out + out.err


def test_cli_facts_commands(api: httpx.Client, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = sh(api, capsys, "facts", "list", AGENT, "--owner", "bob", "--query", "opera", "--json")
    assert code == 0
    opera = json.loads(out)["facts"][0]
    assert opera["text"] == "likes opera nights at the Staatsoper"
    code, out = sh(api, capsys, "facts", "list", AGENT, "--owner", "alice", "--query", "opera")
    assert (code, out.strip()) == (10, "no facts matching 'opera'")
    code, out = sh(api, capsys, "facts", "feedback", AGENT, opera["id"], "HELPFUL", "--owner", "bob")
    assert code == 0 and out.startswith("helpful noted; trust now 0.60")
    code, out = sh(api, capsys, "facts", "feedback", AGENT, opera["id"], "helpful", "--owner", "alice")
    assert code == 3 and "no fact" in out  # README: 3 = not found
    code, out = sh(api, capsys, "facts", "confirm", AGENT, opera["id"], "--owner", "bob")
    assert code == 0 and out.startswith("confirmed; trust now")
    code, out = sh(api, capsys, "facts", "show", AGENT, opera["id"], "--owner", "bob")
    assert code == 0 and "confirm by person" in out and "helpful by person" in out
    code, out = sh(api, capsys, "facts", "edit", AGENT, opera["id"], "likes opera and jazz nights", "--owner", "bob")
    assert code == 0 and out.startswith("edited MEMORY.md")
    assert "- likes opera and jazz nights" in api.services.store.read(AGENT, "MEMORY.md", owner="bob").text  # type: ignore[attr-defined]
    code, out = sh(api, capsys, "facts", "rebuild", AGENT)
    assert code == 0 and out.startswith("rebuilt ")
    code, out = sh(api, capsys, "facts", "feedback", AGENT, opera["id"], "meh", "--owner", "bob")
    assert code == 2  # usage


def test_cli_says_when_projection_is_off(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    services = _services(tmp_path, "{}\n")
    services.close()
    code = cli(["facts", "list", AGENT, "--workspace", str(tmp_path / "ws"), "--config",
                str(tmp_path / "mateclaw.yaml")])
    err = capsys.readouterr().err
    assert code == 4 and "mate.memory.fact.projection-enabled" in err
