"""`aml.rerank`: a model may only reorder the lexical top-n. Against loopback servers that answer well,
badly, slowly and with invented or another user's ids, the returned set never changes."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from mateclaw_mem.memory.forget.scan import patterns, walk
from tests.support.server import ApiServer, serve_api

TS = 1683554160000
TOP_N = 5


class Script:
    """What the loopback model server answers next, and what it was asked."""

    def __init__(self) -> None:
        self.mode = "good"
        self.asked: list[dict[str, Any]] = []
        self.foreign = ""  # another user's message id, for the chat answers that name it


def _app(script: Script) -> Starlette:
    async def rerank(request: Request) -> Response:
        body = await request.json()
        script.asked.append(body)
        n = len(body["documents"])
        if script.mode == "slow":
            await asyncio.sleep(3)
        if script.mode == "error":
            return JSONResponse({"error": "boom"}, status_code=500)
        if script.mode == "echo":  # an error quoting the documents: the user's words in a reason
            return JSONResponse({"error": "cannot rank", "documents": body["documents"]}, status_code=400)
        if script.mode == "garbage":
            return PlainTextResponse("<html>not json</html>")
        if script.mode == "shape":
            return JSONResponse({"ranking": "first"})
        if script.mode == "invented":  # out of range, negative, a string, a bool: all dropped; then the last one
            return JSONResponse({"results": [{"index": 99, "relevance_score": 9}, {"index": -1, "relevance_score": 8},
                                             {"index": "0", "relevance_score": 7}, {"index": True, "relevance_score": 6},
                                             {"index": n - 1, "relevance_score": 5}]})
        # good: the reverse of the lexical order (scores rising with the index), unsorted like some servers
        return JSONResponse({"results": [{"index": i, "relevance_score": i / 10} for i in range(n)]})

    async def chat(request: Request) -> Response:
        body = await request.json()
        script.asked.append(body)
        ids = body["response_format"]["json_schema"]["schema"]["properties"]["ids"]["items"]["enum"]
        if script.mode == "invented":
            answer: Any = {"ids": ["m424242", script.foreign, ids[-1], ids[-1]]}
        elif script.mode == "garbage":
            answer = "I think the second one"
        else:
            answer = {"ids": list(reversed(ids))}
        content = answer if isinstance(answer, str) else json.dumps(answer)
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": content}}]})

    return Starlette(routes=[Route("/v1/rerank", rerank, methods=["POST"]),
                             Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.fixture
def script() -> Iterator[tuple[Script, str]]:
    s = Script()
    with ApiServer(_app(s)) as server:
        yield s, server.url


def _serve(tmp_path: Path, url: str, kind: str) -> Iterator[httpx.Client]:
    rerank = {"url": url + ("/v1/rerank" if kind == "rerank" else "/v1"), "kind": kind, "top-n": TOP_N,
              "deadline-seconds": 0.5, "model": "tiny"}
    return serve_api(tmp_path / "ws", seed=False, aml={"rerank": rerank})


def _fill(client: httpx.Client) -> None:
    texts = [f"Caroline: the apple orchard visit number {i} " + "apple " * (8 - i) for i in range(8)]
    for user, words in (("u1", texts), ("u2", ["Gina: apple pie at the apple orchard"])):
        r = client.post("/v1/aml/add", json={"request_id": "r", "user_id": user, "session_id": "s", "messages": [
            {"role": "user", "timestamp": TS + i, "content": t} for i, t in enumerate(words)]})
        assert r.status_code == 200, r.text


def _search(client: httpx.Client, top_k: int = 7) -> list[dict[str, Any]]:
    r = client.post("/v1/aml/search", json={"query": "apple orchard", "user_id": "u1", "top_k": top_k})
    assert r.status_code == 200, r.text
    return r.json()["data"]


def _lexical(client: httpx.Client) -> list[dict[str, Any]]:
    aml = client.services.aml  # type: ignore[attr-defined]
    reranker, aml.reranker = aml.reranker, None
    try:
        return _search(client)
    finally:
        aml.reranker = reranker


def _same_set(got: list[dict[str, Any]], lexical: list[dict[str, Any]]) -> None:
    assert sorted(i["id"] for i in got) == sorted(i["id"] for i in lexical)
    assert got[TOP_N:] == lexical[TOP_N:]  # past the top-n nothing moves, scores included
    scores = [i["score"] for i in got]
    assert scores == sorted(scores, reverse=True)
    assert sorted(scores) == sorted(i["score"] for i in lexical)


def _failures(client: httpx.Client) -> dict[str, int]:
    usage = client.services.aml.reranker.usage  # type: ignore[attr-defined]
    return usage.failures().get("aml_rerank", {}).get("by_kind", {})


@pytest.mark.parametrize("kind", ["rerank", "chat"])
def test_a_good_answer_reorders_only_the_top_n(tmp_path: Path, script: tuple[Script, str], kind: str) -> None:
    s, url = script
    for client in _serve(tmp_path, url, kind):
        _fill(client)
        lexical = _lexical(client)
        assert len(lexical) == 7
        got = _search(client)
        _same_set(got, lexical)
        assert [i["id"] for i in got[:TOP_N]] == [i["id"] for i in reversed(lexical[:TOP_N])]
        assert [i["content"] for i in got[:TOP_N]] == [i["content"] for i in reversed(lexical[:TOP_N])]
        asked = s.asked[-1]
        shown = asked["documents"] if kind == "rerank" else asked["messages"][1]["content"]
        assert "Gina" not in json.dumps(shown)  # only this user's candidates are ever shown
        status = dict(client.services.status_reporters())["aml"]()  # type: ignore[attr-defined]
        assert status["rerank"]["kind"] == kind and status["rerank"]["reordered"] == 1


@pytest.mark.parametrize("mode,kind", [("error", "server"), ("garbage", "invalid_output"), ("shape", "invalid_output"),
                                       ("slow", "timeout")])
def test_failures_leave_the_lexical_order_and_are_recorded(tmp_path: Path, script: tuple[Script, str], mode: str,
                                                           kind: str) -> None:
    s, url = script
    for client in _serve(tmp_path, url, "rerank"):
        _fill(client)
        lexical = _lexical(client)
        s.mode = mode
        assert _search(client) == lexical
        assert _failures(client) == {kind: 1}
        # The failure is filed under the user: deleting the user deletes it too.
        client.delete("/v1/aml/users/u1")
        assert _failures(client) == {}


def test_invented_indices_are_dropped(tmp_path: Path, script: tuple[Script, str]) -> None:
    s, url = script
    for client in _serve(tmp_path, url, "rerank"):
        _fill(client)
        lexical = _lexical(client)
        s.mode = "invented"
        got = _search(client)
        _same_set(got, lexical)
        head = [i["id"] for i in lexical[:TOP_N]]
        assert [i["id"] for i in got[:TOP_N]] == [head[-1], *head[:-1]]


def test_invented_and_foreign_ids_from_a_chat_model_never_enter(tmp_path: Path, script: tuple[Script, str]) -> None:
    s, url = script
    for client in _serve(tmp_path, url, "chat"):
        _fill(client)
        r = client.post("/v1/aml/search", json={"query": "apple pie", "user_id": "u2", "top_k": 1})
        s.foreign = r.json()["data"][0]["id"]
        lexical = _lexical(client)
        s.mode = "invented"
        got = _search(client)
        _same_set(got, lexical)
        assert s.foreign not in {i["id"] for i in got} and "m424242" not in {i["id"] for i in got}
        head = [i["id"] for i in lexical[:TOP_N]]
        assert [i["id"] for i in got[:TOP_N]] == [head[-1], *head[:-1]]
        s.mode = "garbage"
        assert _search(client) == lexical
        assert _failures(client) == {"invalid_output": 1}


def test_top_k_below_top_n_and_a_single_result(tmp_path: Path, script: tuple[Script, str]) -> None:
    s, url = script
    for client in _serve(tmp_path, url, "rerank"):
        _fill(client)
        got = _search(client, top_k=3)
        assert len(got) == 3 and len(s.asked[-1]["documents"]) == 3
        asked = len(s.asked)
        assert len(_search(client, top_k=1)) == 1
        assert len(s.asked) == asked  # one candidate: nothing to order, no call


def test_off_by_default(tmp_path: Path) -> None:
    for client in serve_api(tmp_path / "ws", seed=False):
        assert client.services.aml.reranker is None  # type: ignore[attr-defined]
        assert dict(client.services.status_reporters())["aml"]()["rerank"] == "off"  # type: ignore[attr-defined]


def test_a_failure_quoting_the_words_keeps_them_in_the_users_record_only(
        tmp_path: Path, script: tuple[Script, str], caplog: pytest.LogCaptureFixture) -> None:
    s, url = script
    for client in _serve(tmp_path, url, "rerank"):
        _fill(client)
        s.mode = "echo"
        caplog.set_level(logging.DEBUG)
        _search(client)
        assert _failures(client) == {"bad_request": 1}
        assert not [r for r in caplog.records if "orchard" in r.getMessage()]
        pats = {"words": patterns("orchard visit number")}
        assert walk(tmp_path / "ws", pats).hits["words"]  # in the log (and the failure record) before
        assert client.delete("/v1/aml/users/u1").status_code == 200
        assert walk(tmp_path / "ws", pats).hits["words"] == []  # the failure's reason went with the user


def test_serve_aml_only_on_sqlite_records_a_failure_as_the_full_daemon(
    tmp_path: Path, script: tuple[Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`serve --aml-only` over SQLite builds its reranker with the full daemon's builder
    (runtime/build/aml.reranker): in rules mode a failure is in log.db's usage log all the same (on
    PostgreSQL that daemon keeps no usage log: nothing of it is on its machine's disk)."""
    from mateclaw_mem.conversations.aml import AmlMessage
    from mateclaw_mem.runtime.aml_only import open_node
    from mateclaw_mem.settings import load_settings
    from tests.support.isolation import no_config_here

    s, url = script
    no_config_here(monkeypatch, tmp_path)
    rerank = {"url": url + "/v1/rerank", "kind": "rerank", "top-n": TOP_N, "deadline-seconds": 0.5, "model": "tiny"}
    node = open_node(load_settings(None, tmp_path / "ws", overrides={"timezone": "UTC", "aml": {"rerank": rerank}}))
    try:
        assert node.mode == "rules"
        node.aml.add("r", "u1", "s", [AmlMessage("user", f"Caroline: the apple orchard visit {i}", TS + i)
                                      for i in range(3)])
        s.mode = "error"
        assert len(node.aml.search("apple orchard", "u1", 3)) == 3  # the lexical order, served
        assert s.asked, "the reranker was not asked"
        usage = node.aml.reranker.usage  # type: ignore[attr-defined]
        assert usage.failures()["aml_rerank"]["by_kind"] == {"server": 1}
    finally:
        node.close()
