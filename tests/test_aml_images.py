"""AML images kept (`aml.images: keep`) over a real daemon: data: images stored and returned as content
parts in the message's order, an identical query image finding its message, captions indexed, an
image over `aml.image-max-bytes` refused with a 413 naming it, nothing kept by default, and a user's
delete leaving no byte of their images (another user's image as the positive control)."""

from __future__ import annotations

import base64
import hashlib
import sqlite3
from collections.abc import Iterator
from itertools import count
from pathlib import Path

import httpx
import pytest

from tests.support.server import serve_api

TS = 1683554160000  # 2023-05-08 13:56 UTC
MAX = 64 * 1024
SIGNED = "https://bucket.example.com/cat.png?X-Amz-Signature=abc123secret&size=large"
_ids = count()


def image(seed: str, size: int = 20_000) -> bytes:
    """A PNG-headed run of bytes no other image of these tests shares (no compression finds a pattern)."""
    out = b"\x89PNG\r\n\x1a\n"
    block = seed.encode()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return out[:size]


def data_url(data: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64,{base64.b64encode(data).decode()}"


def part(url: str, **extra: object) -> dict:
    return {"type": "image_url", "image_url": {"url": url}, **extra}


def text(t: str) -> dict:
    return {"type": "text", "text": t}


@pytest.fixture(scope="module")
def keep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path_factory.mktemp("aml-images") / "ws", seed=False, mcp=False,
                         aml={"images": "keep", "image_max_bytes": MAX})


def user() -> str:
    return f"u{next(_ids)}"


def add(client: httpx.Client, uid: str, content: object, request_id: str = "r1", session: str = "s1"
        ) -> httpx.Response:
    return client.post("/v1/aml/add", json={"request_id": request_id, "user_id": uid, "session_id": session,
                                            "messages": [{"role": "user", "timestamp": TS, "content": content}]})


def search(client: httpx.Client, uid: str, query: object, top_k: int = 5) -> list[dict]:
    r = client.post("/v1/aml/search", json={"query": query, "user_id": uid, "top_k": top_k})
    assert r.status_code == 200, r.text
    return r.json()["data"]


def decoded(p: dict) -> bytes:
    head, _, payload = p["image_url"]["url"].partition(",")
    assert head == "data:image/png;base64", head
    return base64.b64decode(payload)


def blob_rows(client: httpx.Client) -> int:
    with sqlite3.connect(client.services.settings.log_db) as conn:  # type: ignore[attr-defined]
        return conn.execute("SELECT COUNT(*) FROM attachment_blobs").fetchone()[0]


def test_images_are_kept_and_returned_in_the_message_order(keep: httpx.Client) -> None:
    uid = user()
    first, second = image("kitten-1"), image("kitten-2")
    content = [text("Caroline: look at my new kitten"), part(data_url(first)),
               text("she is called Pixel\nand she sleeps all day"), part(SIGNED, image_url={"url": SIGNED,
                                                                                          "detail": "low"}),
               part(data_url(second))]
    r = add(keep, uid, content)
    assert r.status_code == 200, r.text
    (hit,) = search(keep, uid, "what is the kitten called?", top_k=1)
    assert hit["content"] == ("[2023-05-08 Mon] Caroline: look at my new kitten\nshe is called Pixel\n"
                              "and she sleeps all day")
    kinds = [p["type"] for p in hit["parts"]]
    assert kinds == ["text", "image_url", "text", "image_url", "image_url"], hit["parts"]
    assert hit["parts"][0]["text"] == "[2023-05-08 Mon] Caroline: look at my new kitten"
    assert decoded(hit["parts"][1]) == first
    assert hit["parts"][2]["text"] == "she is called Pixel\nand she sleeps all day"
    # The link as every reference keeps it (credential redacted), the second image byte for byte.
    assert hit["parts"][3]["image_url"] == {
        "url": "https://bucket.example.com/cat.png?X-Amz-Signature=[REDACTED]&size=large", "detail": "low"}
    assert decoded(hit["parts"][4]) == second
    # The references are still there, by hash.
    assert [i.get("sha256") for i in hit["images"]] == [hashlib.sha256(first).hexdigest(), None,
                                                        hashlib.sha256(second).hexdigest()]


def test_a_message_of_images_only_comes_back_as_its_images(keep: httpx.Client) -> None:
    uid = user()
    pic = image("sunset")
    assert add(keep, uid, [part(data_url(pic))]).status_code == 200
    (hit,) = search(keep, uid, "image")
    assert hit["content"] == "[2023-05-08 Mon] user: [image]"
    assert hit["parts"][0] == {"type": "text", "text": "[2023-05-08 Mon] user:"}
    assert decoded(hit["parts"][1]) == pic and len(hit["parts"]) == 2


def test_a_caption_is_indexed_where_the_image_stood(keep: httpx.Client) -> None:
    uid = user()
    pic = image("kite")
    content = [text("Jon: from the beach"), part(data_url(pic), caption="a red kite over the dunes")]
    assert add(keep, uid, content).status_code == 200
    assert add(keep, uid, "Jon: the weather was grey", request_id="r2").status_code == 200
    (hit,) = search(keep, uid, "kite dunes", top_k=1)
    assert hit["content"].endswith("Jon: from the beach\n[image: a red kite over the dunes]")
    assert [p["type"] for p in hit["parts"]] == ["text", "image_url", "text"]
    assert hit["parts"][2] == {"type": "text", "text": "[image: a red kite over the dunes]"}


def test_an_identical_image_in_a_query_finds_its_message(keep: httpx.Client) -> None:
    uid, other = user(), user()
    pic, unrelated = image("receipt"), image("mountain")
    assert add(keep, uid, [text("Gina: here is the receipt"), part(data_url(pic))]).status_code == 200
    for n in range(6):  # text that ranks far better for the query's words than the image's message
        assert add(keep, uid, f"Gina: the bakery order number {n} was ready", request_id=f"t{n}").status_code == 200
    assert add(keep, other, [text("Tom: my receipt"), part(data_url(pic))]).status_code == 200

    alone = search(keep, uid, [part(data_url(pic))])
    assert [h["content"] for h in alone] == ["[2023-05-08 Mon] Gina: here is the receipt"]
    mixed = search(keep, uid, [text("bakery order"), part(data_url(pic))], top_k=3)
    assert mixed[0]["content"].endswith("here is the receipt") and len(mixed) == 3
    assert mixed[0]["score"] > mixed[1]["score"]
    # The text ranking alone does not put it first: the image is what found it.
    assert not search(keep, uid, "bakery order", top_k=3)[0]["content"].endswith("receipt")
    assert search(keep, uid, [part(data_url(unrelated))]) == []
    # Another user's copy of the same image stays theirs.
    assert [h["content"] for h in search(keep, other, [part(data_url(pic))])] == ["[2023-05-08 Mon] Tom: my receipt"]


def test_a_query_image_larger_than_a_plain_search_body_is_read(keep: httpx.Client) -> None:
    uid = user()
    big = image("panorama", MAX)  # ~87 KB of base64: over the 64 KiB a text query may send
    assert add(keep, uid, [text("Ana: the panorama"), part(data_url(big))]).status_code == 200
    (hit,) = search(keep, uid, [part(data_url(big))])
    assert decoded(hit["parts"][1]) == big


def test_an_image_over_the_limit_is_refused_naming_it(keep: httpx.Client) -> None:
    uid = user()
    before = blob_rows(keep)
    r = add(keep, uid, [text("Ana: the big one"), part(data_url(image("huge", MAX + 1)))])
    assert r.status_code == 413, r.text
    reason = r.json()["detail"]["reason"]
    assert "aml.image-max-bytes" in reason and str(MAX) in reason and str(MAX + 1) in reason
    assert blob_rows(keep) == before and search(keep, uid, "big one") == []


def test_nothing_is_kept_by_default(tmp_path: Path) -> None:
    pic = image("private")
    for client in serve_api(tmp_path / "ws", seed=False, mcp=False):
        uid = user()
        assert add(client, uid, [text("Mel: my passport photo"), part(data_url(pic))]).status_code == 200
        (hit,) = search(client, uid, "passport photo")
        assert "parts" not in hit and hit["images"] == [
            {"sha256": hashlib.sha256(pic).hexdigest(), "media_type": "image/png", "bytes": len(pic)}]
        assert blob_rows(client) == 0
        r = client.post("/v1/aml/search", json={"query": [part(data_url(pic))], "user_id": uid, "top_k": 3})
        assert r.status_code == 400 and "aml.images: keep" in r.json()["detail"]["reason"]
        raw = b"".join(f.read_bytes() for f in (tmp_path / "ws").rglob("*") if f.is_file())
        assert b"my passport photo" in raw  # the log is in these files
        assert pic[1000:1032] not in raw and base64.b64encode(pic[999:1047]) not in raw


def _pieces(data: bytes) -> list[bytes]:
    return [data[i:i + 32] for i in range(100, len(data) - 32, 1500)]


def _found(root: Path, data: bytes) -> int:
    raw = b"".join(f.read_bytes() for f in root.rglob("*") if f.is_file())
    return sum(p in raw for p in _pieces(data))


def test_deleting_the_user_leaves_no_byte_of_their_images(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    mine, theirs = image("victim-photo"), image("other-photo")
    for client in serve_api(ws, seed=False, mcp=False, aml={"images": "keep", "image_max_bytes": MAX}):
        victim = "bench:r1/victim"
        assert add(client, victim, [text("Vic: my photo"), part(data_url(mine))]).status_code == 200
        assert add(client, victim, [part(data_url(mine), caption="again")], request_id="r2").status_code == 200
        assert add(client, "other", [text("Oz: my photo"), part(data_url(theirs))]).status_code == 200
        n = len(_pieces(mine))
        assert _found(ws, mine) == n and _found(ws, theirs) == n  # the scan sees every piece before

        r = client.delete(f"/v1/aml/users/{victim}")
        assert r.status_code == 200, r.text
        assert r.json()["deleted"]["log.db:attachment_blobs"] == 2
        assert _found(ws, mine) == 0, "a piece of the deleted user's image is still on disk"
        assert _found(ws, theirs) == n  # positive control: the other user's image is all there
        assert search(client, victim, [part(data_url(mine))]) == []
        (hit,) = search(client, "other", [part(data_url(theirs))])
        assert decoded(hit["parts"][1]) == theirs


def test_an_answer_carries_images_up_to_its_budget(keep: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from mateclaw_mem.conversations import aml_images

    monkeypatch.setattr(aml_images, "RETURN_BYTES", 45_000)  # room for two of the three 20,000-byte images
    uid = user()
    pics = [image(f"album-{n}") for n in range(3)]
    assert add(keep, uid, [text("Ana: the album"), *(part(data_url(p)) for p in pics)]).status_code == 200
    (hit,) = search(keep, uid, "album")
    assert [decoded(p) for p in hit["parts"][1:]] == pics[:2]
    assert len(hit["images"]) == 3  # the third still listed, by hash
    assert hit["images"][2]["sha256"] == hashlib.sha256(pics[2]).hexdigest()


def test_a_retried_add_replays_and_a_changed_image_conflicts(keep: httpx.Client) -> None:
    uid = user()
    content = [text("Lia: the garden gate"), part(data_url(image("gate")))]
    assert add(keep, uid, content).status_code == 200
    rows = blob_rows(keep)
    again = add(keep, uid, content)
    assert again.status_code == 200 and blob_rows(keep) == rows  # replayed: nothing stored twice
    changed = add(keep, uid, [content[0], part(data_url(image("another gate")))])
    assert changed.status_code == 409, changed.text
    assert blob_rows(keep) == rows and len(search(keep, uid, "garden gate")) == 1


def test_retention_expires_a_users_images_too(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from mateclaw_mem.clock import ManualClock
    from mateclaw_mem.conversations.aml import AmlMessage
    from mateclaw_mem.runtime.services import Services
    from mateclaw_mem.settings import load_settings

    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    ws = tmp_path / "ws"
    settings = load_settings(workspace=ws, overrides={"aml": {"retention-days": 30, "images": "keep",
                                                              "image-max-bytes": MAX}})
    services = Services(settings, clock=clock)
    old, recent = image("old-photo"), image("recent-photo")
    try:
        services.aml.add("a1", "old", "s", [AmlMessage("user", [text("Old: a photo"), part(data_url(old))])])
        clock.advance(days=20)
        services.aml.add("b1", "recent", "s", [AmlMessage("user", [text("New: a photo"), part(data_url(recent))])])
        clock.advance(days=15)
        assert _found(ws, old) == len(_pieces(old))
        assert services.aml_users.expire_due() == ["old"]
        assert _found(ws, old) == 0 and _found(ws, recent) == len(_pieces(recent))
        (hit,) = services.aml.search([part(data_url(recent))], "recent", 5)
        assert hit.content.endswith("New: a photo") and hit.parts
    finally:
        services.close()
