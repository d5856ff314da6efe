"""AML Add/Search with content parts (OpenAI chat format) and ISO-8601 timestamps, over a real uvicorn
server: text parts are stored and searched, image parts kept as references and returned with their
message, data: URLs reduced to a hash; naive ISO times are read in the workspace timezone."""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import count
from pathlib import Path

import httpx
import pytest

from mateclaw_mem.conversations.log import ConversationLog
from tests.support.server import ApiServer, daemon_services

TS = 1683554160000  # 2023-05-08 13:56 UTC
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
SIGNED = "https://bucket.example.com/cat.png?X-Amz-Signature=abc123secret&size=large"
_ids = count()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    from mateclaw_mem.api.app import create_app

    # Tokyo: a fixed +09:00 all year, so a naive time's reading is unambiguous.
    services = daemon_services(tmp_path_factory.mktemp("aml-parts") / "ws", timezone="Asia/Tokyo")
    services.build()
    try:
        with ApiServer(create_app(services, mcp=False)) as server, \
                httpx.Client(base_url=server.url, timeout=30) as c:
            c.services = services  # type: ignore[attr-defined]
            yield c
    finally:
        services.close()


def user() -> str:
    return f"u{next(_ids)}"  # each test its own AML user: the module shares one server


def add(client: httpx.Client, uid: str, messages: list[dict], request_id: str = "r1") -> httpx.Response:
    return client.post("/v1/aml/add", json={"request_id": request_id, "user_id": uid, "session_id": "s1",
                                            "messages": messages})


def search(client: httpx.Client, uid: str, query: object, top_k: int = 5) -> list[dict]:
    r = client.post("/v1/aml/search", json={"query": query, "user_id": uid, "top_k": top_k})
    assert r.status_code == 200, r.text
    return r.json()["data"]


def test_text_parts_are_indexed_and_images_come_back_as_references(client: httpx.Client) -> None:
    uid = user()
    content = [
        {"type": "text", "text": "Caroline: look at my new kitten"},
        {"type": "image_url", "image_url": {"url": SIGNED, "detail": "low"}},
        {"type": "text", "text": "she is called Pixel"},
        {"type": "image_url", "image_url": {"url": DATA_URL}},
    ]
    r = add(client, uid, [{"role": "user", "timestamp": TS, "content": content},
                          {"role": "user", "timestamp": TS, "content": "Melanie: what a lovely garden"}])
    assert r.status_code == 200 and r.json()["success"] is True, r.text
    (hit,) = search(client, uid, "what is the kitten called?", top_k=1)
    assert hit["content"] == "[2023-05-08 Mon] Caroline: look at my new kitten\nshe is called Pixel"
    link, data = hit["images"]
    # The link is kept (its credential redacted); the data: URL only as what identifies the image.
    assert link == {"url": "https://bucket.example.com/cat.png?X-Amz-Signature=[REDACTED]&size=large",
                    "detail": "low"}
    assert data == {"sha256": hashlib.sha256(PNG).hexdigest(), "media_type": "image/png", "bytes": len(PNG)}
    # A text-only message keeps the contract's plain shape.
    (plain,) = search(client, uid, "garden", top_k=1)
    assert set(plain) == {"id", "content", "score", "created_at"}
    # Neither the image bytes nor the signature are anywhere in the state folder (WAL files included).
    state = Path(client.services.settings.log_db).parent  # type: ignore[attr-defined]
    raw = b"".join(f.read_bytes() for f in state.rglob("*") if f.is_file())
    assert b"cat.png?X-Amz-Signature=[REDACTED]" in raw  # the log really is in these files
    assert b"abc123secret" not in raw and base64.b64encode(PNG)[:64] not in raw


def test_a_message_of_images_only_is_kept_with_a_placeholder(client: httpx.Client) -> None:
    uid = user()
    image = {"type": "image_url", "image_url": "https://example.org/sunset.jpg"}  # a bare URL string
    assert add(client, uid, [{"role": "user", "timestamp": TS, "content": [image, image]}]).status_code == 200
    (hit,) = search(client, uid, "image")
    assert hit["content"] == "[2023-05-08 Mon] user: [image] [image]"
    assert hit["images"] == [{"url": "https://example.org/sunset.jpg"}] * 2


def test_a_query_of_content_parts_searches_by_its_text(client: httpx.Client) -> None:
    uid = user()
    assert add(client, uid, [{"role": "user", "timestamp": TS, "content": "Jon: my bakery opens in June"}]).status_code == 200
    query = [{"type": "text", "text": "when does the bakery"}, {"type": "image_url", "image_url": {"url": SIGNED}},
             {"type": "text", "text": "open?"}]
    (hit,) = search(client, uid, query, top_k=1)
    assert "bakery opens in June" in hit["content"]
    r = client.post("/v1/aml/search", json={"query": [query[1]], "user_id": uid, "top_k": 3})
    assert r.status_code == 400 and "images only" in r.json()["detail"]["reason"]


@pytest.mark.parametrize(
    ("content", "status", "words"),
    [
        ([{"type": "input_audio", "input_audio": {"data": "x"}}], 422, "input_audio"),
        ([], 422, "content"),
        ([{"type": "text"}], 422, "text"),
        ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}], 400, "base64"),
        ([{"type": "image_url", "image_url": {"url": "https://x.org/" + "a" * 5000}}], 400, "4096"),
        ([{"type": "text", "text": "  "}], 400, "messages[0].content"),
        ([{"type": "image_url", "image_url": {"url": "https://x.org/a.png"}}] * 17, 400, "more than 16 images"),
    ],
)
def test_bad_parts_are_refused_with_a_reason(client: httpx.Client, content: list, status: int, words: str) -> None:
    uid = user()
    r = add(client, uid, [{"role": "user", "timestamp": TS, "content": content}])
    assert r.status_code == status, r.text
    assert words in json.dumps(r.json()["detail"])
    assert search(client, uid, "anything") == []  # nothing was stored


def test_a_retry_replays_and_a_changed_image_is_a_conflict(client: httpx.Client) -> None:
    uid = user()
    parts = [{"type": "text", "text": "the red kite"}, {"type": "image_url", "image_url": {"url": DATA_URL}}]
    first = add(client, uid, [{"role": "user", "timestamp": TS, "content": parts}])
    assert first.status_code == 200
    assert add(client, uid, [{"role": "user", "timestamp": TS, "content": parts}]).json() == first.json()
    other = [parts[0], {"type": "image_url", "image_url": {"url": "https://example.org/kite.png"}}]
    assert add(client, uid, [{"role": "user", "timestamp": TS, "content": other}]).status_code == 409
    assert len(search(client, uid, "kite")) == 1  # the replay stored nothing twice


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        ("2023-05-08T13:56:00Z", TS),
        ("2023-05-08T15:56:00+02:00", TS),
        ("2023-05-08T22:56:00", TS),  # naive: the workspace timezone (Asia/Tokyo, +09:00)
        ("2023-05-08 22:56:00.000", TS),
        (TS, TS),
    ],
)
def test_timestamps_are_epoch_ms_or_iso_8601(client: httpx.Client, timestamp: object, expected: int) -> None:
    uid = user()
    assert add(client, uid, [{"role": "user", "timestamp": timestamp, "content": "the tide came in"}]).status_code == 200
    (hit,) = search(client, uid, "tide")
    assert hit["created_at"] == datetime.fromtimestamp(expected / 1000, tz=UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def test_the_same_time_spelled_as_iso_or_ms_is_the_same_request(client: httpx.Client) -> None:
    uid = user()
    assert add(client, uid, [{"role": "user", "timestamp": TS, "content": "a quiet harbour"}]).status_code == 200
    again = add(client, uid, [{"role": "user", "timestamp": "2023-05-08T13:56:00Z", "content": "a quiet harbour"}])
    assert again.status_code == 200  # a replay, not a 409
    assert len(search(client, uid, "harbour")) == 1


@pytest.mark.parametrize(("timestamp", "status"), [("yesterday", 422), ("0001-01-01T00:00:00Z", 400),
                                                   (1.5, 422), (-1, 422)])
def test_bad_timestamps_name_the_field(client: httpx.Client, timestamp: object, status: int) -> None:
    r = add(client, user(), [{"role": "user", "timestamp": timestamp, "content": "x"}])
    assert r.status_code == status, r.text
    assert "timestamp" in json.dumps(r.json()["detail"])


def test_openapi_documents_the_timestamp_unit_and_content_parts(client: httpx.Client) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    message = schemas["MessageIn"]["properties"]
    assert "unix epoch milliseconds" in message["timestamp"]["description"]
    assert "ISO-8601" in message["timestamp"]["description"] and "workspace timezone" in message["timestamp"]["description"]
    assert "content parts" in message["content"]["description"]
    assert "images" in schemas["SearchItem"]["properties"]


def test_a_log_from_before_attachments_gains_the_column_and_keeps_its_rows(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    with sqlite3.connect(db) as old:
        old.executescript(
            "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, agent TEXT NOT NULL,"
            " owner TEXT NOT NULL DEFAULT '', conversation_id TEXT NOT NULL, role TEXT NOT NULL,"
            " content TEXT NOT NULL, ts_ms INTEGER NOT NULL, trigger_source TEXT NOT NULL DEFAULT 'chat',"
            " finish_reason TEXT, memoryless INTEGER NOT NULL DEFAULT 0, request_id TEXT,"
            " created_ms INTEGER NOT NULL);"
            "INSERT INTO messages (agent, conversation_id, role, content, ts_ms, created_ms)"
            " VALUES ('aml', 's1', 'user', 'an old line', 1, 1);"
        )
    log = ConversationLog(db)
    try:
        (row,) = log.since(0)
        assert row.content == "an old line" and row.attachments == ()
        assert log.has_attachments("aml") is False and log.attachments([row.id]) == {}
    finally:
        log.close()
