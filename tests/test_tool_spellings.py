"""The workspace tools take the seed's argument names beside ours, on MCP (the SDK's client over the
daemon's real HTTP endpoint) and on HTTP, and refuse a name they do not know instead of ignoring it
(issue 38.1: `filename` was "Field required", and `filenamePrefix` listed every file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from tests.support.server import serve_api

WS = "/api/v1/agents/default/workspace/memory"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path_factory.mktemp("spellings") / "ws")


def mcp_calls(client: httpx.Client, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async def session() -> list[Any]:
        async with Client(str(client.base_url) + "/mcp") as mcp:
            return [await mcp.call_tool(name, args) for name, args in calls]

    return anyio.run(session)


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def answer(result: Any) -> dict[str, Any]:
    assert not result.is_error, text(result)
    return result.structured_content


def on_disk(client: httpx.Client, rel: str) -> str:
    return client.services.store.path("default", rel).read_text(encoding="utf-8")  # type: ignore[attr-defined]


def test_mcp_workspace_tools_take_the_seeds_names(client: httpx.Client) -> None:
    wrote, read, edited, listed, ours = mcp_calls(client, [
        ("write_workspace_memory_file", {"filename": "seedcase/plan.md", "content": "tea at noon, tea at five\n"}),
        ("read_workspace_memory_file", {"filename": "seedcase/plan.md"}),
        ("edit_workspace_memory_file", {"filename": "seedcase/plan.md", "oldText": "tea", "newText": "coffee",
                                        "replaceAll": True}),
        ("list_workspace_memory_files", {"filenamePrefix": "seedcase/"}),
        ("edit_workspace_memory_file", {"path": "seedcase/plan.md", "old_text": "noon", "new_text": "one"}),
    ])
    assert answer(wrote)["filename"] == "seedcase/plan.md"
    assert "tea at noon" in answer(read)["content"]
    assert answer(edited)["replacements"] == 2
    # The filter applied: only the one file under the prefix, not MEMORY.md and the rest.
    assert [f["filename"] for f in answer(listed)["files"]] == ["seedcase/plan.md"]
    assert answer(ours)["replacements"] == 1  # our own names still work
    assert on_disk(client, "seedcase/plan.md").endswith("coffee at one, coffee at five\n")


def test_mcp_refuses_unknown_and_doubled_arguments(client: httpx.Client) -> None:
    unknown, doubled, missing, elsewhere = mcp_calls(client, [
        ("list_workspace_memory_files", {"filenamePrefx": "memory/"}),
        ("read_workspace_memory_file", {"filename": "MEMORY.md", "path": "SOUL.md"}),
        ("edit_workspace_memory_file", {"oldText": "a", "newText": "b"}),
        ("search_memory", {"query": "tea", "top_k": 3}),  # every tool, not only the workspace four
    ])
    assert unknown.is_error and "unknown argument 'filenamePrefx'" in text(unknown)
    assert "filenamePrefix or prefix" in text(unknown)  # and what the tool takes
    assert doubled.is_error and "'filename' and 'path' are the same argument" in text(doubled)
    assert missing.is_error and "missing argument 'filename' (or 'path')" in text(missing)
    assert elsewhere.is_error and "unknown argument 'top_k'" in text(elsewhere)


def test_mcp_schemas_show_the_seeds_names_and_forbid_others(client: httpx.Client) -> None:
    async def session() -> dict[str, Any]:
        async with Client(str(client.base_url) + "/mcp") as mcp:
            return {t.name: t.input_schema for t in (await mcp.list_tools()).tools}

    schemas = anyio.run(session)
    assert all(s.get("additionalProperties") is False for s in schemas.values())
    edit = schemas["edit_workspace_memory_file"]
    assert set(edit["required"]) == {"filename", "oldText", "newText"} and "replaceAll" in edit["properties"]
    assert "filenamePrefix" in schemas["list_workspace_memory_files"]["properties"]
    assert "`path`" in edit["properties"]["filename"]["description"]  # the other spelling is named


def test_http_workspace_routes_take_the_seeds_names(client: httpx.Client) -> None:
    r = client.put(f"{WS}/file", json={"filename": "httpcase/a.md", "content": "red and red\n"})
    assert r.status_code == 200, r.text
    r = client.post(f"{WS}/file/edit", json={"filename": "httpcase/a.md", "oldText": "red", "newText": "blue",
                                             "replaceAll": True})
    assert r.status_code == 200 and r.json()["replacements"] == 2, r.text
    assert client.get(f"{WS}/file", params={"filename": "httpcase/a.md"}).json()["content"].endswith("blue and blue\n")
    listed = client.get(WS, params={"filenamePrefix": "httpcase/"}).json()
    assert [f["filename"] for f in listed["files"]] == ["httpcase/a.md"]
    versions = client.get(f"{WS}/history", params={"filename": "httpcase/a.md"}).json()["versions"]
    assert len(versions) >= 1


@pytest.mark.parametrize(
    ("method", "route", "kwargs", "words"),
    [
        ("GET", "", {"params": {"filenamePrefx": "memory/"}}, "query.filenamePrefx: unknown query parameter"),
        ("GET", "", {"params": {"prefix": "a/", "filenamePrefix": "b/"}}, "are the same argument"),
        ("GET", "/file", {"params": {"filename": "MEMORY.md", "path": "SOUL.md"}}, "are the same argument"),
        ("GET", "/file", {"params": {}}, "`path` or `filename`"),
        ("GET", "/search", {"params": {"q": "tea", "top_k": "3"}}, "unknown query parameter"),
        ("POST", "/file/edit", {"json": {"filename": "MEMORY.md", "oldText": "a", "newText": "b", "all": True}},
         "unknown argument 'all'"),
        ("PUT", "/file", {"json": {"filename": "MEMORY.md", "path": "MEMORY.md", "content": "x"}},
         "are the same argument"),
    ],
)
def test_http_refuses_unknown_and_doubled_arguments(
    client: httpx.Client, method: str, route: str, kwargs: dict[str, Any], words: str
) -> None:
    before = on_disk(client, "MEMORY.md")
    r = client.request(method, WS + route, **kwargs)
    assert r.status_code == 422, r.text
    assert words in r.json()["detail"]["reason"], r.text
    assert on_disk(client, "MEMORY.md") == before


def test_mcp_reads_an_oversized_file_a_part_at_a_time(tmp_path: Path) -> None:
    # A model's context is no place for a 50 MB file: over mate.memory.memory-file-max-bytes the read
    # tool answers one part with a warning saying how to go on, and the parts put together are the file.
    served = serve_api(tmp_path / "ws", mate={"memory": {"memory_file_max_bytes": 4096}})
    client = next(served)
    try:
        body = "# Memory\n\n" + "".join(f"## Note {i}\n\n- the note number {i} to keep\n\n" for i in range(400))
        path = client.services.store.write("default", "MEMORY.md", body, expected_sha=None,  # type: ignore[attr-defined]
                                           actor="person")
        assert path.changed
        first = answer(mcp_calls(client, [("read_workspace_memory_file", {"path": "MEMORY.md"})])[0])
        assert first["part"] == 1 and first["parts"] > 1 and first["first_line"] == 1
        assert "over mate.memory.memory-file-max-bytes (4 KiB)" in first["warning"]
        assert "read part=2 for the next" in first["warning"]
        assert len(first["content"]) <= 4096 and first["size"] == len(body.encode())
        parts = mcp_calls(client, [("read_workspace_memory_file", {"path": "MEMORY.md", "part": n})
                                   for n in range(1, first["parts"] + 1)])
        whole = "".join(answer(r)["content"] for r in parts)
        assert whole == client.services.store.read("default", "MEMORY.md").text  # type: ignore[attr-defined]
        small = answer(mcp_calls(client, [("read_workspace_memory_file", {"path": "SOUL.md"})])[0])
        assert "part" not in small and "warning" not in small  # a file within the limit comes whole
    finally:
        served.close()
