"""The AML agent is made by the first Add, not seeded into every workspace (issue 38.9): a daemon
that never answered `/v1/aml/add` has only the default agent; the first Add (through the real HTTP
face, fast lane included) creates the `aml` agent's folder, and Search before any Add works without
it."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.server import serve_api

ADD = {"request_id": "r-first", "user_id": "u1", "session_id": "s1",
       "messages": [{"role": "user", "content": "Caroline: my pottery class starts on Monday"}]}


def test_the_aml_agent_appears_with_the_first_add_only(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    served = serve_api(ws)
    client: httpx.Client = next(served)
    try:
        store = client.services.store  # type: ignore[attr-defined]
        assert store.agents() == ["default"]  # the daemon's start seeds the default agent only
        found = client.post("/v1/aml/search", json={"user_id": "u1", "query": "pottery", "top_k": 3})
        assert found.status_code == 200, found.text
        assert store.agents() == ["default"] and not (ws / "aml").exists()  # a search creates nothing
        added = client.post("/v1/aml/add", json=ADD)
        assert added.status_code == 200 and added.json()["success"] is True, added.text
        assert store.agents() == ["aml", "default"] and (ws / "aml" / "AGENTS.md").is_file()
        again = client.post("/v1/aml/add", json={**ADD, "request_id": "r-second"})
        assert again.status_code == 200 and store.agents() == ["aml", "default"]
        hits = client.post("/v1/aml/search", json={"user_id": "u1", "query": "pottery", "top_k": 3}).json()
        assert "pottery" in str(hits)
    finally:
        served.close()
