"""The AML Add/Search contract against a real uvicorn server, real SQLite, real HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.aml_stores import STORES, serve_store
from tests.support.server import serve_api

KEY = "s3cret-key-\u00e9-do-not-leak"
TS = 1683554160000  # 2023-05-08 13:56 UTC


@pytest.fixture(params=STORES)
def client(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[httpx.Client]:
    """The contract on either store: SQLite (the daemon) and PostgreSQL (`serve --aml-only`)."""
    yield from serve_store(request, tmp_path, monkeypatch)


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path / "ws", api_key=KEY, seed=False)


def add_body(request_id: str, user_id: str = "u1", session_id: str = "s1", *texts: str) -> dict:
    return {
        "request_id": request_id,
        "user_id": user_id,
        "session_id": session_id,
        "messages": [
            {"role": "user", "timestamp": TS + i, "content": t} for i, t in enumerate(texts or ("hello there",))
        ],
    }


def search(client: httpx.Client, query: str, user_id: str = "u1", top_k: int = 10, **kw: object) -> list[dict]:
    r = client.post("/v1/aml/search", json={"query": query, "user_id": user_id, "top_k": top_k, **kw})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert isinstance(data, list)
    return data


def reason(r: httpx.Response) -> str:
    detail = r.json()["detail"]
    assert isinstance(detail["reason"], str) and detail["reason"]
    return detail["reason"]


# ---------------------------------------------------------------------------- add


def test_add_echoes_ids_byte_for_byte_and_is_searchable_at_once(client: httpx.Client) -> None:
    ids = {"request_id": " req/ü 1 ", "user_id": "bench:r1:locomo:conv-26 ", "session_id": "séss\u00a0ion:1"}
    text = "Caroline: I adopted a puppy named Biscuit"
    body = {**ids, "messages": [{"role": "user", "timestamp": TS, "content": text}]}
    r = client.post("/v1/aml/add", content=json.dumps(body, ensure_ascii=False).encode(),
                    headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    assert r.json() == {"success": True, **ids}
    hits = search(client, "What is the puppy called?", user_id=ids["user_id"])
    assert len(hits) == 1
    item = hits[0]
    assert "Caroline: I adopted a puppy named Biscuit" in item["content"]
    assert item["content"].startswith("[2023-05-08 Mon] ")  # the date prefix
    assert item["created_at"].startswith("2023-05-08T13:56")
    assert isinstance(item["score"], float) and isinstance(item["id"], str) and item["id"]


def test_message_without_timestamp_or_speaker_gets_time_and_role(client: httpx.Client) -> None:
    body = {"request_id": "r", "user_id": "u1", "session_id": "s",
            "messages": [{"role": "assistant", "content": "the meeting moved to Thursday"}]}
    assert client.post("/v1/aml/add", json=body).status_code == 200
    (hit,) = search(client, "meeting thursday")
    assert "assistant: the meeting moved to Thursday" in hit["content"]
    assert hit["created_at"].endswith("Z")


def test_same_request_again_is_the_same_200_without_duplicates(client: httpx.Client) -> None:
    body = add_body("r1", "u1", "s1", "I love hiking in the Alps", "We went camping last summer")
    first = client.post("/v1/aml/add", json=body)
    # A retry may serialise differently (key order): still the same request.
    again = client.post("/v1/aml/add", content=json.dumps(dict(reversed(list(body.items())))),
                        headers={"content-type": "application/json"})
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert len(search(client, "hiking Alps camping summer")) == 2


def test_same_request_id_with_another_body_is_409_and_stores_nothing(client: httpx.Client) -> None:
    assert client.post("/v1/aml/add", json=add_body("r1", "u1", "s1", "apples")).status_code == 200
    # (Another user's request with the same id is its own request: test_request_ids_are_per_user.)
    for changed in (add_body("r1", "u1", "s1", "bananas"), add_body("r1", "u1", "s2", "apples")):
        r = client.post("/v1/aml/add", json=changed)
        assert r.status_code == 409, r.text
        assert "request_id" in reason(r)
    assert search(client, "bananas") == []
    assert len(search(client, "apples")) == 1


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda b: b.pop("request_id"), "request_id"),
        (lambda b: b.pop("user_id"), "user_id"),
        (lambda b: b.pop("session_id"), "session_id"),
        (lambda b: b.pop("messages"), "messages"),
        (lambda b: b.update(request_id=""), "request_id"),
        (lambda b: b.update(user_id="   "), "user_id"),
        (lambda b: b.update(messages=[]), "messages"),
        (lambda b: b["messages"][0].update(content=""), "content"),
        (lambda b: b["messages"][0].update(content="  \n "), "content"),
        (lambda b: b["messages"][0].pop("role"), "role"),
    ],
)
def test_missing_or_empty_fields_are_refused_with_a_reason(client: httpx.Client, mutate, field: str) -> None:
    body = add_body("r1")
    mutate(body)
    r = client.post("/v1/aml/add", json=body)
    assert r.status_code in (400, 422), r.text
    assert field in reason(r)
    assert search(client, "hello") == []


@pytest.mark.parametrize(
    "body",
    [
        {"request_id": 1, "user_id": "u", "session_id": "s", "messages": [{"role": "user", "content": "x"}]},
        {"request_id": "r", "user_id": ["u"], "session_id": "s", "messages": [{"role": "user", "content": "x"}]},
        {"request_id": "r", "user_id": "u", "session_id": "s", "messages": {"role": "user", "content": "x"}},
        {"request_id": "r", "user_id": "u", "session_id": "s", "messages": [{"role": "user", "content": 5}]},
        {"request_id": "r", "user_id": "u", "session_id": "s",
         "messages": [{"role": "user", "content": "x", "timestamp": "yesterday"}]},
        {"request_id": "r", "user_id": "u", "session_id": "s",
         "messages": [{"role": "user", "content": "x", "timestamp": True}]},
        ["not", "an", "object"],
    ],
)
def test_wrong_types_are_422_with_field_details(client: httpx.Client, body: object) -> None:
    r = client.post("/v1/aml/add", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail["reason"] and detail["errors"] and all("loc" in e and "msg" in e for e in detail["errors"])


def test_malformed_json_is_refused_with_a_reason(client: httpx.Client) -> None:
    for path in ("/v1/aml/add", "/v1/aml/search"):
        r = client.post(path, content=b'{"request_id": "r", "user_id": ', headers={"content-type": "application/json"})
        assert r.status_code in (400, 422), r.text
        assert "JSON" in reason(r)


def test_absurd_bodies_are_413(client: httpx.Client) -> None:
    many = add_body("r-many", "u1", "s1", *[f"message {i}" for i in range(1001)])
    r = client.post("/v1/aml/add", json=many)
    assert r.status_code == 413, r.text
    assert "1000" in reason(r)
    huge = add_body("r-huge", "u1", "s1", "word " * 500_000)  # 2.5 MB
    r = client.post("/v1/aml/add", json=huge)
    assert r.status_code == 413, r.text
    reason(r)
    # Chunked upload without a Content-Length cannot slip past the limit.
    payload = json.dumps(huge).encode()
    r = client.post("/v1/aml/add", content=iter([payload[i:i + 65536] for i in range(0, len(payload), 65536)]),
                    headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text
    assert search(client, "word") == []
    # Generous below the limit: 200 messages of 50 words each is accepted.
    ok = add_body("r-ok", "u1", "s1", *[("word " * 50) + str(i) for i in range(200)])
    assert client.post("/v1/aml/add", json=ok).status_code == 200


# ---------------------------------------------------------------------------- search


def test_search_is_ranked_bounded_by_top_k_and_empty_when_nothing_matches(client: httpx.Client) -> None:
    texts = [f"Melanie: I painted a sunset number {i} at the lake" for i in range(15)]
    texts.append("Melanie: my sunset painting at the lake won a prize, a painted lake sunset")
    assert client.post("/v1/aml/add", json=add_body("r1", "u1", "s1", *texts)).status_code == 200
    for k in (1, 3, 10, 100):
        hits = search(client, "sunset lake painting", top_k=k)
        assert len(hits) == min(k, 16)
        scores = [h["score"] for h in hits]
        assert scores == sorted(scores, reverse=True)
        assert len({h["id"] for h in hits}) == len(hits)
    assert "won a prize" in search(client, "painting prize", top_k=1)[0]["content"]
    assert search(client, "quantum chromodynamics") == []
    assert search(client, "sunset", user_id="nobody") == []
    for bad in ({"top_k": 0}, {"top_k": "5"}, {"top_k": 2.5}, {"query": ""}, {"user_id": ""}):
        body = {"query": "sunset", "user_id": "u1", "top_k": 5, **bad}
        r = client.post("/v1/aml/search", json=body)
        assert r.status_code in (400, 422), r.text
        reason(r)


def test_user_ids_sharing_a_prefix_never_see_each_other(client: httpx.Client) -> None:
    users = ["alice", "alice2", "alic", "alice:1", "alice:10", "ALICE", "alice "]
    for n, u in enumerate(users):
        body = add_body(f"r{n}", u, "s", f"secret garden note owned by tag{n}")
        assert client.post("/v1/aml/add", json=body).status_code == 200
    for n, u in enumerate(users):
        hits = search(client, "secret garden note owned", user_id=u, top_k=50)
        assert [h["content"].split("tag")[-1] for h in hits] == [str(n)], u
    assert search(client, "secret garden", user_id="alice*") == []
    assert search(client, "secret garden", user_id="%") == []


def test_options_may_inform_retrieval_but_results_stay_stored_memory(client: httpx.Client) -> None:
    texts = ["Nate: my favourite food is spicy ramen", "Nate: I watched a movie yesterday"]
    assert client.post("/v1/aml/add", json=add_body("r1", "u1", "s1", *texts)).status_code == 200
    hits = search(client, "What does Nate like?", options=["spicy ramen", "sushi"], top_k=5)
    assert hits and "spicy ramen" in hits[0]["content"]
    assert all(h["content"].split("] ", 1)[1] in texts for h in hits)


def test_cjk_messages_are_found_by_cjk_words(client: httpx.Client) -> None:
    body = add_body("r1", "u1", "s1", "用户喜欢周日早上跑步", "我们明天去北京开会")
    assert client.post("/v1/aml/add", json=body).status_code == 200
    for query in ("跑步", "周日早上", "用户什么时候跑步？"):
        hits = search(client, query)
        assert hits and "用户喜欢周日早上跑步" in hits[0]["content"], query
    assert "北京" in search(client, "北京")[0]["content"]


def test_fifty_concurrent_adds_for_one_user_lose_and_duplicate_nothing(client: httpx.Client) -> None:
    # 25 distinct requests over 5 parallel sessions, each delivered twice at the same time.
    bodies = [add_body(f"req-{i}", "crowd", f"session-{i % 5}", f"unique fact zebra{i} stripe{i}") for i in range(25)]

    def post(body: dict) -> httpx.Response:
        return client.post("/v1/aml/add", json=body)

    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(post, bodies + bodies))
    assert [r.status_code for r in responses] == [200] * 50
    for r, body in zip(responses, bodies + bodies, strict=True):
        assert r.json() == {"success": True, "request_id": body["request_id"], "user_id": "crowd",
                            "session_id": body["session_id"]}
    hits = search(client, "unique fact zebra stripe", user_id="crowd", top_k=1000)
    contents = sorted(h["content"].split("] ", 1)[1] for h in hits)
    assert contents == sorted(f"user: unique fact zebra{i} stripe{i}" for i in range(25))
    for i in range(25):
        # Neighbouring turns of a session share a low-weight field, so they may follow; first is exact.
        assert f"zebra{i} " in search(client, f"zebra{i}", user_id="crowd", top_k=5)[0]["content"]


def test_persisted_messages_survive_a_restart(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    first = serve_api(ws, seed=False)
    c = next(first)
    assert c.post("/v1/aml/add", json=add_body("r1", "u1", "s1", "the blue guitar")).status_code == 200
    first.close()
    (ws / ".mateclaw" / "messages.db").unlink()  # derived: rebuilt from the log on start
    second = serve_api(ws, seed=False)
    c = next(second)
    assert "blue guitar" in search(c, "guitar")[0]["content"]
    assert c.post("/v1/aml/add", json=add_body("r1", "u1", "s1", "the blue guitar")).status_code == 200
    assert c.post("/v1/aml/add", json=add_body("r1", "u1", "s1", "the red guitar")).status_code == 409
    assert len(search(c, "guitar")) == 1
    second.close()


# ---------------------------------------------------------------------------- health and auth


def test_health_is_open_and_secret_free(keyed: httpx.Client) -> None:
    r = keyed.get("/health")
    assert r.status_code == 200
    assert r.json()["status"] == "ok"
    assert KEY not in r.text


def test_no_key_configured_means_open(client: httpx.Client) -> None:
    assert client.post("/v1/aml/add", json=add_body("r1")).status_code == 200
    r = client.post("/v1/aml/add", json=add_body("r2"), headers={"Authorization": "Bearer anything"})
    assert r.status_code == 200


@pytest.mark.parametrize(
    "headers",
    [{"Authorization": f"Bearer {KEY}"}, {"Authorization": f"Token {KEY}"}, {"X-Api-Key": KEY},
     {"authorization": f"bearer {KEY}"}],
)
def test_each_auth_mode_accepts_the_key(keyed: httpx.Client, headers: dict[str, str]) -> None:
    hdrs = {k: v.encode() for k, v in headers.items()}  # the key is not ASCII; send raw bytes
    r = keyed.post("/v1/aml/add", json=add_body("r1"), headers=hdrs)
    assert r.status_code == 200, r.text
    r = keyed.post("/v1/aml/search", json={"query": "hello", "user_id": "u1", "top_k": 3}, headers=hdrs)
    assert r.status_code == 200 and len(r.json()["data"]) == 1


@pytest.mark.parametrize(
    "headers, status",
    [
        ({}, 401),
        ({"Authorization": "Bearer"}, 401),
        ({"Authorization": "Basic abc"}, 401),
        ({"Authorization": "Bearer wrong"}, 403),
        ({"Authorization": "Token " + KEY[:-1]}, 403),
        ({"X-Api-Key": "wrong"}, 403),
    ],
)
def test_missing_key_is_401_and_wrong_key_is_403_without_leaking(keyed: httpx.Client, headers, status: int) -> None:
    search_body = {"query": "hello", "user_id": "u1", "top_k": 3}
    for path, body in (("/v1/aml/add", add_body("r1")), ("/v1/aml/search", search_body)):
        r = keyed.post(path, json=body, headers={k: v.encode() for k, v in headers.items()})
        assert r.status_code == status, r.text
        assert KEY not in r.text and KEY.encode() not in r.content
        reason(r)
    # Nothing was stored by the refused add.
    ok = {"X-Api-Key": KEY.encode()}
    assert keyed.post("/v1/aml/search", json=search_body, headers=ok).json() == {"data": []}


def test_full_reindex_rebuilds_the_add_search_index_from_the_log(tmp_path) -> None:
    from mateclaw_mem.conversations.aml import AmlMessage
    from mateclaw_mem.runtime.index_ops import reindex
    from mateclaw_mem.runtime.services import Services
    from mateclaw_mem.settings import load_settings

    cfg = tmp_path / "c.yaml"
    cfg.write_text("timezone: UTC\n", encoding="utf-8")
    svc = Services(load_settings(cfg, tmp_path / "ws"))
    try:
        svc.aml.add("r1", "u1", "s1", [AmlMessage(role="user", content="I adopted a greyhound named Comet")])
        assert len(svc.aml.search("greyhound", "u1", 5)) == 1  # indexed (the Add's indexing is done by now)
        import sqlite3

        with sqlite3.connect(tmp_path / "ws" / ".mateclaw" / "messages.db") as damaged:  # behind its back
            damaged.executescript("DELETE FROM docs; DELETE FROM powners; DELETE FROM postings;"
                                  " DELETE FROM pdocs; DELETE FROM pfeat; DELETE FROM pspeakers;")
        assert svc.aml.search("greyhound", "u1", 5) == []
        report = reindex(svc)
        assert report["aml_messages"] == 1
        hits = svc.aml.search("greyhound", "u1", 5)
        assert [h.content.endswith("I adopted a greyhound named Comet") for h in hits] == [True]
    finally:
        svc.close()


# ---------------------------------------------------------------------------- idempotency per user, caps


def test_request_ids_are_per_user(client: httpx.Client) -> None:
    # One user's request id is no business of another's: both Adds are stored, each its own.
    first = client.post("/v1/aml/add", json=add_body("r-1", "alice", "s1", "alice keeps a ferret"))
    second = client.post("/v1/aml/add", json=add_body("r-1", "bob", "s1", "bob keeps a parrot"))
    assert first.status_code == 200 and second.status_code == 200, second.text
    assert second.json()["user_id"] == "bob"
    assert "ferret" in search(client, "ferret", "alice")[0]["content"]
    assert "parrot" in search(client, "parrot", "bob")[0]["content"]
    assert search(client, "parrot", "alice") == []
    # ... and within one user, the id still means one request.
    again = client.post("/v1/aml/add", json=add_body("r-1", "bob", "s1", "bob keeps a parrot"))
    assert again.json() == second.json()
    assert client.post("/v1/aml/add", json=add_body("r-1", "bob", "s1", "other")).status_code == 409
    assert len(search(client, "parrot", "bob")) == 1


def test_an_old_log_keeps_its_request_ids_under_their_users(tmp_path: Path) -> None:
    import sqlite3

    from mateclaw_mem.conversations.log import ConversationLog, NewMessage

    db = tmp_path / "log.db"
    log = ConversationLog(db)
    log.append_once("r-1", "h", '{"ok": 1}', "aml", "s1", [NewMessage("user", "hi")], owner="alice", now_ms=1)
    log.close()
    conn = sqlite3.connect(db)  # back to the old layout: one namespace of request ids
    conn.executescript(
        "CREATE TABLE idempotency (request_id TEXT PRIMARY KEY, body_hash TEXT NOT NULL, response TEXT NOT NULL,"
        " created_ms INTEGER NOT NULL); INSERT INTO idempotency SELECT request_id, body_hash, response, created_ms"
        " FROM requests; DROP TABLE requests;")
    conn.close()
    log = ConversationLog(db)
    try:
        replay = log.append_once("r-1", "h", "{}", "aml", "s1", [NewMessage("user", "hi")], owner="alice", now_ms=2)
        assert replay.replayed and replay.response == '{"ok": 1}'
        other = log.append_once("r-1", "x", "{}", "aml", "s1", [NewMessage("user", "yo")], owner="bob", now_ms=3)
        assert not other.replayed
    finally:
        log.close()


def test_a_query_over_the_cap_is_refused_with_a_reason(client: httpx.Client) -> None:
    from mateclaw_mem.index.tokenizer import MAX_QUERY_CHARS

    client.post("/v1/aml/add", json=add_body("r-1", "u1", "s1", "I adopted a turtle")).raise_for_status()
    r = client.post("/v1/aml/search", json={"query": "turtle " * 400, "user_id": "u1", "top_k": 5})
    assert r.status_code == 422 and str(MAX_QUERY_CHARS) in reason(r)
    r = client.post("/v1/aml/search", json={"query": "turtle", "user_id": "u1", "top_k": 5,
                                            "options": ["x" * (MAX_QUERY_CHARS + 1)]})
    assert r.status_code == 422
    # A body far beyond any query is refused before it is read.
    r = client.post("/v1/aml/search", json={"query": "turtle " * 300_000, "user_id": "u1", "top_k": 5})
    assert r.status_code == 413 and "search query is at most" in reason(r)
    # At the cap, with hundreds of distinct words, a query still finds its rare word.
    filler = " ".join(f"w{i}" for i in range(400))
    query = ("turtle " + filler)[:MAX_QUERY_CHARS]
    assert "turtle" in search(client, query)[0]["content"]


def test_workspace_search_caps_its_query_too(tmp_path: Path) -> None:
    from mateclaw_mem.index.tokenizer import MAX_QUERY_CHARS

    gen = serve_api(tmp_path / "ws2")
    ws = next(gen)
    try:
        url = "/api/v1/agents/default/workspace/memory/search"
        r = ws.get(url, params={"q": "x" * (MAX_QUERY_CHARS + 1)})
        assert r.status_code == 422 and str(MAX_QUERY_CHARS) in reason(r)
        assert ws.get(url, params={"q": "x" * MAX_QUERY_CHARS}).status_code == 200
    finally:
        gen.close()
