"""`aml.neighbours`: each Search hit returned with the turns around it in its session, in order,
marked, deduplicated across hits, never more than top_k items and within a character budget."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.support.server import serve_api

TS = 1683554160000
S1 = ["Mel: how was the weekend?", "Caroline: I went kayaking on the fjord", "Mel: was the water cold?",
      "Caroline: freezing, but the kayaking was worth it", "Mel: brave of you", "Caroline: next time come along"]
S2 = ["Mel: any news about the garden?", "Caroline: the tomatoes finally turned red"]


def _serve(tmp_path: Path, **aml: Any) -> Iterator[httpx.Client]:
    return serve_api(tmp_path / "ws", seed=False, aml=aml)


def _fill(client: httpx.Client) -> None:
    for rid, session, texts in (("r1", "s1", S1), ("r2", "s2", S2)):
        body = {"request_id": rid, "user_id": "u1", "session_id": session, "messages": [
            {"role": "user", "timestamp": TS + 1000 * i, "content": t} for i, t in enumerate(texts)]}
        assert client.post("/v1/aml/add", json=body).status_code == 200
    other = {"request_id": "r1", "user_id": "u2", "session_id": "s1", "messages": [
        {"role": "user", "timestamp": TS, "content": "Gina: kayaking is my thing"}]}
    assert client.post("/v1/aml/add", json=other).status_code == 200


def _search(client: httpx.Client, query: str, top_k: int = 10) -> list[dict[str, Any]]:
    r = client.post("/v1/aml/search", json={"query": query, "user_id": "u1", "top_k": top_k})
    assert r.status_code == 200, r.text
    return r.json()["data"]


def _lines(item: dict[str, Any]) -> list[str]:
    return [line.split("] ", 2)[-1] for line in item["content"].split("\n")]


def test_windows_in_order_marked_and_deduplicated(tmp_path: Path) -> None:
    for client in _serve(tmp_path, neighbours=1, **{"neighbour-chars": 0}):
        _fill(client)
        got = _search(client, "kayaking fjord")
        first = got[0]["content"].split("\n")
        # The hit (turn 2 of s1) between its neighbours, in conversation order; only neighbours are marked.
        assert [line.startswith("[context] ") for line in first] == [True, False, True]
        assert _lines(got[0]) == S1[0:3]
        # Turn 4 also matches "kayaking": its own window, without turn 3 (already shown above).
        assert _lines(got[1]) == S1[3:5]
        every = [line for item in got for line in _lines(item)]
        assert len(every) == len(set(every))  # no turn twice in one answer
        assert "Gina: kayaking is my thing" not in every  # windows stay inside the user's sessions
        assert not any("tomatoes" in line for line in _lines(got[0]) + _lines(got[1]))  # and inside the session
        assert len(_search(client, "kayaking fjord water weekend brave", top_k=2)) <= 2


def test_a_hit_inside_an_earlier_window_gives_its_slot_away(tmp_path: Path) -> None:
    for client in _serve(tmp_path, neighbours=2, **{"neighbour-chars": 0}):
        _fill(client)
        got = _search(client, "kayaking tomatoes", top_k=2)
        assert len(got) == 2
        shown = [line for item in got for line in _lines(item)]
        # Both kayaking turns sit in one window (two turns each side), so the other one is not an item of
        # its own: the two slots are the tomatoes and one kayaking window.
        assert "Caroline: the tomatoes finally turned red" in shown
        kayaking = [item for item in got if "kayaking" in item["content"]]
        assert len(kayaking) == 1 and sum("kayaking" in line for line in _lines(kayaking[0])) == 2
        assert len(shown) == len(set(shown))


def test_the_character_budget_leaves_later_hits_bare(tmp_path: Path) -> None:
    for client in _serve(tmp_path, neighbours=1, **{"neighbour-chars": 60}):
        _fill(client)
        got = _search(client, "kayaking")
        marked = [line for item in got for line in item["content"].split("\n") if line.startswith("[context] ")]
        assert len(marked) >= 1 and sum(map(len, marked)) <= 60
        assert all("\n" not in item["content"] for item in got[1:])


def test_off_by_default(tmp_path: Path) -> None:
    for client in serve_api(tmp_path / "ws", seed=False):
        _fill(client)
        got = _search(client, "kayaking fjord")
        assert all("\n" not in item["content"] and "[context]" not in item["content"] for item in got)
        assert got[0]["content"].endswith(S1[1])
