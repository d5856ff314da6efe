"""The contradiction inbox (issue 17, point 5): deterministic detection on every projection, the
model's judgement in batches of <= 5, resolutions that change the files, IGNORE remembered, owner
isolation, and rules-mode dreaming that never promotes a claim a later note corrects."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from mateclaw_mem.errors import ConflictError, InvalidInputError, NotFoundError
from mateclaw_mem.markdown.merge import parse_kv
from mateclaw_mem.memory.contradictions.detect import pair
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from tests.conftest import TZ
from tests.support.model_server import ModelServer
from tests.support.server import ApiServer

AGENT = "default"
PROFILE = "## Basics\n- name: Dana\n- timezone: Europe/Berlin\n"
MEMORY = ("# MEMORY.md\n\n## Preferences\n- Prefers dark mode in the editor\n- Likes tea\n\n"
          "## Work\n- timezone: Asia/Shanghai\n- Works on Project Atlas\n")


def _config(tmp_path: Path, extra: str = "", model: ModelServer | None = None, *, check: bool = True) -> Path:
    cfg = tmp_path / "mateclaw.yaml"
    text = ("timezone: Europe/Berlin\nowner-isolation: true\nmate:\n  memory:\n    lifecycle-mediator-enabled: true\n"
            f"    fact:\n      projection-enabled: true\n      contradiction-check-enabled: {str(check).lower()}\n"
            + extra)
    if model is not None:
        text += (f"model:\n  base-url: {model.base_url}\n  model: test-model\n  timeout-seconds: 5\n"
                 "  max-retries: 0\n")
    cfg.write_text(text, encoding="utf-8")
    return cfg


def _services(tmp_path: Path, clock: Any, extra: str = "", model: ModelServer | None = None, *,
              check: bool = True) -> Services:
    svc = Services(load_settings(_config(tmp_path, extra, model, check=check), tmp_path / "workspace"), clock)
    svc.store.ensure_agent(AGENT)
    _ = svc.file_index  # as in the daemon: writes are ingested, and so projected and re-detected
    _ = svc.contradictions
    return svc


def write(svc: Services, rel: str, body: str, owner: str | None = None) -> None:
    snap = svc.store.read(AGENT, rel, owner=owner)
    svc.store.write(AGENT, rel, body, expected_sha=snap.sha, actor="person", owner=owner)


def body(svc: Services, rel: str, owner: str | None = None) -> str:
    return svc.store.read(AGENT, rel, owner=owner).body


@pytest.fixture
def svc(tmp_path: Path, clock: Any) -> Iterator[Services]:
    s = _services(tmp_path, clock)
    write(s, "PROFILE.md", PROFILE)
    write(s, "MEMORY.md", MEMORY)
    yield s
    s.close()


# -- detection ---------------------------------------------------------------------------------------------


@dataclass
class C:
    id: str
    key: str
    value: str
    text: str
    first_seen_ms: int
    changed_ms: int


def claim(i: int, text: str) -> C:
    kv = parse_kv(text)
    return C(str(i), kv[0] if kv else "", kv[1] if kv else text, text, i, i)


DETECTION = [  # earlier claim, later claim, the kind found (None: no contradiction)
    ("timezone: Europe/Berlin", "timezone: Asia/Shanghai", "same_key"),
    ("Prefers dark mode in editors", "Prefers light mode in editors", "same_subject"),
    ("Standup is at 10:00 every weekday", "Standup is at 9:30 every weekday", "same_subject"),
    ("User prefers dark mode in the editor", "Actually I switched to light mode", "correction"),
    ("User prefers dark mode in the editor", "Light mode, not dark mode", "correction"),
    ("Uses Vim", "Doesn't use Vim anymore", "correction"),
    ("喜欢深色模式", "其实我改用浅色模式了", "correction"),
    ("用深色模式", "浅色模式，不是深色模式", "correction"),
    ("住在北京", "不是北京而是上海", "correction"),
    # no false positives: different keys, list keys, refinements, unrelated claims, temporal statements
    ("timezone: Europe/Berlin", "location: Berlin", None),
    ("likes: tea", "likes: coffee", None),
    ("Likes tea", "Likes coffee", None),
    ("name: Alice", "name: Alice Smith", None),
    ("lang-pref: prefers answers in German", "language: Prefers answers in German.", None),
    ("Prefers short answers", "Likes concrete code examples", None),
    ("User uses a light theme in the terminal", "The user prefers dark mode in editors", None),
    ("Lived in Paris until 2020", "Lives in Berlin", None),
    ("我住在北京", "我以前住在上海", None),
]


@pytest.mark.parametrize(("a", "b", "kind"), DETECTION, ids=[f"{a} | {b}" for a, b, _ in DETECTION])
def test_detection_table(a: str, b: str, kind: str | None) -> None:
    found = pair(claim(1, a), claim(2, b))
    assert (found.kind if found else None) == kind, found
    if found:
        assert (found.a.text, found.b.text) == (a, b)  # earlier / corrected claim first


def test_same_key_across_files_is_detected_on_projection(svc: Services) -> None:
    pairs = svc.contradictions.list(AGENT, None)
    assert len(pairs) == 1, [(p.a.text, p.b.text) for p in pairs]
    p = pairs[0]
    assert {p.a.file, p.b.file} == {"PROFILE.md", "MEMORY.md"} and p.kind == "same_key"
    assert {p.a.text, p.b.text} == {"timezone: Europe/Berlin", "timezone: Asia/Shanghai"}
    # A hand edit that settles it clears the pair from the inbox (the projection re-detects).
    write(svc, "MEMORY.md", MEMORY.replace("- timezone: Asia/Shanghai\n", ""))
    assert svc.contradictions.list(AGENT, None) == []


# -- resolving changes the files ---------------------------------------------------------------------------


def _the_pair(svc: Services, owner: str | None = None):
    pairs = svc.contradictions.list(AGENT, owner)
    assert len(pairs) == 1, pairs
    return pairs[0]


@pytest.mark.parametrize("keep", ["KEEP_A", "KEEP_B"])
def test_keep_forgets_the_other_claim_in_its_file(svc: Services, keep: str) -> None:
    p = _the_pair(svc)
    keep_side, lose_side = (p.a, p.b) if keep == "KEEP_A" else (p.b, p.a)
    r = svc.contradictions.resolve(AGENT, None, p.id, keep)
    assert lose_side.text not in body(svc, lose_side.file)
    assert keep_side.text in body(svc, keep_side.file)
    assert r.pair.status == "resolved" and r.files and f"-- {lose_side.text}" in r.files[0]["diff"].replace("-- ", "-- ")
    assert any(line == f"-- {lose_side.text}" for line in r.files[0]["diff"].splitlines())
    assert r.forgot_with in ("forget", "edit")
    assert svc.contradictions.list(AGENT, None) == []
    with pytest.raises(ConflictError):
        svc.contradictions.resolve(AGENT, None, p.id, keep)


def test_merge_writes_the_merged_text_in_place_of_both(svc: Services) -> None:
    p = _the_pair(svc)
    with pytest.raises(InvalidInputError):
        svc.contradictions.resolve(AGENT, None, p.id, "MERGE")
    r = svc.contradictions.resolve(AGENT, None, p.id, "MERGE", text="timezone: Europe/Berlin (Asia/Shanghai when travelling)")
    texts = body(svc, "PROFILE.md") + body(svc, "MEMORY.md")
    assert texts.count("timezone:") == 1 and "- timezone: Europe/Berlin (Asia/Shanghai when travelling)" in texts
    assert len(r.files) == 2 and r.pair.action == "MERGE"
    history = svc.store.history(AGENT, p.a.file) if hasattr(svc.store, "history") else None
    assert history is None or history  # written through the writer (history kept)


def test_ignore_is_remembered_across_a_rebuild(svc: Services) -> None:
    p = _the_pair(svc)
    r = svc.contradictions.resolve(AGENT, None, p.id, "IGNORE")
    assert r.files == [] and r.pair.status == "ignored"
    assert "timezone: Asia/Shanghai" in body(svc, "MEMORY.md")  # IGNORE changes no file
    svc.facts.rebuild()
    write(svc, "MEMORY.md", body(svc, "MEMORY.md") + "\n## More\n- Drinks coffee\n")
    assert svc.contradictions.list(AGENT, None) == []
    assert [q.status for q in svc.contradictions.list(AGENT, None, status=None)] == ["ignored"]


def test_unknown_pair_and_bad_action(svc: Services) -> None:
    with pytest.raises(NotFoundError):
        svc.contradictions.resolve(AGENT, None, "0" * 20, "KEEP_A")
    p = _the_pair(svc)
    with pytest.raises(InvalidInputError):
        svc.contradictions.resolve(AGENT, None, p.id, "KEEP_BOTH")


def test_owner_isolation(svc: Services) -> None:
    write(svc, "PROFILE.md", "## Basics\n- location: Lisbon\n", owner="alice")
    write(svc, "MEMORY.md", "## Notes\n- location: Porto\n", owner="bob")
    write(svc, "MEMORY.md", "## Notes\n- location: Madrid\n", owner="alice")
    alice = svc.contradictions.list(AGENT, "alice")
    texts = {t for p in alice for t in (p.a.text, p.b.text)}
    assert "location: Porto" not in texts and {"location: Lisbon", "location: Madrid"} <= texts
    # alice also sees the shared (team) pair, bob sees no pair of alice's
    assert all("Lisbon" not in p.a.text + p.b.text for p in svc.contradictions.list(AGENT, "bob"))
    assert all("Lisbon" not in p.a.text + p.b.text for p in svc.contradictions.list(AGENT, None))
    mine = next(p for p in alice if "Lisbon" in p.a.text + p.b.text)
    with pytest.raises(NotFoundError):
        svc.contradictions.resolve(AGENT, "bob", mine.id, "IGNORE")
    svc.contradictions.resolve(AGENT, "alice", mine.id, "KEEP_A")
    assert "location: Porto" in body(svc, "MEMORY.md", owner="bob")


# -- the judge ---------------------------------------------------------------------------------------------


def test_judge_batches_at_most_five_and_stores_its_verdict(tmp_path: Path, clock: Any) -> None:
    with ModelServer() as model:
        svc = _services(tmp_path, clock, "", model)
        try:
            lines = "".join(f"- project{i} deadline: May {i}\n" for i in range(7))
            other = "".join(f"- project{i} deadline: June {i}\n" for i in range(7))
            write(svc, "PROFILE.md", "## A\n" + lines)
            write(svc, "MEMORY.md", "## B\n" + other)

            def judge(req: dict[str, Any]) -> dict[str, Any]:
                n = req["messages"][-1]["content"].count('"pair":')
                return {"verdicts": [{"pair": i, "contradiction": i != 1, "reason": "sk-" + "a" * 40 if i == 2
                                      else "dates differ"} for i in range(1, n + 1)]}

            model.responder = judge  # type: ignore[assignment]
            pairs = svc.contradictions.list(AGENT, None)
            calls = model.chat_requests
            sizes = [r.messages[-1]["content"].count('"pair":') for r in calls]
            assert sorted(sizes) == [2, 5], sizes  # 7 pairs: two calls, none over 5
            assert len(pairs) == 5  # pair 1 of each batch dismissed as compatible
            assert all(p.verdict == "contradiction" for p in pairs)
            every = svc.contradictions.list(AGENT, None, status=None)
            assert sum(p.status == "dismissed" for p in every) == 2
            assert not any("sk-aaaa" in p.verdict_reason for p in every)  # redacted
            svc.contradictions.list(AGENT, None)
            assert len(model.chat_requests) == len(calls)  # judged once; the verdict is stored
        finally:
            svc.close()


def test_with_the_key_off_nothing_is_detected_and_the_model_is_not_asked(tmp_path: Path, clock: Any) -> None:
    # The seed's meaning of contradiction-check-enabled: false (issue 38.3): no checking at all, not
    # the rules without the model.
    with ModelServer() as model:
        svc = _services(tmp_path, clock, "", model, check=False)
        try:
            write(svc, "PROFILE.md", PROFILE)
            write(svc, "MEMORY.md", MEMORY)
            assert svc.facts.list(AGENT, None, query="timezone")  # projected: the facts are there
            assert svc.contradictions.list(AGENT, None, status=None) == []
            assert svc.contradictions.db.list(AGENT, None, None) == []  # none stored either
            assert model.chat_requests == []
            with pytest.raises(ConflictError, match="contradiction-check-enabled"):
                svc.contradictions.resolve(AGENT, None, "0" * 20, "IGNORE")
        finally:
            svc.close()


# -- HTTP --------------------------------------------------------------------------------------------------


def test_http_inbox_and_resolve(svc: Services) -> None:
    from mateclaw_mem.api.app import create_app

    with ApiServer(create_app(svc, mcp=False)) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        base = f"/api/v1/memory/{AGENT}/facts/contradictions"
        got = http.get(base)
        assert got.status_code == 200, got.text
        (p,) = got.json()["contradictions"]
        assert p["a"]["file"] and p["b"]["file"] and p["status"] == "open"
        assert http.post(f"{base}/{'0' * 20}/resolve", json={"action": "IGNORE"}).status_code == 404
        assert http.post(f"{base}/{p['id']}/resolve", json={"action": "NOPE"}).status_code == 422
        assert http.post(f"{base}/{p['id']}/resolve", json={"action": "MERGE"}).status_code == 422
        r = http.post(f"{base}/{p['id']}/resolve", json={"action": "KEEP_A"})
        assert r.status_code == 200, r.text
        assert r.json()["files"][0]["diff"].count("\n-- timezone") == 1 or "-- timezone" in r.json()["files"][0]["diff"]
        assert p["b"]["text"] not in body(svc, p["b"]["file"])
        assert http.post(f"{base}/{p['id']}/resolve", json={"action": "KEEP_A"}).status_code == 409
        assert http.get("/api/v1/memory/nobody/facts/contradictions").status_code == 404
        assert "/api/v1/memory/{agentId}/facts/contradictions/{id}/resolve" in http.get("/openapi.json").json()["paths"]


# -- rules-mode dreaming -----------------------------------------------------------------------------------


def _dream_week(svc: Services, clock: Any, notes: list[tuple[int, str]]) -> Any:
    for day, text in notes:
        svc.store.append_daily(AGENT, "Chat", text, actor="extraction", when=datetime(2026, 11, day, 10, 0, tzinfo=TZ))
    clock.set(datetime(2026, 11, 30, 3, 0, tzinfo=TZ))
    return svc.dreaming.dream(AGENT)


@pytest.mark.parametrize("correction", ["- Actually I switched to light mode",
                                        "- Light mode, not dark mode"])
def test_rules_dream_never_promotes_a_corrected_claim(tmp_path: Path, clock: Any, correction: str) -> None:
    svc = _services(tmp_path, clock)
    try:
        out = _dream_week(svc, clock, [(24, "- User prefers dark mode in the editor"),
                                       (25, "- The user prefers dark mode in editors"),
                                       (27, correction), (28, correction)])
        text = svc.store.read(AGENT, "MEMORY.md").text
        assert "dark mode in" not in text, text
        assert "corrected later" in svc.store.read(AGENT, "DREAMS.md").text
        assert correction[2:] in text and out.status == "done"  # the correction recurred: promoted
    finally:
        svc.close()


def test_a_claim_said_again_after_its_correction_stands(tmp_path: Path, clock: Any) -> None:
    svc = _services(tmp_path, clock)
    try:
        _dream_week(svc, clock, [(24, "- User prefers dark mode in the editor"),
                                 (26, "- Actually I switched to light mode"),
                                 (28, "- The user prefers dark mode in editors")])
        assert "prefers dark mode in editors" in svc.store.read(AGENT, "MEMORY.md").text
    finally:
        svc.close()


# -- MCP, and forget when it is on -------------------------------------------------------------------------


def test_mcp_tools_list_and_resolve(svc: Services) -> None:
    import anyio

    from mateclaw_mem.mcp.server import build_server

    server = build_server(svc, AGENT)

    async def session() -> tuple[Any, Any]:
        listed = await server.call_tool("memory_contradictions", {})
        pid = svc.contradictions.list(AGENT, None)[0].id
        done = await server.call_tool("memory_resolve_contradiction",
                                      {"id": pid, "action": "MERGE", "text": "timezone: Europe/Berlin"})
        return listed, done

    listed, _ = anyio.run(session)
    assert "timezone" in str(listed)
    assert body(svc, "PROFILE.md").count("timezone:") + body(svc, "MEMORY.md").count("timezone:") == 1
    assert svc.contradictions.list(AGENT, None) == []


def test_keep_uses_forget_when_it_is_on(tmp_path: Path, clock: Any) -> None:
    svc = _services(tmp_path, clock, "      forget-enabled: true\n")
    try:
        write(svc, "MEMORY.md", "## Prefs\n- Prefers dark mode in the editor\n")
        write(svc, "PROFILE.md", "## Prefs\n- Prefers light mode in the editor\n")
        p = _the_pair(svc)
        r = svc.contradictions.resolve(AGENT, None, p.id, "KEEP_B")
        assert r.forgot_with == "forget" and p.a.text not in body(svc, p.a.file) and p.b.text in body(svc, p.b.file)
        # tombstoned: the same claim written again by a machine does not come back through extraction/dreaming
        assert svc.forget.guard(AGENT, None) is not None
    finally:
        svc.close()


def test_a_failing_judge_leaves_the_pair_open_for_the_next_look(tmp_path: Path, clock: Any) -> None:
    with ModelServer() as model:
        svc = _services(tmp_path, clock, "", model)
        try:
            write(svc, "PROFILE.md", PROFILE)
            write(svc, "MEMORY.md", MEMORY)
            model.reply("not json at all")
            model.reply("still not json")
            (p,) = svc.contradictions.list(AGENT, None)
            assert p.verdict == "" and p.status == "open"
            model.reply_json({"verdicts": [{"pair": 1, "contradiction": True, "reason": "two timezones"}]})
            (p,) = svc.contradictions.list(AGENT, None)
            assert (p.verdict, p.verdict_reason) == ("contradiction", "two timezones")
        finally:
            svc.close()


def test_without_owner_isolation_every_owner_shares_the_inbox(tmp_path: Path, clock: Any) -> None:
    cfg = tmp_path / "plain.yaml"
    cfg.write_text("timezone: Europe/Berlin\nmate:\n  memory:\n    fact:\n      projection-enabled: true\n"
                   "      contradiction-check-enabled: true\n", encoding="utf-8")
    svc = Services(load_settings(cfg, tmp_path / "ws"), clock)
    try:
        svc.store.ensure_agent(AGENT)
        _ = svc.file_index, svc.contradictions
        write(svc, "PROFILE.md", PROFILE)
        write(svc, "MEMORY.md", MEMORY)
        (shared,) = svc.contradictions.list(AGENT, None)
        (alice,) = svc.contradictions.list(AGENT, "alice")
        assert alice.id == shared.id and alice.owner is None
        svc.contradictions.resolve(AGENT, "alice", shared.id, "IGNORE")
        assert svc.contradictions.list(AGENT, None) == []
    finally:
        svc.close()


def test_the_same_claim_twice_is_one_pair_not_a_failed_sync(svc: Services) -> None:
    # The same words in two structured entries make the same pair twice (its id is the two texts):
    # one inbox row, and the projection that found it does not fail on a duplicate id.
    for kind in ("user", "reference"):
        svc.structured.remember(AGENT, kind, "timezone", "Asia/Tokyo", actor="person")
    pairs = svc.contradictions.list(AGENT, None)
    texts = sorted((p.a.text, p.b.text) for p in pairs)
    assert len(texts) == len(set(texts)), texts
    assert any("Asia/Tokyo" in a + b for a, b in texts), texts
