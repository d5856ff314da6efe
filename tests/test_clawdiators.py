"""The Clawdiators seed's paths and JSON shapes, end to end over a real uvicorn server and HTTP client.

One server for the module; each test uses its own challenge slugs (and agents) so they stay independent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.server import serve_api


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path_factory.mktemp("clawdiators") / "ws", mcp=False)


def data(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["ok"] is True and set(body) == {"ok", "data"}
    return body["data"]


def error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert (body["ok"], body["data"], body["status"]) == (False, None, status)
    assert body["error"] == body["detail"]["reason"]
    return body["error"]


def test_enter_submit_reflect_and_memory_in_the_seeds_shapes(client: httpx.Client) -> None:
    match = data(client.post("/matches/enter", json={"challenge_slug": "cipher-run", "memoryless": False}), 201)
    mid = match["match_id"]
    assert match["challenge"] == {"slug": "cipher-run", "name": "cipher-run"} and match["memoryless"] is False
    assert match["attempt_number"] == 1 and match["challenge_md"].startswith("# TASK.md — cipher-run")
    assert (match["submit_url"], match["reflect_url"]) == (f"/matches/{mid}/submit", f"/matches/{mid}/reflect")
    assert data(client.get(f"/matches/{mid}"))["status"] == "active"

    result = data(client.post(match["submit_url"], json={
        "score": 823, "score_breakdown": {"accuracy": {"score": 900, "weight": 0.5, "weighted": 450}, "speed": 780},
        "answer": {"plaintext": "ignored: the caller scores"}}))
    assert (result["match_id"], result["status"], result["score"]) == (mid, "completed", 823)
    assert result["score_breakdown"] == {"accuracy": 900, "speed": 780} and result["attempt_count"] == 1
    assert error(client.post(match["submit_url"], json={"score": 1}), 409).startswith(f"run {mid} already has")
    assert data(client.post(match["reflect_url"], json={"lesson": "Frequency analysis first."})) == {
        "reflections_count": 1}

    me = data(client.get("/agents/me"))
    assert (me["id"], me["name"], me["memory_redacted"], me["open_matches"]) == ("default", "default", False, [])
    assert me["match_count"] >= 1 and me["harness_hash"]
    (lesson,) = [r for r in me["memory"]["reflections"] if r["lesson"] == "Frequency analysis first."]
    assert lesson["boutName"] == "cipher-run" and set(lesson) == {"matchId", "boutName", "result", "score",
                                                                  "lesson", "ts"}

    patched = data(client.patch("/agents/me/memory", json={
        "strategies": [{"insight": "Read the whole brief", "confidence": 0.9, "ts": "2026-01-01T00:00:00Z"},
                       "Check the output format"],
        "category_notes": {"reasoning": {"note": "draw it out", "confidence": 0.5, "ts": "t"}},
        "stats_summary": {"elo": 1150, "title": "Bronze Carapace", "bestCategory": None},
        "reflections": [{"matchId": mid, "boutName": "cipher-run", "result": "win", "score": 823,
                         "lesson": "Frequency analysis first.", "ts": "t"},  # already known: not added twice
                        {"lesson": "Time-box the first pass.", "ts": "t"}],
    }))["memory"]
    assert [s["insight"] for s in patched["strategies"]] == ["Read the whole brief", "Check the output format"]
    assert patched["category_notes"]["reasoning"]["note"] == "draw it out"
    assert patched["stats_summary"] == "elo: 1150\ntitle: Bronze Carapace"
    lessons = [r["lesson"] for r in patched["reflections"]]
    assert lessons[:2] == ["Time-box the first pass.", "Frequency analysis first."]
    # The map is replaced, as in the seed: a category left out is removed.
    again = data(client.patch("/agents/me/memory", json={"category_notes": {"coding": "tests first"}}))["memory"]
    assert again["category_notes"] == {"coding": {"note": "tests first", "confidence": None,
                                                  "ts": again["category_notes"]["coding"]["ts"]}}
    assert [s["insight"] for s in again["strategies"]] == ["Read the whole brief", "Check the output format"]

    summaries = {c["challenge_slug"]: c for c in data(client.get("/agents/me/memory/challenges"))}
    assert summaries["cipher-run"]["attempt_count"] == 1 and summaries["cipher-run"]["best_score"] == 823
    assert set(summaries["cipher-run"]) >= {"challenge_slug", "attempt_count", "best_score", "avg_score",
                                            "last_attempted_at", "score_trend"}
    assert data(client.patch("/agents/me/memory/challenges/cipher-run", json={
        "notes": "Vigenère twice", "strategies": [{"insight": "try key length 3", "confidence": 1, "ts": "t"}]})) == {
        "challenge_slug": "cipher-run", "updated": True}
    one = data(client.get("/agents/me/memory/challenges/cipher-run"))
    assert (one["best_score"], one["best_match_id"], one["score_trend"]) == (823, mid, "stable")
    assert one["best_score_breakdown"] == {"accuracy": 900, "speed": 780} and one["recent_scores"] == [823]
    assert one["notes"] == "Vigenère twice" and [s["insight"] for s in one["strategies"]] == ["try key length 3"]
    empty = data(client.get("/agents/me/memory/challenges/never-tried"))
    assert (empty["attempt_count"], empty["best_score"], empty["strategies"]) == (0, None, [])

    second = data(client.post("/matches/enter", json={"challenge_slug": "cipher-run"}), 201)
    assert second["attempt_number"] == 2
    for needle in ("Read the whole brief", "Vigenère twice", "Time-box the first pass.", "Best score: 823"):
        assert needle in second["challenge_md"], needle
    data(client.post(second["submit_url"], json={"score": 500}))


def test_analytics_summarise_every_agent_on_the_challenge(client: httpx.Client) -> None:
    client.services.store.ensure_agent("rival")  # type: ignore[attr-defined]
    rival = {"X-Agent-Id": "rival"}
    for score, completed in ((100, True), (300, True), (900, False)):
        m = data(client.post("/matches/enter", json={"challenge_slug": "logic-reef"}, headers=rival), 201)
        data(client.post(f"/matches/{m['match_id']}/submit", json={"score": score, "completed": completed},
                         headers=rival))
    assert data(client.get("/agents/me", headers=rival))["match_count"] == 3
    assert data(client.get("/agents/me/memory/challenges/logic-reef"))["attempt_count"] == 0  # the default agent

    mine = data(client.post("/matches/enter", json={"challenge_slug": "logic-reef"}), 201)
    a = mine["analytics"]
    assert (a["runs"], a["agents"], a["median_score"], a["completion_rate"]) == (3, 1, 300, 0.6667)
    assert a["own"]["runs"] == 0
    assert "Runs with a result: 3 by 1 agent" in mine["challenge_md"] and "Median score: 300" in mine["challenge_md"]
    # The match belongs to the agent that entered it.
    assert "no task run" in error(client.post(f"/matches/{mine['match_id']}/submit", json={"score": 1},
                                              headers=rival), 404)
    data(client.post(f"/matches/{mine['match_id']}/submit", json={"score": 700}))
    a = data(client.post("/matches/enter", json={"challenge_slug": "logic-reef"}, headers=rival), 201)["analytics"]
    assert (a["runs"], a["agents"], a["median_score"], a["own"]["median_score"]) == (4, 2, 500, 300)


def test_a_memoryless_match(client: httpx.Client) -> None:
    headers = {"X-Agent-Id": "quiet"}
    client.services.store.ensure_agent("quiet")  # type: ignore[attr-defined]
    data(client.patch("/agents/me/memory", json={"strategies": ["SECRET-STRATEGY"]}, headers=headers))
    m = data(client.post("/matches/enter", json={"challenge_slug": "maze", "memoryless": True}, headers=headers), 201)
    assert m["memoryless"] is True and m["analytics"] is None and "SECRET" not in m["challenge_md"]
    me = data(client.get("/agents/me", headers=headers))
    assert me["memory_redacted"] is True and me["memory"]["strategies"] == [] and me["open_matches"] == [m["match_id"]]
    assert "memoryless" in error(client.post(m["reflect_url"], json={"lesson": "leak"}, headers=headers), 400)
    out = data(client.post(m["submit_url"], json={"score": 42}, headers=headers))
    assert out["memoryless"] is True and out["attempt_count"] is None
    me = data(client.get("/agents/me", headers=headers))
    assert me["memory_redacted"] is False and [s["insight"] for s in me["memory"]["strategies"]] == ["SECRET-STRATEGY"]


def test_errors_lineage_and_the_api_v1_base(client: httpx.Client) -> None:
    assert "no agent 'ghost'" in error(client.get("/agents/me", headers={"X-Agent-Id": "ghost"}), 404)
    assert "X-Agent-Id" in error(client.get("/agents/me", headers={"X-Agent-Id": "../etc"}), 422)
    assert "less than or equal to 1000" in error(
        client.post("/matches/anything/submit", json={"score": 1500}), 422)
    assert "no task run 'nosuch'" in error(client.post("/matches/nosuch/reflect", json={"lesson": "x"}), 404)
    assert "invalid task slug" in error(client.post("/matches/enter", json={"challenge_slug": "Bad Slug"}), 400)
    assert "invalid task slug" in error(client.get("/agents/me/memory/challenges/Bad!"), 400)

    lineage = data(client.get("/agents/me/harness-lineage"))
    (version,) = lineage["versions"]
    assert version["hash"] == lineage["currentHash"] and version["source"] == "seed"
    labelled = data(client.patch(f"/agents/me/harness-lineage/{version['hash']}/label", json={"label": "v1"}))
    assert labelled == {"hash": version["hash"], "label": "v1"}

    # The seed's own base path, for clients that put `/api/v1` in front of every path.
    assert data(client.get("/api/v1/agents/me"))["id"] == "default"
    m = data(client.post("/api/v1/matches/enter", json={"challenge_slug": "v1-path"}), 201)
    assert m["submit_url"] == f"/api/v1/matches/{m['match_id']}/submit"
    data(client.post(m["submit_url"], json={"score": 10}))
    assert client.get("/api/v1/agents/default/memory").status_code == 200  # our own paths are untouched

    schema = client.get("/openapi.json").json()
    for path, method in (("/agents/me", "get"), ("/agents/me/memory", "patch"), ("/agents/me/memory/challenges",
                         "get"), ("/agents/me/memory/challenges/{slug}", "get"), ("/matches/enter", "post"),
                         ("/matches/{match_id}/reflect", "post"), ("/agents/me/harness-lineage", "get")):
        ok = schema["paths"][path][method]["responses"]
        assert any("$ref" in c.get("schema", {}) for r in ok.values() for c in r.get("content", {}).values()), path
    assert "/api/v1/agents/me" not in schema["paths"]
