"""Owner keys as the seed spells them (issue 18): one function builds them, one parses them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mateclaw_mem.errors import InvalidInputError, InvalidPathError
from mateclaw_mem.workspace.owners import SYSTEM, owner_key, parse_owner_key
from mateclaw_mem.workspace.paths import check_agent
from mateclaw_mem.workspace.walk import normalise_owner
from tests.support.server import serve_api

BIG = 2**63 + 12345  # past float precision: must stay exact


@pytest.mark.parametrize(("source", "ids", "key"), [
    ("web", (42,), "user:42"),
    ("web", ("42",), "user:42"),
    ("api", (42,), "api:42"),
    ("api", ("end-user-7",), "api:end-user-7"),
    ("api", (BIG,), f"api:{BIG}"),
    ("im", ("telegram", 1234567), "telegram:1234567"),
    ("im", ("slack", "U024BE7LH"), "slack:U024BE7LH"),
    ("cron", (), SYSTEM),
    (None, (), SYSTEM),
    ("system", (), SYSTEM),
])
def test_owner_keys_are_built_per_source(source, ids, key) -> None:
    built = owner_key(source, *ids)
    assert built.key == key
    assert parse_owner_key(key) == built
    assert built.owner == (None if key == SYSTEM else key)


def test_a_web_user_and_an_api_end_user_with_the_same_id_are_two_owners() -> None:
    assert owner_key("web", 42).owner != owner_key("api", 42).owner
    assert str(BIG) in owner_key("api", BIG).key and owner_key("api", BIG).id == str(BIG)


def test_system_is_shared_and_none_inside_the_services() -> None:
    assert normalise_owner("system") is None and normalise_owner("") is None and normalise_owner(None) is None
    assert normalise_owner("user:42") == "user:42"
    assert parse_owner_key("system").owner is None


def test_legacy_bare_keys_are_kept_verbatim() -> None:
    for legacy in ("alice", "bob@example.com", "Dana Smith"):
        parsed = parse_owner_key(legacy)
        assert (parsed.key, parsed.owner, parsed.source) == (legacy, legacy, "legacy")
    # A colon after something that is no channel name is a legacy key too, not an IM sender.
    assert parse_owner_key("Team A:dana").source == "legacy"


@pytest.mark.parametrize(("text", "problem"), [
    ("", "empty"),
    ("x" * 201, "limit is 200"),
    ("user:a\x00b", "control"),
    ("user:a\nb", "control"),
    ("user:../etc", "path separator"),
    ("a\\b", "path separator"),
    ("user:", "nothing after"),
    (" alice", "whitespace"),
])
def test_bad_keys_are_refused_naming_the_problem(text, problem) -> None:
    with pytest.raises(InvalidInputError, match=problem):
        parse_owner_key(text)


@pytest.mark.parametrize(("args", "problem"), [
    (("web", 4.2e1), "float"),
    (("web", True), "bool"),
    (("web", ""), "empty"),
    (("web",), "exactly one id"),
    (("im", "Telegram", "1"), "IM channel"),
    (("im", "user", "1"), "reserved"),
    (("im", "telegram"), "channel and a sender"),
    (("cron", "1"), "takes no id"),
    (("webb", "1"), "unknown owner source"),
    (("api", "a/b"), "path separator"),
    (("api", "x" * 200), "limit is 200"),
])
def test_bad_parts_are_refused_naming_the_problem(args, problem) -> None:
    with pytest.raises(InvalidInputError, match=problem):
        owner_key(*args)


def test_no_agent_can_take_the_global_folders_name(tmp_path: Path) -> None:
    for name in ("global", "Global", "GLOBAL"):
        with pytest.raises(InvalidPathError, match="reserved"):
            check_agent(name)
    assert check_agent("globals") == "globals"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path_factory.mktemp("owners") / "ws", mcp=False)


def test_http_owners_come_from_the_request_as_keys(client: httpx.Client) -> None:
    mem = "/api/v1/memory/default"
    cases = [({"owner": "user:42"}, "user:42"), ({"endUserId": "42"}, "api:42"), ({"endUserId": BIG}, f"api:{BIG}"),
             ({"owner": "telegram:7"}, "telegram:7"), ({"owner": "system"}, None), ({"owner": "alice"}, "alice")]
    for extra, owner in cases:
        r = client.post(f"{mem}/context", json={"query": "hi", **extra})
        assert r.status_code == 200, r.text
        assert r.json()["owner"] == owner
    r = client.post(f"{mem}/context", json={"query": "hi", "owner": "user:../x"})
    assert r.status_code == 422 and "path separator" in r.text
    r = client.post(f"{mem}/context", json={"query": "hi", "endUserId": 4.2})
    assert r.status_code == 422
    r = client.get("/api/v1/agents/default/workspace/memory/file", params={"path": "MEMORY.md", "owner": "user:"})
    assert r.status_code == 422 and "nothing after" in r.text
