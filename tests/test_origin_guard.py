"""No web page reaches the daemon (api/origin_guard.py), over a real uvicorn on loopback.

What a browser sends for an attacking page is written out here by hand (Host for DNS rebinding,
Origin and Sec-Fetch-* for a cross-site write); tests/test_origin_guard_browser.py has Chromium
send them itself. Every refusal is checked against the memory files' bytes, and each kind of write
is also sent once without those headers to show it would have changed them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mateclaw_mem.api.app import create_app
from mateclaw_mem.api.origin_guard import HostPolicy, split_authority
from tests.support.server import ApiServer, daemon_services

AGENT = "default"
WS = f"/api/v1/agents/{AGENT}/workspace/memory"
DREAM = f"/api/v1/memory/{AGENT}/emergence"
PROFILE = "# PROFILE.md\n\n## Basics\n- name: Dana\n"
ATTACK = "# PROFILE.md\n\n## Basics\n- name: written by a web page\n"
RPC = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
MCP_ACCEPT = {"accept": "application/json, text/event-stream"}
AML_ADD = {"request_id": "r1", "user_id": "u1", "session_id": "u1:s1",
           "messages": [{"role": "user", "timestamp": 1683554160000, "content": "we went camping by the lake"}]}


def files(services: Any) -> dict[str, bytes]:
    """Every memory file of the agent, as bytes."""
    root = services.store.path(AGENT, "PROFILE.md").parent
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.md"))}


def last_dream(services: Any) -> Any:
    run = services.dreaming.last_run(AGENT)
    return None if run is None else run["run_id"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Any, Any]]:
    """The whole HTTP face (MCP too) on the default loopback bind with no key, as a person runs it,
    plus one name in server.allowed-hosts (written with a port and capitals: both ignored)."""
    services = daemon_services(tmp_path_factory.mktemp("guard") / "ws", server={"allowed_hosts": ["Mem.Lan:9999"]})
    services.seed_agents()
    services.build()
    snap = services.store.read(AGENT, "PROFILE.md")
    services.store.write(AGENT, "PROFILE.md", PROFILE, expected_sha=snap.sha, actor="person")
    # A snapshot whose import overwrites PROFILE.md: what the attacking page uploads.
    services.store.ensure_agent("donor")
    services.store.write("donor", "PROFILE.md", ATTACK, expected_sha=None, actor="person")
    app = create_app(services)
    try:
        with ApiServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
            yield client, services, app
    finally:
        services.close()


@pytest.fixture(scope="module")
def snapshot(daemon: tuple[httpx.Client, Any, Any]) -> bytes:
    r = daemon[0].get("/api/v1/agents/donor/workspace/memory/export")
    assert r.status_code == 200
    return r.content


def upload(client: httpx.Client, data: bytes, headers: dict[str, str]) -> httpx.Response:
    return client.post(f"{WS}/import", files={"file": ("snapshot.zip", data, "application/zip")},
                       data={"strategy": "overwrite"}, headers=headers)


def port_of(client: httpx.Client) -> int:
    port = client.base_url.port
    assert port is not None
    return port


# ---------------------------------------------------------------------------- Host (DNS rebinding)

@pytest.mark.parametrize("method, path, body", [
    ("GET", f"{WS}/file?path=PROFILE.md", None),
    ("GET", f"{WS}/export", None),
    ("GET", "/ui/", None),
    ("GET", "/docs", None),
    ("GET", "/health", None),
    ("POST", "/mcp", RPC),
    ("POST", f"/agents/{AGENT}/mcp", RPC),
    ("POST", "/v1/aml/search", {"user_id": "u1", "query": "camping"}),  # the fast lane's path
])
def test_a_foreign_host_is_answered_421_naming_the_host_and_the_setting(daemon, method, path, body) -> None:
    client, _, _ = daemon
    r = client.request(method, path, json=body, headers={"Host": "attacker.example", **MCP_ACCEPT})
    assert r.status_code == 421, (path, r.status_code, r.text[:200])
    reason = r.json()["detail"]["reason"]
    assert "'attacker.example'" in reason and "server.allowed-hosts" in reason
    assert "Dana" not in r.text and "PK" not in r.text[:2]


def test_the_fast_lane_sits_behind_the_guard(daemon) -> None:
    client, _, app = daemon
    before = dict(app.state.aml_fast_lane)
    r = client.post("/v1/aml/add", json=AML_ADD, headers={"Host": "attacker.example"})
    assert r.status_code == 421
    r = client.post("/v1/aml/add", json=AML_ADD, headers={"Origin": "http://attacker.example"})
    assert r.status_code == 403
    assert dict(app.state.aml_fast_lane) == before  # neither reached the lane
    ok = client.post("/v1/aml/add", json=AML_ADD)  # the control: the same Add, from no page, is answered
    assert ok.status_code == 200 and app.state.aml_fast_lane["answered"] == before.get("answered", 0) + 1


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST.", "[::1]", "127.0.0.2", "app.localhost",
                                  "mem.lan", "MEM.LAN"])
def test_our_names_are_answered_whatever_the_port(daemon, host: str) -> None:
    client, _, _ = daemon
    for value in (host, f"{host}:{port_of(client)}", f"{host}:1"):
        r = client.get(f"{WS}/file", params={"path": "PROFILE.md"}, headers={"Host": value})
        assert r.status_code == 200 and "Dana" in r.json()["content"], (value, r.text[:200])


def test_mcp_answers_under_any_of_our_names_now_that_the_sdk_check_is_off(daemon) -> None:
    # The SDK's own check knew only loopback names with a port: "localhost" and mem.lan were 421.
    client, _, _ = daemon
    for host in ("localhost", "mem.lan", f"127.0.0.1:{port_of(client)}"):
        r = client.post("/mcp", json=RPC, headers={"Host": host, **MCP_ACCEPT})
        assert r.status_code == 200, (host, r.text[:200])
        assert "read_workspace_memory_file" in r.text


def test_all_interfaces_accept_any_name_only_with_a_key(tmp_path: Path) -> None:
    keyed = daemon_services(tmp_path / "keyed", api_key="k")
    plain = daemon_services(tmp_path / "plain")
    auth = {"X-Api-Key": "k", "Host": "mybox.example"}
    try:
        for services in (keyed, plain):
            services.seed_agents()
            services.build()
        cases = [(keyed, "0.0.0.0", 200), (keyed, "::", 200), (keyed, "127.0.0.1", 421),
                 (plain, "0.0.0.0", 421), (plain, "::", 421), (plain, "10.1.2.3", 421)]
        for services, bind, status in cases:
            with ApiServer(create_app(services, mcp=False, host=bind)) as server:
                r = httpx.get(server.url + f"{WS}/file", params={"path": "AGENTS.md"}, headers=auth)
                assert r.status_code == status, (bind, r.text[:200])
                # Loopback names are ours under every bind; a named bind address is ours too.
                assert httpx.get(server.url + "/health", headers={"Host": "localhost"}).status_code == 200
                named = httpx.get(server.url + "/health", headers={"Host": "10.1.2.3:8765"}).status_code
                assert named == (200 if bind == "10.1.2.3" or status == 200 else 421)
    finally:
        keyed.close()
        plain.close()


# ---------------------------------------------------------------------------- writes another page started

@pytest.mark.parametrize("headers", [
    {"Origin": "http://attacker.example"},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"},
    {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate"},  # a form on another port of this host
    {"Origin": "http://127.0.0.1:1"},  # another port is another page
    {"Origin": "http://localhost"},
])
def test_a_cross_site_write_is_refused_whatever_its_content_type(daemon, snapshot: bytes,
                                                                 headers: dict[str, str]) -> None:
    client, services, _ = daemon
    before, dreamt = files(services), last_dream(services)
    answers = [
        upload(client, snapshot, headers),  # multipart/form-data: no preflight
        client.post(DREAM, content=b"{}", headers={**headers, "Content-Type": "text/plain"}),
        client.post(DREAM, headers=headers),
        client.put(f"{WS}/file", json={"path": "PROFILE.md", "content": ATTACK}, headers=headers),
        client.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "write_workspace_memory_file", "arguments": {"path": "PROFILE.md", "content": ATTACK}}},
            headers={**headers, **MCP_ACCEPT}),
    ]
    for r in answers:
        assert r.status_code == 403, (r.request.method, r.request.url.path, r.text[:200])
        assert "web page" in r.json()["detail"]["reason"]
    assert files(services) == before and last_dream(services) == dreamt


def test_the_same_writes_from_the_daemons_own_page_or_no_page_go_through(daemon, snapshot: bytes) -> None:
    # The control for the test above: these headers are what the Memory Browser and /docs send.
    client, services, _ = daemon
    own = {"Origin": f"http://127.0.0.1:{port_of(client)}", "Sec-Fetch-Site": "same-origin"}
    for headers in (own, {"Origin": "http://mem.lan"}, {"Sec-Fetch-Site": "none"}, {}):
        services.store.write(AGENT, "PROFILE.md", PROFILE, expected_sha=services.store.read(AGENT, "PROFILE.md").sha,
                             actor="person")
        r = upload(client, snapshot, headers)
        assert r.status_code == 200, (headers, r.text[:300])
        assert services.store.path(AGENT, "PROFILE.md").read_text(encoding="utf-8") == ATTACK
    dreamt = last_dream(services)
    r = client.post(DREAM, content=b"{}", headers={**own, "Content-Type": "application/json"})
    assert r.status_code == 200, r.text[:300]
    assert last_dream(services) not in (None, dreamt)
    services.store.write(AGENT, "PROFILE.md", PROFILE, expected_sha=services.store.read(AGENT, "PROFILE.md").sha,
                         actor="person")


def test_cross_site_reads_other_than_opening_a_page_are_refused(daemon) -> None:
    client, _, _ = daemon
    cross = {"Sec-Fetch-Site": "cross-site"}
    for mode in ("no-cors", "cors"):
        r = client.get(f"{WS}/file", params={"path": "PROFILE.md"}, headers={**cross, "Sec-Fetch-Mode": mode})
        assert r.status_code == 403 and "Dana" not in r.text
    # A link from another site to the Memory Browser still opens it.
    r = client.get("/ui/", headers={**cross, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"})
    assert r.status_code == 200 and "<html" in r.text.lower()


# ---------------------------------------------------------------------------- the parsing, alone

@pytest.mark.parametrize("value, expected", [
    ("localhost", ("localhost", None)), ("LocalHost.:8765", ("localhost", 8765)), ("[::1]:80", ("::1", 80)),
    ("[::1]", ("::1", None)), ("::1", ("::1", None)), ("a.example:x", ("a.example", None)),
])
def test_a_host_header_is_split_into_name_and_port(value: str, expected: tuple[str, int | None]) -> None:
    assert split_authority(value) == expected


@pytest.mark.parametrize("origin, host, allowed", [
    ("http://127.0.0.1:8765", "127.0.0.1:8765", True),
    ("http://localhost", "localhost:80", True),
    ("https://mem.example", "mem.example", True),
    ("http://127.0.0.1:8766", "127.0.0.1:8765", False),
    ("http://localhost:8765", "127.0.0.1:8765", False),
    ("https://127.0.0.1:8765", "127.0.0.1:8765", True),  # the scheme is the proxy's business; name and port decide
    ("null", "127.0.0.1:8765", False),
    ("file://", "127.0.0.1:8765", False),
    ("http://127.0.0.1:99999", "127.0.0.1:8765", False),
    ("http://front.lan:3000", "127.0.0.1:8765", True),  # listed in server.allowed-hosts
])
def test_an_origin_is_ours_when_it_is_the_page_the_host_names(origin: str, host: str, allowed: bool) -> None:
    policy = HostPolicy("127.0.0.1", ["front.lan"], keyed=False)
    assert policy.origin_allowed(origin, split_authority(host)) is allowed
