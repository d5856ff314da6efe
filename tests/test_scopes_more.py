"""Scopes (issue 18), the remaining subsystems: two owners of one agent (`user:42`, `api:42`) and one
GLOBAL fact, as in tests/test_scopes.py. Each test shows that nothing of A reaches B and, where the
subsystem reads memory, that GLOBAL reaches both; each also asks with the wrong owner, so it fails
if the owner were ignored."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.log import NewMessage
from mateclaw_mem.errors import NotFoundError
from mateclaw_mem.mcp.server import build_server
from mateclaw_mem.runtime import status
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from mateclaw_mem.workspace.owners import owner_key
from mateclaw_mem.workspace.walk import GLOBAL
from tests.conftest import TZ
from tests.support.server import ApiServer

AGENT = "default"
A = owner_key("web", 42).key  # user:42
B = owner_key("api", 42).key  # api:42
NIGHT = datetime(2026, 12, 1, 3, 0, tzinfo=TZ)
SECRETS = {A: "ALPHA", B: "BRAVO"}


def _write(svc: Services, rel: str, text: str, *, agent: str = AGENT, owner: str | None = None) -> None:
    snap = svc.store.read(agent, rel, owner=owner)
    svc.store.write(agent, rel, text, expected_sha=snap.sha, actor="person", owner=owner)


def _services(tmp: Path) -> Services:
    """Isolation on; TEAM memory, each owner's MEMORY.md and a structured entry, one GLOBAL fact."""
    cfg = tmp / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\nmate:\n  memory:\n    lifecycle-mediator-enabled: true\n",
                   encoding="utf-8")
    services = Services(load_settings(cfg, tmp / "workspace"), ManualClock(NIGHT))
    services.store.ensure_agent(AGENT)
    _ = services.file_index  # writes are ingested, as in the daemon
    _write(services, "MEMORY.md", "# Memory\n\n## Team\n\n- the team kayak club meets on Fridays\n")
    for owner, secret in SECRETS.items():
        services.store.ensure_agent(AGENT, owner=owner)
        _write(services, "MEMORY.md", f"# Memory\n\n## Me\n\n- {secret} paddles a red kayak on weekends\n",
               owner=owner)
        services.structured.remember(AGENT, "user", "boat", f"{secret}-BOAT kayak", actor="api", owner=owner)
    _write(services, "MEMORY.md", "# Memory\n\n## Everyone\n\n- GLOBALFACT the kayak shed code is 4711\n",
           agent=GLOBAL)
    return services


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """Shared by the tests that only read."""
    services = _services(tmp_path_factory.mktemp("scopes-more"))
    yield services
    services.close()


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Services]:
    """For the tests that write (extraction, dreaming, consolidation, recall tracking)."""
    services = _services(tmp_path)
    yield services
    services.close()


def _owner_text(svc: Services, owner: str | None, agent: str = AGENT) -> str:
    """Every file in the owner's folder (None: the TEAM files, owners' folders left out)."""
    return "\n".join(f.path.read_text(encoding="utf-8") for f in svc.store.walk_files(agent)
                     if f.owner == owner and f.path.suffix == ".md")


# -- extraction ----------------------------------------------------------------------------------------------


def test_extraction_writes_each_owners_conversation_into_that_owners_files_only(fresh: Services) -> None:
    ext = fresh.extraction
    global_before = _owner_text(fresh, None, GLOBAL)
    ext.record_turn(AGENT, "ca", "Call me Alphonse", "Hi Alphonse.", owner=A)
    ext.record_turn(AGENT, "cb", "Call me Bravura", "Hi Bravura.", owner=B)
    with pytest.raises(NotFoundError):  # A's conversation is not B's to extract
        ext.extract_now(AGENT, "ca", owner=B)
    assert ext.extract_now(AGENT, "ca", owner=A).outcome == "updated"
    assert ext.extract_now(AGENT, "cb", owner=B).outcome == "updated"
    assert "- name: Alphonse" in fresh.store.read(AGENT, "PROFILE.md", owner=A).text
    assert "- name: Bravura" in fresh.store.read(AGENT, "PROFILE.md", owner=B).text
    mine, theirs, team = _owner_text(fresh, A), _owner_text(fresh, B), _owner_text(fresh, None)
    assert "Alphonse" in mine and "Bravura" not in mine and "BRAVO" not in mine
    assert "Bravura" in theirs and "Alphonse" not in theirs and "ALPHA" not in theirs
    assert "Alphonse" not in team and "Bravura" not in team
    assert _owner_text(fresh, None, GLOBAL) == global_before  # a chat never writes GLOBAL memory


# -- dreaming -----------------------------------------------------------------------------------------------


def test_dreaming_promotes_an_owners_notes_into_that_owners_memory_and_diary_only(fresh: Services) -> None:
    for owner, secret in SECRETS.items():
        for days in (4, 3, 2):
            fresh.store.append_daily(AGENT, "Plans", f"- {secret} trains for the river race on Sundays",
                                     actor="extraction", owner=owner, when=NIGHT - timedelta(days=days))
    team_before = fresh.store.read(AGENT, "MEMORY.md").text
    out = fresh.dreaming.dream(AGENT, owner=A)
    assert out.status == "done", out.reason
    a_memory = fresh.store.read(AGENT, "MEMORY.md", owner=A).text
    b_memory = fresh.store.read(AGENT, "MEMORY.md", owner=B).text
    assert "ALPHA trains for the river race" in a_memory and "BRAVO" not in a_memory
    assert "ALPHA trains" not in b_memory and "river race" not in b_memory  # B has not dreamt yet
    assert fresh.store.read(AGENT, "MEMORY.md").text == team_before
    assert "ALPHA" in fresh.store.read(AGENT, "DREAMS.md", owner=A).text
    assert not fresh.store.read(AGENT, "DREAMS.md", owner=B).exists  # the diary is per owner
    assert not fresh.store.read(AGENT, "DREAMS.md").exists
    assert fresh.dreaming.dream(AGENT, owner=B).status == "done"
    b_memory = fresh.store.read(AGENT, "MEMORY.md", owner=B).text
    b_diary = fresh.store.read(AGENT, "DREAMS.md", owner=B).text
    assert "BRAVO trains for the river race" in b_memory and "ALPHA" not in b_memory + b_diary
    assert fresh.dreaming.status(AGENT, owner=B)["latest_entry"] is not None
    assert "ALPHA" not in json.dumps(fresh.dreaming.status(AGENT, owner=B), default=str)


# -- structured entries and their consolidation ----------------------------------------------------------------


def test_structured_entries_and_consolidation_stay_in_each_owners_bucket(fresh: Services) -> None:
    st = fresh.structured
    for owner, secret in SECRETS.items():
        for i in range(5):  # five pairs of duplicates: the rules merge each pair
            for copy in ("a", "b"):
                st.remember(AGENT, "project", f"{secret.lower()}-{i}-{copy}",
                            f"{secret} project number {i} ships the canoe release", actor="api", owner=owner)
    for i in range(5):
        for copy in ("a", "b"):
            st.remember(GLOBAL, "project", f"g-{i}-{copy}", f"GLOBALENTRY project {i} of everyone", actor="api")
    assert all("BRAVO" not in e.entry.text for e in st.recall(AGENT, owner=A))
    assert any("BRAVO" in e.entry.text for e in st.recall(AGENT, owner=B))  # the owner is what decides
    relevant = st.relevant(AGENT, "canoe release", owner=A, limit=20, max_chars=10_000)
    assert relevant and all("ALPHA" in e.entry.text for e in relevant)
    report = fresh.structured_consolidation.run()
    buckets = {(b.agent, b.owner) for b in report.buckets if b.status == "updated"}
    assert {(AGENT, A), (AGENT, B), (GLOBAL, None)} <= buckets
    for owner, secret in SECRETS.items():
        kept = st.recall(AGENT, "project", owner=owner)
        assert len(kept) == 5 and all(secret in e.entry.text for e in kept)
    assert len(st.recall(GLOBAL, "project")) == 5
    assert st.recall(AGENT, "project") == []  # nothing was consolidated into the TEAM file


# -- recall tracking and turn records --------------------------------------------------------------------------


def test_recall_tracking_counts_each_owners_retrievals_apart(fresh: Services) -> None:
    since = NIGHT - timedelta(days=1)
    search = fresh.search
    search.search("kayak weekends", agent=AGENT, owner=A)

    def counts(agent: str, owner: str | None) -> dict[str, int]:
        return {h.rel: h.count for h in search.retrieval_hits(agent, owner=owner, since=since)}

    assert counts(AGENT, A) == {"MEMORY.md": 1, "structured/user.md": 1}
    assert counts(AGENT, B) == {}
    assert counts(GLOBAL, None) == {"MEMORY.md": 1}  # GLOBAL was retrieved (by A): shared evidence
    search.search("kayak weekends", agent=AGENT, owner=B)
    assert counts(AGENT, A) == {"MEMORY.md": 1, "structured/user.md": 1}  # B's search is not A's evidence
    assert counts(AGENT, B) == {"MEMORY.md": 1, "structured/user.md": 1}
    assert counts(GLOBAL, None) == {"MEMORY.md": 2}


def test_turn_records_are_read_back_by_their_own_owner_only(svc: Services) -> None:
    turns = svc.context.turns
    assert turns is not None
    built = {o: svc.context.build(AGENT, owner=o, query="kayak weekends") for o in SECRETS}
    for me, other in ((A, B), (B, A)):
        turn_id = built[me].turn
        assert turn_id is not None
        mine = turns.get(AGENT, me, turn_id)
        assert mine is not None and mine.owner == me
        assert turns.get(AGENT, other, turn_id) is None and turns.get(AGENT, None, turn_id) is None
        personal = {f["sha"] for f in mine.files if f.get("personal")}
        assert svc.store.read(AGENT, "MEMORY.md", owner=me).sha in personal
        assert svc.store.read(AGENT, "MEMORY.md", owner=other).sha not in {f["sha"] for f in mine.files}
        assert svc.store.read(GLOBAL, "MEMORY.md").sha in {f["sha"] for f in mine.files}


# -- conversation / session search ----------------------------------------------------------------------------


def test_conversation_search_keeps_each_owner_to_their_own_sessions(svc: Services) -> None:
    ts = int(NIGHT.timestamp() * 1000)
    for owner, secret in SECRETS.items():
        svc.log.append(AGENT, f"s-{secret}", [NewMessage("user", f"{secret} asked about the canoe trip", ts)],
                       owner=owner, now_ms=ts)
    svc.log.append(AGENT, "s-team", [NewMessage("user", "TEAMTALK the canoe trip is on", ts)], now_ms=ts)
    for me, other in ((A, "BRAVO"), (B, "ALPHA")):
        hits = svc.search.search("canoe trip", agent=AGENT, owner=me, scope="conversations", record=False).hits
        text = " ".join(h.snippet for h in hits)
        assert SECRETS[me] in text and other not in text and "TEAMTALK" in text
        assert {h.owner for h in hits} == {None, me}
    shared = svc.search.search("canoe trip", agent=AGENT, scope="conversations", record=False).hits
    assert [h.owner for h in shared] == [None]


# -- export / import ----------------------------------------------------------------------------------------


def _zip_text(data: bytes) -> dict[str, str]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {n: zf.read(n).decode("utf-8") for n in zf.namelist()}


def test_an_owners_export_holds_that_owners_files_only(svc: Services, tmp_path: Path) -> None:
    for owner, secret in SECRETS.items():
        result = svc.transfer.export(AGENT, tmp_path / f"{secret}.zip", owner=owner)
        files = _zip_text((tmp_path / f"{secret}.zip").read_bytes())
        body = "\n".join(t for n, t in files.items() if n != "manifest.json")
        other = "BRAVO" if secret == "ALPHA" else "ALPHA"
        assert secret in body and other not in body and "team kayak club" not in body
        assert json.loads(files["manifest.json"])["owner"] == owner == result.owner
    svc.store.ensure_agent("copy-of-alpha")
    svc.transfer.import_(tmp_path / "ALPHA.zip", agent="copy-of-alpha", owner=B, strategy="overwrite")
    assert "ALPHA paddles" in svc.store.read("copy-of-alpha", "MEMORY.md", owner=B).text
    assert svc.store.owners("copy-of-alpha") == [B]  # the import went where it was told, nowhere else


def test_http_export_takes_an_owner_and_checks_it(svc: Services) -> None:
    from mateclaw_mem.api.app import create_app

    url = f"/api/v1/agents/{AGENT}/workspace/memory/export"
    with ApiServer(create_app(svc, mcp=False)) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        got = {o: client.get(url, params={"owner": o}) for o in SECRETS}
        whole = client.get(url)
        bad = client.get(url, params={"owner": "x" * 300})
    for owner, secret in SECRETS.items():
        assert got[owner].status_code == 200, got[owner].text
        files = _zip_text(got[owner].content)
        other = "BRAVO" if secret == "ALPHA" else "ALPHA"
        assert secret in "".join(files.values()) and other not in "".join(files.values())
    assert whole.status_code == 200 and "team kayak club" in "".join(_zip_text(whole.content).values())
    assert bad.status_code == 422


def test_http_import_takes_an_owner_and_lands_in_that_owners_files(svc: Services) -> None:
    from mateclaw_mem.api.app import create_app

    base = f"/api/v1/agents/{AGENT}/workspace/memory"
    owner = next(iter(SECRETS))
    secret = SECRETS[owner]
    with ApiServer(create_app(svc, mcp=False)) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        snapshot = client.get(f"{base}/export", params={"owner": owner}).content
        path = svc.store.path(AGENT, "MEMORY.md", owner=owner)
        path.write_text(path.read_text(encoding="utf-8").replace(secret, "changed"), encoding="utf-8")
        files = {"file": ("snap.zip", snapshot, "application/zip")}
        preview = client.post(f"{base}/import/preview", params={"owner": owner},
                              files=files, data={"strategy": "overwrite"})
        done = client.post(f"{base}/import", params={"owner": owner}, files=files, data={"strategy": "overwrite"})
    assert preview.status_code == 200 and done.status_code == 200, (preview.text, done.text)
    assert secret in svc.store.read(AGENT, "MEMORY.md", owner=owner).text  # back in the owner's own file
    assert secret not in svc.store.read(AGENT, "MEMORY.md").text  # never in the TEAM file


# -- MCP tools ----------------------------------------------------------------------------------------------


def _mcp(services: Services, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async def run() -> list[Any]:
        async with Client(build_server(services, AGENT)) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(run)


def _text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def test_mcp_tools_honour_the_owner_argument(svc: Services) -> None:
    for me, other in ((A, "BRAVO"), (B, "ALPHA")):
        found, entries, read = _mcp(svc, [
            ("search_memory", {"query": "kayak", "owner": me, "scope": "memory"}),
            ("recall", {"type": "user", "owner": me}),
            ("read_workspace_memory_file", {"path": "MEMORY.md", "owner": me}),
        ])
        assert SECRETS[me] in _text(found) and other not in _text(found) and "GLOBALFACT" in _text(found)
        assert f"{SECRETS[me]}-BOAT" in _text(entries) and other not in _text(entries)
        assert f"{SECRETS[me]} paddles" in _text(read) and other not in _text(read)
    shared, *bad = _mcp(svc, [("search_memory", {"query": "kayak", "scope": "memory"}),
                              ("search_memory", {"query": "kayak", "owner": "x" * 300}),
                              ("morning_card", {"owner": "x" * 300})])
    assert "ALPHA" not in _text(shared) and "BRAVO" not in _text(shared) and "GLOBALFACT" in _text(shared)
    assert all(r.is_error and "owner key" in _text(r) for r in bad), [_text(r) for r in bad]


# -- status -------------------------------------------------------------------------------------------------


def test_status_counts_each_owners_files_without_showing_their_text(svc: Services) -> None:
    out = status.collect(svc)
    owners = out["agents"][AGENT]["owners"]
    assert set(owners) == set(SECRETS)
    for owner in SECRETS:
        chars = sum(f.chars for f in svc.store.list_files(AGENT, owner=owner))
        assert owners[owner] == {"files": len(svc.store.list_files(AGENT, owner=owner)), "chars": chars}
    dumped = json.dumps(out, default=str)
    assert "ALPHA" not in dumped and "BRAVO" not in dumped
