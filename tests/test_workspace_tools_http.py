"""The seed's workspace tools over HTTP (real uvicorn): the seed's field names in every answer
(`agentId`, `count`, `filename`, `fileSize`, `enabled`, `replacements`) beside ours, and
`write_memory` with its four strategies through the one writer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server import serve_api

WS = "/api/v1/agents/default/workspace/memory"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path_factory.mktemp("ws-tools") / "ws", mcp=False)


def on_disk(client: httpx.Client, rel: str) -> Path:
    return client.services.store.path("default", rel)  # type: ignore[attr-defined]


def test_list_read_write_edit_answer_with_the_seeds_names(client: httpx.Client) -> None:
    listing = client.get(WS).json()
    assert listing["agentId"] == "default" == listing["agent"] and listing["count"] == len(listing["files"])
    memory = next(f for f in listing["files"] if f["filename"] == "MEMORY.md")
    assert memory["fileSize"] == on_disk(client, "MEMORY.md").stat().st_size == memory["size"]
    assert memory["path"] == "MEMORY.md" and memory["enabled"] is True  # the old names stay for old clients

    wrote = client.put(f"{WS}/file", json={"path": "notes/shape.md", "content": "# Shape\nround\n"}).json()
    assert wrote["agentId"] == "default" and wrote["filename"] == wrote["path"] == "notes/shape.md"
    read = client.get(f"{WS}/file", params={"path": "notes/shape.md"}).json()
    assert read["enabled"] is False and read["sha"] == wrote["sha"]  # a machine's new file starts off
    assert read["fileSize"] == on_disk(client, "notes/shape.md").stat().st_size and read["filename"] == "notes/shape.md"
    assert client.get(f"{WS}/file", params={"path": "MEMORY.md"}).json()["enabled"] is True
    edited = client.post(f"{WS}/file/edit", json={"path": "notes/shape.md", "old": "round", "new": "square"}).json()
    assert edited["replacements"] == 1 and edited["filename"] == "notes/shape.md" and edited["agentId"] == "default"


def test_write_memory_merges_with_each_strategy(client: httpx.Client) -> None:
    rel = "notes/merged.md"

    def merge(**body: object) -> dict:
        r = client.post(f"{WS}/write-memory", json={"path": rel, **body})
        assert r.status_code == 200, r.text
        return r.json()

    first = merge(strategy="upsert_kv", section="Facts", key="city", content="Lisbon")
    assert first["strategy"] == "upsert_kv" and first["filename"] == rel and first["changed"] is True
    merge(strategy="append", section="Plans", content="learn Portuguese")
    merge(strategy="upsert_kv", section="Facts", content="city: Porto\npet: cat")
    merge(strategy="append", section="Plans", content="visit Sintra")
    merge(strategy="replace_section", content="## Notes\nsee the tiles\n")
    text = on_disk(client, rel).read_text(encoding="utf-8")
    assert text == (
        "---\nenabled: false\n---\n"
        "## Facts\n- city: Porto\n- pet: cat\n\n"
        "## Plans\nlearn Portuguese\n\nvisit Sintra\n\n"
        "## Notes\nsee the tiles\n"
    )
    merge(strategy="overwrite", content="a clean slate", by_person=True)
    assert on_disk(client, rel).read_text(encoding="utf-8") == "---\nenabled: false\n---\na clean slate\n"
    actors = [v["actor"] for v in client.get(f"{WS}/history", params={"path": rel}).json()["versions"]]
    assert sorted(set(actors)) == ["api", "person"]  # the machine's merges, then the person's overwrite


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"strategy": "shuffle", "content": "x"}, 422, "strategy"),
        ({"strategy": "append", "key": "k", "content": "x"}, 400, "upsert_kv only"),
        ({"strategy": "overwrite", "section": "A", "content": "x"}, 400, "section does not apply"),
        ({"strategy": "upsert_kv", "content": "no pairs"}, 400, "key: value"),
        ({"strategy": "upsert_kv", "key": "a:b", "content": "x"}, 400, "without ':'"),
        ({"strategy": "replace_section", "content": "no title"}, 400, "section title"),
    ],
)
def test_write_memory_refusals_name_the_problem(client: httpx.Client, body: dict, status: int, words: str) -> None:
    r = client.post(f"{WS}/write-memory", json={"path": "notes/refused.md", **body})
    assert r.status_code == status, r.text
    assert words in r.text
    assert not on_disk(client, "notes/refused.md").exists()


def test_openapi_lists_the_write_memory_route(client: httpx.Client) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "post" in paths["/api/v1/agents/{agentId}/workspace/memory/write-memory"]
