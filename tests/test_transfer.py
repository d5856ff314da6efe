from __future__ import annotations

import json
import os
import stat
import sys
import zipfile
from pathlib import Path

import pytest

from mateclaw_mem.cli.main import main
from mateclaw_mem.clock import ManualClock
from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.workspace.import_source import Limits
from mateclaw_mem.workspace.snapshot_rules import Policy, strip_target_keys
from mateclaw_mem.workspace.store import WorkspaceStore
from mateclaw_mem.workspace.transfer import Transfer


def vault(store: WorkspaceStore, **kwargs: object) -> Transfer:
    """The vault import (`snapshot-vault-import: true`): any .md, as these tests' folders hold."""
    return Transfer(store, policy=Policy(vault=True), **kwargs)  # type: ignore[arg-type]


def stripped(files: dict[str, bytes]) -> dict[str, bytes]:
    """The files as a snapshot carries them: `enabled` / `sort_order` are the target's to decide."""
    return {k: strip_target_keys(v.decode("utf-8")).encode("utf-8") for k, v in files.items()}


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root (state excluded) with its bytes."""
    if not root.exists():
        return {}
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".mateclaw" not in p.relative_to(root).parts}


def fresh_store(tmp_path: Path, clock: ManualClock, name: str = "other") -> WorkspaceStore:
    """Another workspace with its default agent (imports go into an agent that exists)."""
    store = WorkspaceStore(tmp_path / name, clock=clock)
    store.ensure_agent("default")
    return store


def make_zip(path: Path, entries: dict[str, bytes], links: tuple[str, ...] = ()) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name)
            if name in links:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, data)
    return path


@pytest.fixture
def filled(store: WorkspaceStore) -> WorkspaceStore:
    """An agent with the files people really have: frontmatter they wrote, CJK, CRLF, a daily note,
    a note without frontmatter and without a trailing newline."""
    store.write("default", "MEMORY.md",
                "---\nenabled: true\nsort_order: 3\n# my comment\n---\n# Memory\n\n## Tea\n- no sugar\n\n## 跑步\n用户喜欢周日早上跑步\n",
                expected_sha=None, actor="person")
    store.write("default", "notes/crlf.md", "# Windows\r\n\r\n## A\r\nline\r\n", expected_sha="", actor="person")
    store.write("default", "notes/bare.md", "no frontmatter, no newline", expected_sha="", actor="person")
    store.append_daily("default", "Walk", "went for a walk", actor="extraction")
    return store


def test_round_trip_is_byte_for_byte_through_zip_and_folder(filled: WorkspaceStore, tmp_path: Path,
                                                            clock: ManualClock) -> None:
    source = tree(filled.agent_dir("default"))
    out = vault(filled).export("default", tmp_path / "backup.zip")
    with zipfile.ZipFile(out.out) as zf:
        names = zf.namelist()
        manifest = json.loads(zf.read("manifest.json"))
    assert sorted(n for n in names if n != "manifest.json") == sorted(source)
    assert not any(n.startswith(".mateclaw") for n in names)
    assert manifest["version"] == 1 and manifest["agentId"] == "default" and manifest["exportedAt"]
    assert {f["path"]: f["size"] for f in manifest["files"]} == {k: len(v) for k, v in stripped(source).items()}

    other = fresh_store(tmp_path, clock)  # its untouched seeds give way to the imported files
    report = vault(other).import_(out.out)
    assert report.agent == "default" and report.counts() == {"create": 3, "overwrite": 1, "unchanged": 3}
    assert stripped(tree(other.agent_dir("default"))) == stripped(source)

    folder = vault(filled).export("default", tmp_path / "backup-dir").out
    third = fresh_store(tmp_path, clock, "third")
    third.ensure_agent("copy")
    vault(third).import_(folder, agent="copy")
    assert stripped(tree(third.agent_dir("copy"))) == stripped(source)
    assert [v.actor for v in third.history("copy", "MEMORY.md")][-1] == "import"


def test_history_only_with_include_history_and_never_imported(filled: WorkspaceStore, tmp_path: Path,
                                                               clock: ManualClock) -> None:
    out = vault(filled).export("default", tmp_path / "h.zip", include_history=True)
    with zipfile.ZipFile(out.out) as zf:
        history = [n for n in zf.namelist() if n.startswith(".mateclaw/history/")]
    assert history and out.history_files == len(history)
    assert any(n.endswith("MEMORY.md/versions.jsonl") for n in history)
    other = fresh_store(tmp_path, clock)
    report = vault(other).import_(out.out)
    skipped = [i for i in report.items if i.action == "skip"]
    assert [i.source for i in skipped] == [".mateclaw/"] and "not imported" in skipped[0].reason
    # Only its own versions (the seed, the import), none of the person's kept in the source.
    assert [v.actor for v in other.history("default", "MEMORY.md")] == ["seed", "import"]


def test_import_through_the_ceiling_archives_the_tail_and_undo_takes_it_all_back(store: WorkspaceStore,
                                                                                tmp_path: Path) -> None:
    sections = "".join(f"## Topic {i}\n" + f"fact {i} " * 60 + "\n\n" for i in range(30))
    big = "---\nenabled: true\n---\n# Memory\n\n" + sections
    assert len(big) > 12000
    src = tmp_path / "src"
    src.mkdir()
    (src / "MEMORY.md").write_text(big, encoding="utf-8")
    before = tree(store.agent_dir("default"))
    report = vault(store).import_(src, strategy="overwrite")
    (item,) = report.items
    assert item.action == "overwrite" and item.archived
    memory = store.read("default", "MEMORY.md").text
    assert len(store.body(memory)) <= 8000 and "[mateclaw]" in memory and "## Topic 0" in memory
    archive = store.read("default", item.archived[0]).text
    assert "## Topic 29" in archive and "## Topic 29" not in memory
    store.undo_batch(report.batch)
    assert tree(store.agent_dir("default")) == before


def test_pinned_sections_survive_an_overwrite_import(store: WorkspaceStore, tmp_path: Path) -> None:
    mine = "# Memory\n\n## Keep\n<!-- pin -->\nmy pinned words\n\n## Old\nold text\n"
    store.write("default", "MEMORY.md", mine, expected_sha=None, actor="person")
    src = tmp_path / "src"
    src.mkdir()
    (src / "MEMORY.md").write_text("# Memory\n\n## New\nincoming text\n", encoding="utf-8")
    report = vault(store).import_(src, strategy="overwrite")
    assert report.counts() == {"overwrite": 1}
    text = store.read("default", "MEMORY.md").text
    assert "## Keep\n<!-- pin -->\nmy pinned words\n" in text and "incoming text" in text and "old text" not in text


def test_default_strategy_keeps_a_differing_file_and_merge_appends_what_is_missing(
        store: WorkspaceStore, tmp_path: Path) -> None:
    mine = "---\nenabled: true\n---\n# Profile\n\n## Food\n- likes tea\n\n## Work\n- engineer\n"
    store.write("default", "PROFILE.md", mine, expected_sha=None, actor="person")
    src = tmp_path / "src"
    src.mkdir()
    (src / "PROFILE.md").write_text("# Profile\n\n## Food\n- likes tea\n- hates coffee\n\n## Pets\n- a cat\n",
                                    encoding="utf-8")
    transfer = vault(store)
    report = transfer.import_(src)
    assert report.counts() == {"conflict": 1} and report.batch is None
    assert store.read("default", "PROFILE.md").text == mine

    report = transfer.import_(src, strategy="merge")
    assert report.counts() == {"merge": 1}
    assert store.read("default", "PROFILE.md").text == (
        "---\nenabled: true\n---\n# Profile\n\n## Food\n- likes tea\n- hates coffee\n\n## Work\n- engineer\n\n"
        "## Pets\n- a cat\n")
    again = transfer.import_(src, strategy="merge")
    assert again.counts() == {"unchanged": 1} and again.batch is None


def test_an_untouched_seed_is_replaced_even_with_skip(store: WorkspaceStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "SOUL.md").write_text("# Soul\nI am a calm assistant.\n", encoding="utf-8")
    (item,) = vault(store).import_(src).items
    assert item.action == "overwrite" and "seed" in item.reason
    assert store.read("default", "SOUL.md").text.endswith("I am a calm assistant.\n")


@pytest.mark.parametrize("name, why", [
    ("../evil.md", "climbs out"),
    ("notes/../../evil.md", "climbs out"),
    ("/etc/evil.md", "absolute"),
    ("C:/evil.md", "absolute"),
    ("..\\evil.md", "climbs out"),
])
def test_zip_slip_and_absolute_entries_refuse_the_whole_archive(store: WorkspaceStore, tmp_path: Path,
                                                                name: str, why: str) -> None:
    archive = make_zip(tmp_path / "bad.zip", {"fine.md": b"# ok\n", name: b"# evil\n"})
    before = tree(store.root)
    with pytest.raises(InvalidInputError, match=why):
        vault(store).import_(archive)
    assert tree(store.root) == before
    assert not (tmp_path / "evil.md").exists()


def test_symlinks_are_refused_in_zips_and_folders(store: WorkspaceStore, tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "link.zip", {"fine.md": b"# ok\n", "MEMORY.md": b"/etc/passwd"},
                       links=("MEMORY.md",))
    before = tree(store.root)
    with pytest.raises(InvalidInputError, match="symbolic link"):
        vault(store).import_(archive)
    folder = tmp_path / "vault"
    folder.mkdir()
    (folder / "fine.md").write_text("# ok\n", encoding="utf-8")
    secret = tmp_path / "secret.md"
    secret.write_text("secret\n", encoding="utf-8")
    os.symlink(secret, folder / "MEMORY.md")
    with pytest.raises(InvalidInputError, match="symbolic link"):
        vault(store).import_(folder)
    assert tree(store.root) == before


def test_unimportable_files_are_reported_and_skipped(store: WorkspaceStore, tmp_path: Path) -> None:
    big = b"# big\n" + b"x" * 2000
    archive = make_zip(tmp_path / "mixed.zip", {
        "Vault/ok.md": b"# fine\n",
        "Vault/photo.png": b"\x89PNG",
        "Vault/latin1.md": "caf\u00e9\n".encode("latin-1"),
        "Vault/big.md": big,
        "Vault/.obsidian/app.json": b"{}",
        "Vault/.obsidian/workspace.md": b"# hidden\n",
        "Vault/100%25.md": b"# odd name\n",
    })
    report = vault(store, limits=Limits(max_file_bytes=1000)).import_(archive)
    by_source = {i.source: i for i in report.items}
    assert by_source["ok.md"].action == "create"  # the zip's single top folder is the import root
    assert "not a Markdown" in by_source["photo.png"].reason
    assert "not UTF-8" in by_source["latin1.md"].reason
    assert "limit" in by_source["big.md"].reason
    assert by_source[".obsidian/"].reason == "hidden file or folder"
    assert "percent" in by_source["100%25.md"].reason
    assert {i.action for i in report.items if i.source != "ok.md"} == {"skip"}
    assert store.read("default", "ok.md").text == "# fine\n"
    assert not store.read("default", "latin1.md").exists


def test_oversized_archive_and_damaged_files_are_refused(store: WorkspaceStore, tmp_path: Path,
                                                          clock: ManualClock) -> None:
    archive = make_zip(tmp_path / "huge.zip", {f"n{i}.md": b"y" * 600 for i in range(5)})
    with pytest.raises(InvalidInputError, match="more than 2000 bytes"):
        vault(store, limits=Limits(max_total_bytes=2000)).import_(archive)
    with pytest.raises(InvalidInputError, match="entries"):
        vault(store, limits=Limits(max_entries=3)).import_(archive)

    exported = vault(store).export("default", tmp_path / "e.zip").out
    with zipfile.ZipFile(exported) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    entries["MEMORY.md"] += b"tampered\n"
    damaged = make_zip(tmp_path / "damaged.zip", entries)
    report = vault(fresh_store(tmp_path, clock)).import_(damaged)
    memory = next(i for i in report.items if i.source == "MEMORY.md")
    assert memory.action == "skip" and "sha256" in memory.reason


def test_dry_run_writes_nothing(store: WorkspaceStore, tmp_path: Path) -> None:
    store.write("default", "MEMORY.md", "# mine\n", expected_sha=None, actor="person")
    src = tmp_path / "src"
    (src / "memory").mkdir(parents=True)
    (src / "MEMORY.md").write_text("# theirs\n", encoding="utf-8")
    (src / "memory" / "2026-11-01.md").write_text("# 2026-11-01\n", encoding="utf-8")
    before = tree(store.root)
    history_before = sorted(p for p in store.state_dir.rglob("*") if "history" in p.parts)
    report = vault(store).import_(src, strategy="overwrite", dry_run=True)
    assert report.dry_run and report.batch is None
    assert {i.source: i.action for i in report.items} == {"MEMORY.md": "overwrite", "memory/2026-11-01.md": "create"}
    assert tree(store.root) == before
    assert sorted(p for p in store.state_dir.rglob("*") if "history" in p.parts) == history_before


def test_undo_of_a_whole_import_restores_everything(filled: WorkspaceStore, tmp_path: Path,
                                                     clock: ManualClock) -> None:
    before = tree(filled.agent_dir("default"))
    src = tmp_path / "src"
    (src / "notes").mkdir(parents=True)
    (src / "MEMORY.md").write_text("# replaced\n" + "## S\n" + "z " * 5000 + "\n## T\nt\n", encoding="utf-8")
    (src / "notes" / "crlf.md").write_text("# new content\n", encoding="utf-8")
    (src / "notes" / "brand-new.md").write_text("# new file\n", encoding="utf-8")
    transfer = vault(filled)
    report = transfer.import_(src, strategy="overwrite")
    assert report.batch.startswith("import-default-") and report.written == 3
    assert tree(filled.agent_dir("default")) != before
    # The same import again changes nothing — and archives the cut tail of MEMORY.md no second time.
    (cut,) = next(i for i in report.items if i.source == "MEMORY.md").archived
    archive = filled.read("default", cut).text
    second = transfer.import_(src, strategy="overwrite")
    assert second.batch is None and second.written == 0
    assert "z z" in archive and filled.read("default", cut).text == archive
    filled.undo_batch(report.batch)
    assert tree(filled.agent_dir("default")) == before


def test_two_imports_in_one_second_get_two_runs(store: WorkspaceStore, tmp_path: Path) -> None:
    for n in (1, 2):
        src = tmp_path / f"src{n}"
        src.mkdir()
        (src / f"n{n}.md").write_text(f"# {n}\n", encoding="utf-8")
    transfer = vault(store)
    first = transfer.import_(tmp_path / "src1")
    second = transfer.import_(tmp_path / "src2")
    assert first.batch != second.batch
    store.undo_batch(second.batch)
    assert store.read("default", "n1.md").exists and not store.read("default", "n2.md").exists


def test_export_refuses_to_clobber_or_to_write_inside_the_workspace(store: WorkspaceStore, tmp_path: Path) -> None:
    transfer = vault(store)
    transfer.export("default", tmp_path / "a.zip")
    with pytest.raises(InvalidInputError, match="already exists"):
        transfer.export("default", tmp_path / "a.zip")
    with pytest.raises(InvalidInputError, match="inside the workspace"):
        transfer.export("default", store.root / "default" / "backup")


def test_owner_files_round_trip_into_their_owner(tmp_path: Path, clock: ManualClock) -> None:
    store = WorkspaceStore(tmp_path / "ws", clock=clock, owner_isolation=True)
    store.ensure_agent("default")
    store.write("default", "PROFILE.md", "# Bob\n- likes jazz\n", expected_sha=None, actor="person", owner="bob@x")
    out = vault(store).export("default", tmp_path / "all.zip").out
    other = WorkspaceStore(tmp_path / "ws2", clock=clock, owner_isolation=True)
    other.ensure_agent("default")
    report = vault(other).import_(out)
    bob = next(i for i in report.items if i.owner == "bob@x")
    assert bob.rel == "PROFILE.md" and bob.action == "create"
    assert other.read("default", "PROFILE.md", owner="bob@x").text == "# Bob\n- likes jazz\n"
    assert tree(other.agent_dir("default")) == tree(store.agent_dir("default"))


def test_export_reports_what_it_leaves_out(store: WorkspaceStore, tmp_path: Path) -> None:
    base = store.agent_dir("default")
    (base / "photo.png").write_bytes(b"\x89PNG")
    (base / "notes").mkdir()
    (base / "notes" / "real.md").write_text("# Real\n", encoding="utf-8")
    (base / "notes" / "link.md").symlink_to(base / "notes" / "real.md")
    (base / ".obsidian").mkdir()
    (base / ".obsidian" / "workspace.md").write_text("editor state\n", encoding="utf-8")
    result = vault(store).export("default", tmp_path / "e.zip")
    assert dict(result.skipped) == {"photo.png": "not a Markdown (.md) file",
                                    "notes/link.md": "symbolic link, not followed"}
    assert {f.path for f in result.files} == set(tree(base)) - {"photo.png", "notes/link.md", ".obsidian/workspace.md"}


def test_export_keeps_owner_folders_and_ignores_an_owner_without_isolation(tmp_path: Path,
                                                                         clock: ManualClock) -> None:
    isolated = WorkspaceStore(tmp_path / "ws", clock=clock, owner_isolation=True)
    isolated.ensure_agent("default")
    isolated.write("default", "PROFILE.md", "# Bob\n", expected_sha=None, actor="person", owner="bob@x")
    isolated.write("default", "PROFILE.md", "# Eve\n", expected_sha=None, actor="person", owner="eve")
    bob = vault(isolated).export("default", tmp_path / "bob.zip", owner="bob@x")
    assert bob.owner == "bob@x" and {f.path for f in bob.files} == {"PROFILE.md"}
    with zipfile.ZipFile(bob.out) as zf:
        assert zf.read("PROFILE.md") == b"# Bob\n"
    # The same folder without isolation: nobody's files are left behind, and no owner is picked.
    plain = WorkspaceStore(tmp_path / "ws", clock=clock)
    result = vault(plain).export("default", tmp_path / "all.zip", owner="bob@x")
    assert result.owner is None
    assert {f.path for f in result.files} | {p for p, _ in result.skipped} == set(tree(plain.agent_dir("default")))
    assert "owners/eve/PROFILE.md" in {f.path for f in result.files}
    assert "bob" not in vault(plain).default_export_path("default", result.owner).name


def test_cli_export_import_and_undo_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture) -> None:
    from tests.support.isolation import no_config_here

    no_config_here(monkeypatch, tmp_path)  # from tmp_path, on tmp_path/workspace, no settings file
    assert main(["init"]) == 0
    assert main(["write", "default", "memory/2026-11-02.md", "--text", "# A\n"]) == 0
    assert main(["export", "--out", str(tmp_path / "out.zip")]) == 0
    assert main(["write", "default", "memory/2026-11-02.md", "--text", "# A changed by hand\n"]) == 0
    capsys.readouterr()
    assert main(["import", "out.zip", "--agent", "copy", "--dry-run"]) == 3  # never created: how to create it
    assert "mateclaw-mem init copy" in capsys.readouterr().err and not (tmp_path / "workspace/copy").exists()
    assert main(["init", "copy"]) == 0
    assert main(["import", "out.zip", "--agent", "copy", "--dry-run"]) == 0
    assert "dry run" in capsys.readouterr().out and not (tmp_path / "workspace/copy/memory").exists()
    assert main(["import", "out.zip", "--json"]) == 10  # back into default: the hand edit wins, nothing written
    data = json.loads(capsys.readouterr().out)
    assert {f["file"]: f["action"] for f in data["files"]}["memory/2026-11-02.md"] == "conflict"
    assert data["run"] is None
    assert main(["import", "out.zip", "--agent", "copy", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert (tmp_path / "workspace/copy/memory/2026-11-02.md").read_text(encoding="utf-8").endswith("# A\n")
    assert main(["undo", "copy", "--run", run]) == 0
    assert not (tmp_path / "workspace/copy/memory/2026-11-02.md").exists()
    code = main(["import", str(tmp_path / "nope.zip")])
    assert code == 3 and "does not exist" in capsys.readouterr().err


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_exported_zip_entries_are_plain_files(store: WorkspaceStore, tmp_path: Path) -> None:
    out = vault(store).export("default", tmp_path / "p.zip").out
    with zipfile.ZipFile(out) as zf:
        assert all(stat.S_ISREG(i.external_attr >> 16) for i in zf.infolist())


@pytest.mark.parametrize("as_zip", [False, True])
def test_a_pathologically_nested_manifest_is_refused_with_a_reason(store: WorkspaceStore, tmp_path: Path,
                                                                   as_zip: bool) -> None:
    deep = ('{"files": ' + "[" * 100_000 + "]" * 100_000 + "}").encode()
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "manifest.json").write_bytes(deep)
    (folder / "MEMORY.md").write_text("# M\n\n## kept\n\nnot imported\n", encoding="utf-8")
    source: Path = folder
    if as_zip:
        source = tmp_path / "export.zip"
        with zipfile.ZipFile(source, "w") as zf:
            zf.writestr("manifest.json", deep)
            zf.writestr("MEMORY.md", "# M\n")
    before = store.read("default", "MEMORY.md").text
    with pytest.raises(InvalidInputError, match=r"manifest\.json nests 100001 levels deep"):
        vault(store).import_(source)
    assert store.read("default", "MEMORY.md").text == before
    # Brackets inside strings are text, not nesting.
    (folder / "manifest.json").write_text(json.dumps({"files": [], "note": "[" * 1000}), encoding="utf-8")
    vault(store).import_(folder, dry_run=True)
