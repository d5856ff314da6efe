"""The AML fast lane (api/aml_fast.py) answers exactly what the routes answer.

Two real uvicorn servers on two fresh workspaces, one with the fast lane and one without, are sent
the same requests in the same order - good ones, replays, conflicts, every kind of bad one - and
must give the same status, the same body and the same content type. The lane must also really
answer the good ones (its counter), or the comparison would prove nothing.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mateclaw_mem.api.app import create_app
from tests.support.server import ApiServer, daemon_services

KEY = "lane-key-\u00e9"
TS = 1683554160000


def _add(rid: str, user: str = "u1", text: str = "Caroline: we went camping by the lake", **extra: object) -> dict:
    return {"request_id": rid, "user_id": user, "session_id": f"{user}:s1",
            "messages": [{"role": "user", "timestamp": TS, "content": text}], **extra}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, httpx.Client, object]]:
    made = []
    try:
        for name, lane in (("lane", True), ("routes", False)):
            services = daemon_services(tmp_path_factory.mktemp(name) / "ws", api_key=KEY)
            services.seed_agents()
            services.build()
            app = create_app(services, mcp=False, aml_fast_lane=lane)
            server = ApiServer(app).start()
            client = httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {KEY}".encode()})
            made.append((services, server, client, app))
        yield made[0][2], made[1][2], made[0][3]
    finally:
        for services, server, client, _ in made:
            client.close()
            server.stop()
            services.close()


RAW: list[tuple[str, bytes, dict[str, str]]] = [
    ("/v1/aml/add", json.dumps(_add("r1")).encode(), {}),
    ("/v1/aml/add", json.dumps(_add("r1")).encode(), {}),  # replay
    ("/v1/aml/add", json.dumps(_add("r1", text="another body")).encode(), {}),  # 409 from the service
    ("/v1/aml/add", json.dumps(_add("r2", text="Melanie: \u6211\u559c\u6b22\u8dd1\u6b65 sk-abcdefghijklmnopqrstuvwx")).encode(), {}),
    ("/v1/aml/add", json.dumps(_add("r3", messages=[])).encode(), {}),  # min_length: 422
    ("/v1/aml/add", json.dumps({**_add("r4"), "user_id": 7}).encode(), {}),  # strict types: 422
    ("/v1/aml/add", json.dumps(_add("r5", text="   ")).encode(), {}),  # blank after the model: the service's 400
    ("/v1/aml/add", b'{"request_id": "r6", "user_id": ', {}),  # malformed JSON: 400
    ("/v1/aml/add", b"\xff\xfe not utf-8", {}),
    ("/v1/aml/add", json.dumps(_add("r7")).encode("utf-16"), {}),  # json.loads reads UTF-16; say the same
    ("/v1/aml/add", json.dumps(_add("r8")).encode(), {"Content-Type": "text/plain"}),
    ("/v1/aml/add", json.dumps(_add("r9")).encode(), {"Authorization": "Bearer wrong"}),  # 403
    ("/v1/aml/add", json.dumps(_add("r10", text="lone \ud800 surrogate")).encode(), {}),
    ("/v1/aml/add", json.dumps({**_add("r11"), "extra": {"ignored": True}}).encode(), {}),
    ("/v1/aml/add", b'{"request_id": "r12", "request_id": "r13", "user_id": "u1", "session_id": "s",'
                    b' "messages": [{"role": "user", "content": "dup keys"}]}', {}),
    ("/v1/aml/add", json.dumps(_add("r14", messages=[{"role": "user", "timestamp": TS, "content": [
        {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]}])).encode(), {}),
    ("/v1/aml/add", json.dumps({**_add("r15"), "messages": [{"role": "user", "content": "t", "timestamp": 1.5}]}).encode(), {}),
    ("/v1/aml/add", json.dumps({**_add("r16"), "messages": [{"role": "user", "content": "t",
                                                            "timestamp": "2023-05-08T13:56:00"}]}).encode(), {}),
    ("/v1/aml/search", json.dumps({"query": "camping lake", "user_id": "u1", "top_k": 5}).encode(), {}),
    ("/v1/aml/search", json.dumps({"query": "\u8dd1\u6b65", "user_id": "u1", "top_k": 5}).encode(), {}),
    ("/v1/aml/search", json.dumps({"query": "camping", "user_id": "u1", "top_k": "5"}).encode(), {}),
    ("/v1/aml/search", json.dumps({"query": "camping", "user_id": "u1", "top_k": 0}).encode(), {}),
    ("/v1/aml/search", json.dumps({"query": "x" * 2001, "user_id": "u1", "top_k": 1}).encode(), {}),
    ("/v1/aml/search", json.dumps({"query": "y" * 70000, "user_id": "u1", "top_k": 1}).encode(), {}),  # 413
    ("/v1/aml/search", json.dumps({"query": "lake", "user_id": "u1", "top_k": 3, "options": ["camping"]}).encode(), {}),
    ("/v1/aml/search", json.dumps({"query": [{"type": "text", "text": "look"}], "user_id": "u1", "top_k": 3}).encode(), {}),
]


def test_the_fast_lane_answers_what_the_routes_answer(pair: tuple[httpx.Client, httpx.Client, object]) -> None:
    lane, routes, app = pair
    for path, body, headers in RAW:
        a = lane.post(path, content=body, headers={"Content-Type": "application/json", **headers})
        b = routes.post(path, content=body, headers={"Content-Type": "application/json", **headers})
        assert (a.status_code, a.content) == (b.status_code, b.content), (path, body[:80])
        assert a.headers.get("content-type") == b.headers.get("content-type"), (path, body[:80])
    counts = app.state.aml_fast_lane  # type: ignore[attr-defined]
    # The good requests went through the lane; the refused ones were handed to the routes.
    assert counts["answered"] >= 10 and counts["declined"] >= 8, counts


def test_a_chunked_body_and_a_missing_key_go_to_the_routes(pair: tuple[httpx.Client, httpx.Client, object]) -> None:
    lane, routes, app = pair
    counts = app.state.aml_fast_lane  # type: ignore[attr-defined]
    before = counts["declined"]

    def chunks() -> Iterator[bytes]:
        data = json.dumps(_add("chunked-1")).encode()
        yield data[:20]
        yield data[20:]

    for client in (lane, routes):
        r = client.post("/v1/aml/add", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        bare = httpx.post(str(client.base_url.join("/v1/aml/add")), json=_add("nokey"))
        assert bare.status_code == 401, bare.text
    assert counts["declined"] == before + 2


@pytest.mark.parametrize("sent", [b"", b'{"request_id":'], ids=["no-body", "half-a-body"])
def test_a_body_that_never_comes_is_the_same_408(tmp_path: Path, sent: bytes) -> None:
    answers = []
    for lane in (True, False):
        services = daemon_services(tmp_path / f"ws-{lane}", server={"body_read_timeout_seconds": 0.3})
        services.seed_agents()
        services.build()
        try:
            with ApiServer(create_app(services, mcp=False, aml_fast_lane=lane)) as server, \
                    socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
                sock.sendall(b"POST /v1/aml/add HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 100\r\n\r\n" + sent)  # and then nothing
                reply = b""
                while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    reply += chunk
        finally:
            services.close()
        head, _, body = reply.partition(b"\r\n\r\n")
        answers.append((head.split(b"\r\n")[0], json.loads(body)))
    assert answers[0] == answers[1]
    assert answers[0][0].endswith(b"408 Request Timeout") and "0.3 seconds" in answers[0][1]["detail"]["reason"]
