"""Issue 35, point 6 over a real uvicorn server with owner isolation on: an owner's always-on file
first made by a write reaches that owner's prompt, ids past SQLite's range are a 422, a query
parameter a JSON-body route does not read is a 422, and a garbage history-index line is skipped."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.server import ApiServer, daemon_services

AGENT = "default"
WS = f"/api/v1/agents/{AGENT}/workspace/memory"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    from mateclaw_mem.api.app import create_app

    services = daemon_services(tmp_path_factory.mktemp("edges") / "ws", owner_isolation=True)
    services.seed_agents()
    services.build()
    try:
        with ApiServer(create_app(services, mcp=False)) as server, \
                httpx.Client(base_url=server.url, timeout=30) as client:
            client.services = services  # type: ignore[attr-defined]
            yield client
    finally:
        services.close()


def _prompt(api: httpx.Client, owner: str) -> str:
    """Every message of the owner's prompt (isolation on: personal memory heads the user message)."""
    r = api.post(f"/api/v1/memory/{AGENT}/context", json={"query": "hello", "owner": owner})
    assert r.status_code == 200, r.text
    return "\n".join(m["content"] for m in r.json()["messages"])


def test_an_owners_profile_first_made_by_a_put_reaches_that_owners_prompt(api: httpx.Client) -> None:
    r = api.put(f"{WS}/file", json={"path": "PROFILE.md", "owner": "carol",
                                    "content": "# Profile\nCarol keeps bees in Ghent.\n"})
    assert r.status_code == 200, r.text
    read = api.get(f"{WS}/file", params={"path": "PROFILE.md", "owner": "carol"}).json()
    assert read["enabled"] is True
    assert "keeps bees in Ghent" in _prompt(api, "carol")
    assert "keeps bees in Ghent" not in _prompt(api, "dave")
    # Any other new file still starts off.
    api.put(f"{WS}/file", json={"path": "notes/bees.md", "owner": "carol", "content": "# Bees\nhive two\n"})
    assert api.get(f"{WS}/file", params={"path": "notes/bees.md", "owner": "carol"}).json()["enabled"] is False


def test_an_owners_memory_first_made_by_write_memory_is_enabled(api: httpx.Client) -> None:
    r = api.post(f"{WS}/write-memory", json={"path": "PROFILE.md", "owner": "erin", "strategy": "append",
                                             "section": "About", "content": "Erin rows on the Leie."})
    assert r.status_code == 200, r.text
    assert api.get(f"{WS}/file", params={"path": "PROFILE.md", "owner": "erin"}).json()["enabled"] is True
    assert "rows on the Leie" in _prompt(api, "erin")


@pytest.mark.parametrize("path, body", [
    ("/api/v1/memory/default/dream/soul-proposal/apply", {"id": 2**65}),
    ("/api/v1/memory/default/dream/soul-proposal/reject", {"id": 2**65}),
    (f"{WS}/undo", {"path": "MEMORY.md", "version": 2**65}),
])
def test_an_id_past_sqlites_integer_range_is_a_422_naming_the_field(api: httpx.Client, path: str,
                                                                     body: dict) -> None:
    r = api.post(path, json=body)
    assert r.status_code == 422, r.text
    field = "id" if "id" in body else "version"
    assert r.json()["detail"]["errors"][0]["loc"] == ["body", field]
    # The largest id SQLite holds is looked up, and simply not there.
    r = api.post(path, json={**body, field: 2**63 - 1})
    assert r.status_code in (404, 409), r.text


@pytest.mark.parametrize("method, path, body", [
    ("post", f"/api/v1/memory/{AGENT}/context", {"query": "hello"}),
    ("post", f"/api/v1/memory/{AGENT}/dream/soul-proposal/apply", {}),
    ("post", f"/api/v1/memory/{AGENT}/dream/soul-proposal/reject", {}),
    ("put", f"{WS}/file", {"path": "notes/q.md", "content": "x\n"}),
])
def test_a_query_parameter_a_body_route_does_not_read_is_a_422(api: httpx.Client, method: str, path: str,
                                                                body: dict) -> None:
    r = api.request(method.upper(), path, params={"owner": "carol"}, json=body)
    assert r.status_code == 422, r.text
    error = r.json()["detail"]["errors"][0]
    assert error["loc"] == ["query", "owner"] and "JSON body" in error["msg"]
    assert not api.services.store.read(AGENT, "notes/q.md", owner="carol").exists  # type: ignore[attr-defined]


def test_the_owner_in_the_body_is_still_read(api: httpx.Client) -> None:
    api.put(f"{WS}/file", json={"path": "PROFILE.md", "owner": "gina", "content": "# Profile\nGina paints.\n"})
    assert "Gina paints" in _prompt(api, "gina")


def test_a_body_route_that_declares_a_query_parameter_still_takes_it(api: httpx.Client) -> None:
    # forget reads its owner from the query: that one passes, an undeclared one beside it does not.
    r = api.post(f"/api/v1/memory/{AGENT}/forget", params={"owner": "carol"}, json={"text": "keeps bees"})
    assert r.status_code == 200, r.text
    r = api.post(f"/api/v1/memory/{AGENT}/forget", params={"owner": "carol", "user": "dave"},
                 json={"text": "keeps bees"})
    assert r.status_code == 422 and r.json()["detail"]["errors"][0]["loc"] == ["query", "user"], r.text
    assert "takes owner" in r.json()["detail"]["errors"][0]["msg"]


def test_a_garbage_history_index_line_leaves_history_and_status_answering(api: httpx.Client) -> None:
    services = api.services  # type: ignore[attr-defined]
    for text in ("# Memory\none\n", "# Memory\ntwo\n"):
        r = api.put(f"{WS}/file", json={"path": "notes/kept.md", "content": text})
        assert r.status_code == 200, r.text
    index = services.settings.state_dir / "history" / AGENT / "notes" / "kept.md" / "versions.jsonl"
    good = index.read_bytes()
    kept = len(api.get(f"{WS}/history", params={"path": "notes/kept.md"}).json()["versions"])
    assert kept == good.count(b"\n") >= 1
    # A line of garbage, a JSON value that is no record, a record with a wrong type; the last line is
    # the first one `status` reads (it parses the newest records from the end).
    index.write_bytes(good + b"\xff garbage {\n" + b"[1, 2]\n" + b'{"version": "three", "sha": 3}\n')
    r = api.get(f"{WS}/history", params={"path": "notes/kept.md"})
    assert r.status_code == 200, r.text
    assert len(r.json()["versions"]) == kept
    r = api.get("/api/v1/status", params={"agent": AGENT})
    assert r.status_code == 200, r.text
    # The good records are still the newest writes it shows.
    assert {w["file"] for w in r.json()["agents"][AGENT]["last_writes"]} >= {"notes/kept.md"}
