"""Memory snapshots over HTTP (export, import preview, import) and the same guards on the CLI.

One real uvicorn per settings variant (seed defaults; vault import with every extra), shared by the
module; every test imports into an agent of its own.
"""

from __future__ import annotations

import hashlib
import io
import json
import stat
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mateclaw_mem.cli.main import main
from mateclaw_mem.workspace.snapshot_rules import strip_target_keys
from mateclaw_mem.workspace.store import WorkspaceStore
from tests.support.isolation import no_config_here
from tests.support.server import ApiServer, daemon_services, serve_api

BASE = "/api/v1/agents/{}/workspace/memory"
MB = 1024 * 1024


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".mateclaw" not in p.relative_to(root).parts}


def zip_bytes(entries: list[tuple[str, bytes]], links: tuple[str, ...] = ()) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate names a hostile case needs
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for name, data in entries:
                info = zipfile.ZipInfo(name)
                info.compress_type = zipfile.ZIP_DEFLATED
                if name in links:
                    info.external_attr = (stat.S_IFLNK | 0o777) << 16
                zf.writestr(info, data)
    return buf.getvalue()


def upload(client: httpx.Client, agent: str, data: bytes, *, preview: bool = False, **form: str) -> httpx.Response:
    path = BASE.format(agent) + ("/import/preview" if preview else "/import")
    return client.post(path, files={"file": ("snapshot.zip", data, "application/zip")}, data=form)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path_factory.mktemp("snapshots") / "workspace", mcp=False)


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A daemon with the vault import and every extra switched on, owner isolation and facts."""
    from mateclaw_mem.api.app import create_app

    services = daemon_services(tmp_path_factory.mktemp("wide") / "workspace", owner_isolation=True, mate={
        "memory": {"snapshot-vault-import": True, "snapshot-extras": ["structured", "dreams", "owners", "facts"],
                   "fact": {"projection-enabled": True}}})
    services.seed_agents()
    services.build()
    try:
        with ApiServer(create_app(services, mcp=False)) as server, \
                httpx.Client(base_url=server.url, timeout=30) as client:
            client.services = services  # type: ignore[attr-defined]
            yield client
    finally:
        services.close()


def store_of(client: httpx.Client) -> WorkspaceStore:
    return client.services.store  # type: ignore[attr-defined]


def new_agent(client: httpx.Client, name: str) -> WorkspaceStore:
    store = store_of(client)
    store.ensure_agent(name)
    return store


def fill(store: WorkspaceStore, agent: str) -> None:
    """Files people really have: their own frontmatter and order, CJK, CRLF, a daily note, a note
    outside the seed's whitelist."""
    store.ensure_agent(agent)
    store.write(agent, "MEMORY.md", "---\nenabled: true\nsort_order: 7\n# mine\n---\n# Memory\n\n## 跑步\n周日跑步\n",
                expected_sha=None, actor="person")
    store.write(agent, "PROFILE.md", "---\nsort_order: 9\n---\n# Profile\r\n\r\n- likes tea\r\n",
                expected_sha=None, actor="person")
    store.write(agent, "KNOWLEDGE.md", "# Knowledge\nno frontmatter, no newline", expected_sha="", actor="person")
    store.write(agent, "memory/2026-11-01.md", "# 2026-11-01\n\n## 09:00 Walk\nwent for a walk\n",
                expected_sha="", actor="person")
    store.write(agent, "notes/vault.md", "# Vault note\n", expected_sha="", actor="person")


def export(client: httpx.Client, agent: str) -> bytes:
    r = client.get(BASE.format(agent) + "/export")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/zip" and "attachment" in r.headers["content-disposition"]
    return r.content


def entries(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def test_export_then_import_into_a_new_agent_is_byte_for_byte(api: httpx.Client) -> None:
    store = store_of(api)
    fill(store, "source1")
    data = export(api, "source1")
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert zf.namelist()[0] == "manifest.json"
    files = entries(data)
    manifest = json.loads(files.pop("manifest.json"))
    assert manifest["version"] == 1 and manifest["exportedAt"] and manifest["agentId"] == "source1"
    assert manifest["agentName"] == "source1"
    assert {f["path"]: f["sha256"] for f in manifest["files"]} == {
        n: hashlib.sha256(b).hexdigest() for n, b in files.items()}
    assert sorted(files) == ["AGENTS.md", "KNOWLEDGE.md", "MEMORY.md", "PROFILE.md", "SOUL.md",
                             "memory/2026-11-01.md"]  # notes/vault.md is no part of a seed snapshot
    assert not any(b"enabled:" in b or b"sort_order:" in b for b in files.values())  # the target decides
    assert files["MEMORY.md"] == b"---\n# mine\n---\n# Memory\n\n## \xe8\xb7\x91\xe6\xad\xa5\n\xe5\x91\xa8\xe6\x97\xa5\xe8\xb7\x91\xe6\xad\xa5\n"

    new_agent(api, "copy1")
    target = store.agent_dir("copy1")
    before, history = tree(target), sorted(store.state_dir.rglob("*"))
    r = upload(api, "copy1", data, preview=True)
    assert r.status_code == 200, r.text
    plan = {f["path"]: f for f in r.json()["files"]}
    assert r.json()["dryRun"] and r.json()["run"] is None
    assert plan["KNOWLEDGE.md"]["action"] == "create" and plan["KNOWLEDGE.md"]["oldSize"] is None
    memory = plan["MEMORY.md"]
    assert memory["action"] == "update" and "seed" in memory["reason"]
    assert memory["oldSha256"] == hashlib.sha256((target / "MEMORY.md").read_bytes()).hexdigest()
    assert memory["newSize"] > 0 and len(memory["newSha256"]) == 64
    assert tree(target) == before and sorted(store.state_dir.rglob("*")) == history  # a preview writes nothing

    r = upload(api, "copy1", data)
    assert r.status_code == 200, r.text
    assert r.json()["agentId"] == "copy1" and r.json()["run"].startswith("import-copy1-")
    after = tree(target)
    for name, exported in files.items():
        assert strip_target_keys(after[name].decode("utf-8")).encode("utf-8") == exported, name
    # The target's own keys: the seed's order for MEMORY.md, not the 7 it had in source1.
    assert after["MEMORY.md"].startswith(b"---\nenabled: true\nsort_order: 3\n# mine\n---\n")
    assert (target / "MEMORY.md").read_bytes() != (store.agent_dir("source1") / "MEMORY.md").read_bytes()
    assert hashlib.sha256(after["MEMORY.md"]).hexdigest() == memory["newSha256"]
    store.undo_batch(r.json()["run"])
    assert tree(target) == before


def test_the_manifest_agent_never_picks_the_target(api: httpx.Client) -> None:
    store = store_of(api)
    fill(store, "source2")
    manifest = json.dumps({"format": "mateclaw-mem-export", "version": 1, "agentId": "source2",
                           "agent": "source2", "files": []}).encode()
    data = zip_bytes([("manifest.json", manifest), ("MEMORY.md", b"# from elsewhere\n")])
    before = tree(store.agent_dir("source2"))
    new_agent(api, "copy2")
    r = upload(api, "copy2", data, strategy="overwrite")
    assert r.status_code == 200 and r.json()["agentId"] == "copy2"
    assert "imported into 'copy2'" in " ".join(r.json()["notes"])
    assert store.read("copy2", "MEMORY.md").text.endswith("# from elsewhere\n")
    assert tree(store.agent_dir("source2")) == before


def test_a_zip_of_only_daily_notes_lands_in_memory(api: httpx.Client) -> None:
    store = new_agent(api, "copy3")
    data = zip_bytes([("memory/2026-10-01.md", b"# 2026-10-01\n"), ("memory/2026-10-02.md", b"# 2026-10-02\n")])
    r = upload(api, "copy3", data)
    assert r.status_code == 200, r.text
    assert {f["file"] for f in r.json()["files"]} == {"memory/2026-10-01.md", "memory/2026-10-02.md"}
    assert store.read("copy3", "memory/2026-10-02.md").text == "# 2026-10-02\n"
    assert not store.read("copy3", "2026-10-01.md").exists


def test_a_write_that_fails_mid_import_leaves_nothing_changed(api: httpx.Client) -> None:
    store = new_agent(api, "copy4")
    # A daily note that is a symbolic link: readable, so the plan takes it, but the writer refuses
    # to write through a link — a failure in the middle of the run, after AGENTS.md was written.
    base = store.agent_dir("copy4")
    (base / "memory").mkdir()
    (base / "elsewhere.md").write_text("# linked\n", encoding="utf-8")
    (base / "memory" / "2026-09-01.md").symlink_to(base / "elsewhere.md")
    before = tree(base)
    data = zip_bytes([("AGENTS.md", b"# Agents\nnew rules\n"), ("memory/2026-09-01.md", b"# 2026-09-01\n"),
                      ("MEMORY.md", b"# Memory\n\ntiny\n")])
    plan = upload(api, "copy4", data, preview=True, strategy="overwrite").json()
    assert {f["path"]: f["action"] for f in plan["files"]} == {
        "AGENTS.md": "update", "memory/2026-09-01.md": "update", "MEMORY.md": "update"}
    r = upload(api, "copy4", data, strategy="overwrite")
    assert r.status_code == 409, r.text
    reason = r.json()["detail"]["reason"]
    assert "nothing of it was kept" in reason and "memory/2026-09-01.md" in reason and "symbolic link" in reason
    assert tree(base) == before  # AGENTS.md, already written, was taken back; MEMORY.md never written


def _hostile() -> list[tuple[str, bytes, int, str]]:
    one_mb_plus = b"\n" * (MB + 1)
    return [
        ("traversal", zip_bytes([("MEMORY.md", b"# ok\n"), ("../evil.md", b"x")]), 400, "climbs out"),
        ("absolute", zip_bytes([("/etc/evil.md", b"x")]), 400, "absolute path"),
        ("symlink", zip_bytes([("MEMORY.md", b"/etc/passwd")], links=("MEMORY.md",)), 400, "symbolic link"),
        ("duplicate", zip_bytes([("MEMORY.md", b"# a\n"), ("MEMORY.md", b"# b\n")]), 400, "appears twice"),
        ("bomb", zip_bytes([("MEMORY.md", one_mb_plus)]), 413, "the limit per file is 1048576"),
        ("total", zip_bytes([(f"memory/2026-01-{d:02d}.md", b"\n" * (MB - 10)) for d in range(1, 18)]), 413,
         "unpacks to more than 16777216 bytes"),
        ("entries", zip_bytes([(f"n{i}.md", b"x") for i in range(501)]), 413, "the limit is 500"),
        ("non-utf8", zip_bytes([("MEMORY.md", "café\n".encode("latin-1"))]), 400, "not UTF-8 text"),
        ("bad date", zip_bytes([("memory/2026-02-30.md", b"# nope\n")]), 400, "impossible date"),
        ("not a zip", b"just some bytes", 400, "not a zip archive"),
    ]


HOSTILE = _hostile()


@pytest.mark.parametrize("case, data, status, why", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_archives_are_refused_with_a_reason_over_http(api: httpx.Client, case: str, data: bytes,
                                                              status: int, why: str) -> None:
    store = new_agent(api, "hostile")
    before = tree(store.agent_dir("hostile"))
    for preview in (True, False):
        r = upload(api, "hostile", data, preview=preview)
        assert r.status_code == status, r.text
        reason = r.json()["detail"]["reason"]
        assert why in reason and "Traceback" not in r.text
    assert tree(store.agent_dir("hostile")) == before


@pytest.fixture
def cli(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path_factory.getbasetemp() / "snapshot-cli"
    root.mkdir(exist_ok=True)
    ws = no_config_here(monkeypatch, root)
    if not ws.exists():
        assert main(["init"]) == 0
    return root


@pytest.mark.parametrize("case, data, status, why", HOSTILE[:-1], ids=[c[0] for c in HOSTILE[:-1]])
def test_hostile_archives_are_refused_with_the_same_reason_on_the_cli(
        cli: Path, capsys: pytest.CaptureFixture, case: str, data: bytes, status: int, why: str) -> None:
    archive = cli / f"{case.replace(' ', '-')}.zip"
    archive.write_bytes(data)
    before = tree(cli / "workspace" / "default")
    capsys.readouterr()
    assert main(["import", str(archive)]) != 0
    err = capsys.readouterr().err
    assert why in err and "Traceback" not in err
    assert tree(cli / "workspace" / "default") == before


def test_a_memory_only_zip_lands_in_memory_on_the_cli(cli: Path) -> None:
    archive = cli / "daily.zip"
    archive.write_bytes(zip_bytes([("memory/2026-08-01.md", b"# 2026-08-01\n")]))
    assert main(["import", str(archive)]) == 0
    assert (cli / "workspace/default/memory/2026-08-01.md").read_bytes() == b"# 2026-08-01\n"
    assert not (cli / "workspace/default/2026-08-01.md").exists()


def test_an_upload_over_16_mb_is_refused_with_413(api: httpx.Client) -> None:
    big = b"\0" * (16 * MB + 128 * 1024)
    r = upload(api, "default", big)  # declared length: refused before a byte of it is read
    assert r.status_code == 413 and "16777216" in r.json()["detail"]["reason"]

    boundary = "snapshotboundary"

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted while it streams in
        yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"s.zip\"\r\n"
               "Content-Type: application/zip\r\n\r\n").encode()
        for _ in range(20):
            yield b"\0" * MB
        yield f"\r\n--{boundary}--\r\n".encode()

    r = api.post(BASE.format("default") + "/import", content=chunked(),
                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert r.status_code == 413 and "refusing it unread" in r.json()["detail"]["reason"]


def test_seed_snapshots_skip_what_the_whitelist_and_the_flags_leave_out(api: httpx.Client) -> None:
    new_agent(api, "copy5")
    data = zip_bytes([("notes/a.md", b"# a\n"), ("DREAMS.md", b"# Dreams\n"), ("structured/user.md", b"# u\n"),
                      ("owners/bob/PROFILE.md", b"# Bob\n"), ("MEMORY.md", b"# M\n")])
    plan = {f["path"]: f for f in upload(api, "copy5", data, preview=True).json()["files"]}
    assert "snapshot-vault-import" in plan["notes/a.md"]["reason"]
    assert "snapshot-extras: [dreams]" in plan["DREAMS.md"]["reason"]
    assert "snapshot-extras: [structured]" in plan["structured/user.md"]["reason"]
    assert "snapshot-extras: [owners]" in plan["owners/bob/PROFILE.md"]["reason"]
    assert {f["action"] for p, f in plan.items() if p != "MEMORY.md"} == {"skip"}
    assert plan["MEMORY.md"]["action"] == "update"


def test_the_vault_import_setting_takes_any_markdown(wide: httpx.Client) -> None:
    store = new_agent(wide, "vault1")
    data = zip_bytes([("Vault/notes/a.md", b"# a\n"), ("Vault/ideas.md", "# 想法\n".encode()),
                      ("Vault/photo.png", b"\x89PNG")])
    r = upload(wide, "vault1", data)
    assert r.status_code == 200, r.text
    assert store.read("vault1", "notes/a.md").text == "# a\n" and store.read("vault1", "ideas.md").exists
    assert {f["path"]: f["action"] for f in r.json()["files"]}["photo.png"] == "skip"
    # Still bounded: a file over the vault's 5 MB is skipped with its reason, never held.
    r = upload(wide, "vault1", zip_bytes([("huge.md", b"\n" * (5 * MB + 1))]))
    assert r.status_code == 200 and "the limit per file is 5242880" in r.json()["files"][0]["reason"]
    exported = entries(export(wide, "vault1"))
    assert "notes/a.md" in exported  # a vault export carries every .md


@pytest.mark.parametrize("extra, rel, owner", [
    ("dreams", "DREAMS.md", None),
    ("structured", "structured/user.md", None),
    ("owners", "PROFILE.md", "bob"),
])
def test_each_extra_travels_with_its_flag(wide: httpx.Client, extra: str, rel: str, owner: str | None) -> None:
    store = store_of(wide)
    source, target = f"x-{extra}", f"y-{extra}"
    store.ensure_agent(source)
    store.ensure_agent(target)
    text = f"# {extra}\n\n## kept\nby the {extra} flag\n"
    store.write(source, rel, text, expected_sha=None, actor="person", owner=owner)
    files = entries(export(wide, source))
    name = f"owners/{owner}/{rel}" if owner else rel
    assert strip_target_keys(files[name].decode("utf-8")) == strip_target_keys(text)
    r = upload(wide, target, export(wide, source))
    assert r.status_code == 200, r.text
    assert strip_target_keys(store.read(target, rel, owner=owner).text) == strip_target_keys(text)


def test_export_of_an_unknown_agent_names_it(api: httpx.Client) -> None:
    r = api.get(BASE.format("nobody") + "/export")
    assert r.status_code == 404 and "nobody" in r.json()["detail"]["reason"]


def test_facts_and_feedback_travel_with_the_facts_flag(wide: httpx.Client, api: httpx.Client) -> None:
    services = wide.services  # type: ignore[attr-defined]
    store, facts = services.store, services.facts
    for agent in ("x-facts", "y-facts"):
        store.ensure_agent(agent)
    store.write("x-facts", "PROFILE.md", "# Profile\n\n## Music\n- likes jazz\n- plays the cello\n",
                expected_sha=None, actor="person")
    facts.refresh("x-facts", None, "PROFILE.md")
    jazz = next(f for f in facts.list("x-facts", None) if "jazz" in f.text)
    facts.feedback("x-facts", None, jazz.id, "helpful", note="right on")
    data = export(wide, "x-facts")
    lines = [json.loads(ln) for ln in entries(data)["facts/events.jsonl"].decode().splitlines()]
    assert [(e["text"], e["kind"], e["note"]) for e in lines] == [("likes jazz", "helpful", "right on")]

    r = upload(wide, "y-facts", data, preview=True)
    assert {f["path"]: f["reason"] for f in r.json()["files"]}["facts/events.jsonl"] == "1 new fact events"
    assert upload(wide, "y-facts", data).status_code == 200
    facts.refresh("y-facts", None, "PROFILE.md")
    moved = next(f for f in facts.list("y-facts", None) if "jazz" in f.text)
    assert moved.id != jazz.id  # a fact's id is its agent's
    assert [h["kind"] for h in facts.history("y-facts", None, moved.id)] == ["helpful"]
    again = upload(wide, "y-facts", data).json()  # a log: the same snapshot adds no event twice
    assert {f["path"]: f["detail"] for f in again["files"]}["facts/events.jsonl"] == "unchanged"
    # Without the flag the events file is no part of a snapshot.
    new_agent(api, "no-facts")
    plain = {f["path"]: f for f in upload(api, "no-facts", data, preview=True).json()["files"]}
    assert plain["facts/events.jsonl"]["action"] == "skip"
