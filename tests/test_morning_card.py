"""The nightly report and the morning card (issue 17, point 6), over a real uvicorn server."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from tests.support.server import ApiServer, daemon_services

AGENT = "default"
BASE = f"/api/v1/memory/{AGENT}/dream"
FACT = "Project Atlas deadline: December 15"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    from mateclaw_mem.api.app import create_app

    services = daemon_services(tmp_path_factory.mktemp("card") / "ws", owner_isolation=True,
                               mate={"memory": {"fact": {"projection_enabled": True, "forget_enabled": False}}})
    services.seed_agents()
    services.build()
    now = services.clock.now()
    for days in (2, 1):
        services.store.append_daily(AGENT, "Work", f"- {FACT}\n- one-off {days}", actor="extraction",
                                    owner="alice", when=now - timedelta(days=days))
    try:
        with ApiServer(create_app(services, mcp=False)) as server, \
                httpx.Client(base_url=server.url, timeout=30) as client:
            client.services = services  # type: ignore[attr-defined]
            r = client.post(f"/api/v1/memory/{AGENT}/emergence", json={"owner": "alice"})
            assert r.status_code == 200 and r.json()["status"] == "done", r.text
            yield client
    finally:
        services.close()


def card(api: httpx.Client, owner: str | None = "alice") -> httpx.Response:
    return api.get(f"{BASE}/morning-card", params={"owner": owner} if owner else {})


def promoted_id(api: httpx.Client) -> str:
    report = card(api).json()["report"]
    fid = next(p["fact_id"] for p in report["promoted"] if FACT in p["text"])
    assert fid
    return fid


def test_the_report_is_stored_with_the_run_and_rendered_into_dreams(api: httpx.Client) -> None:
    services: Any = api.services  # type: ignore[attr-defined]
    last = services.dreaming.last_run(AGENT, owner="alice")
    report = services.dreaming.runs.report(AGENT, "alice", last["run_id"])
    assert report["status"] == "done" and report["looked_at"]["sections"] == 2
    assert any(FACT in f["text"] for f in report["facts"]["added"]) and "+- " + FACT in report["memory_diff"]
    assert report["contradictions"] == [] or isinstance(report["contradictions"], list)
    assert any("one-off" in k["text"] and k["reason"] for k in report["kept"])
    diary = services.store.read(AGENT, "DREAMS.md", owner="alice").text
    assert "### Facts" in diary and "### MEMORY.md diff" in diary and FACT in diary


def test_the_card_is_the_owners_only(api: httpx.Client) -> None:
    assert card(api).status_code == 200
    assert card(api, "bob").status_code == 204 and card(api, None).status_code == 204
    fid = promoted_id(api)
    r = api.post(f"{BASE}/morning-card/facts/{fid}/confirm", json={"owner": "bob"})
    assert r.status_code == 404, r.text
    assert api.get("/api/v1/memory/nobody/dream/morning-card").status_code == 404


def test_confirm_raises_trust_and_edit_changes_the_file(api: httpx.Client) -> None:
    fid = promoted_id(api)
    before = next(f for f in card(api).json()["facts"] if f["id"] == fid)
    r = api.post(f"{BASE}/morning-card/facts/{fid}/confirm", json={"owner": "alice"})
    assert r.status_code == 200 and r.json()["trust"] > before["trust"] and r.json()["last_confirmed"]
    r = api.post(f"{BASE}/morning-card/facts/{fid}/edit", json={"owner": "alice", "text": "Atlas ships December 20"})
    assert r.status_code == 200, r.text
    services: Any = api.services  # type: ignore[attr-defined]
    text = services.store.read(AGENT, "MEMORY.md", owner="alice").text
    assert "Atlas ships December 20" in text and "December 15 (Source" not in text


def test_forget_without_the_forget_service_is_a_clear_409(api: httpx.Client) -> None:
    services: Any = api.services  # type: ignore[attr-defined]
    fact = services.facts.list(AGENT, "alice")[0]
    r = api.post(f"{BASE}/morning-card/facts/{fact.id}/forget", json={"owner": "alice"})
    # Off by default: 409 naming why, whether the forget service is built or not (then "not available").
    assert r.status_code == 409 and ("forget not available" in r.text or "forget is off" in r.text), r.text
    assert services.facts.get(AGENT, "alice", fact.id)


def test_seen_empties_the_card(api: httpx.Client) -> None:
    r = api.post(f"{BASE}/morning-card/seen", json={"owner": "bob"})
    assert r.json()["marked"] == 0 and card(api).status_code == 200  # bob's seen is not alice's
    services: Any = api.services  # type: ignore[attr-defined]
    assert services.morning_card.card_pointer(AGENT, "alice").startswith("Morning card waiting")
    r = api.post(f"{BASE}/morning-card/seen", json={"owner": "alice"})
    assert r.status_code == 200 and r.json()["marked"] == 1
    assert card(api).status_code == 204 and services.morning_card.card_pointer(AGENT, "alice") is None


@pytest.mark.parametrize("on", [True, False])
def test_the_days_first_context_points_to_a_waiting_card(tmp_path: Any, on: bool) -> None:
    services = daemon_services(tmp_path / "ws", mate={"memory": {"dream": {"morning_card_pointer": on}}})
    try:
        services.seed_agents()
        now = services.clock.now()
        for days in (2, 1):
            services.store.append_daily(AGENT, "Work", f"- {FACT}", actor="extraction", when=now - timedelta(days=days))
        assert services.dreaming.dream(AGENT).status == "done"
        first = services.context.build(AGENT, query="what is due?").system
        second = services.context.build(AGENT, query="what is due?").system
        assert ("Morning card waiting" in first) is on
        assert "Morning card waiting" not in second  # once a day, not on every turn
    finally:
        services.close()
