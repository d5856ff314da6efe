from __future__ import annotations

import os
from pathlib import Path

import pytest

from mateclaw_mem.errors import InvalidPathError
from mateclaw_mem.workspace.paths import check_agent, owner_dirname
from mateclaw_mem.workspace.store import WorkspaceStore

HOSTILE = {
    "/etc/passwd.md": "absolute",
    "../escape.md": "'..'",
    "memory/../../escape.md": "'..'",
    "%2e%2e/escape.md": "percent-encoded",
    "..%2fescape.md": "percent-encoded",
    "notes.txt": "not a Markdown file",
    "bad\x00name.md": "NUL or control",
    "tab\tname.md": "NUL or control",
    "a" * 10_000 + ".md": "characters long",
    ".mateclaw/state.md": "hidden",
    "C:/Windows/x.md": "absolute",
    "memory\\x.md": "backslash",
    "": "empty",
}


@pytest.mark.parametrize("rel,rule", list(HOSTILE.items()), ids=list(range(len(HOSTILE))))
def test_hostile_paths_are_refused_naming_the_rule(store: WorkspaceStore, rel: str, rule: str) -> None:
    with pytest.raises(InvalidPathError) as err:
        store.write("default", rel, "x", expected_sha=None, actor="tool")
    assert rule in err.value.message
    with pytest.raises(InvalidPathError):
        store.read("default", rel)


def test_symlink_out_of_the_workspace_is_refused(store: WorkspaceStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret")
    os.symlink(outside, store.agent_dir("default") / "linked")
    with pytest.raises(InvalidPathError, match="outside"):
        store.read("default", "linked/secret.md")
    with pytest.raises(InvalidPathError, match="outside"):
        store.write("default", "linked/new.md", "x", expected_sha=None, actor="tool")
    assert not (outside / "new.md").exists()


def test_agent_names_and_owner_keys() -> None:
    assert check_agent("default") == "default"
    for bad in ("", "../x", "a/b", ".hidden", "x" * 65):
        with pytest.raises(InvalidPathError):
            check_agent(bad)
    # Owner keys that share a prefix or contain separators map to distinct single folder names.
    names = {owner_dirname(o) for o in ("bench:r:conv-2", "bench:r:conv-26", "a/b", "..", "user@example.com")}
    assert len(names) == 5
    assert all("/" not in n and not n.startswith(".") for n in names)


def test_an_agent_folder_that_links_outside_is_refused(store: WorkspaceStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "MEMORY.md").write_text("not ours")
    os.symlink(outside, store.root / "linked")
    for call in (
        lambda: store.read("linked", "MEMORY.md"),
        lambda: store.write("linked", "memory/new.md", "x", expected_sha=None, actor="tool"),
        lambda: store.list_files("linked"),
        lambda: store.ensure_agent("linked"),
    ):
        with pytest.raises(InvalidPathError, match="outside the workspace"):
            call()
    assert sorted(p.name for p in outside.iterdir()) == ["MEMORY.md"]
    assert "linked" not in store.agents() and "default" in store.agents()


def test_an_owner_folder_that_links_outside_is_refused(workspace: Path, clock, tmp_path: Path) -> None:
    store = WorkspaceStore(workspace, clock=clock, owner_isolation=True)
    store.ensure_agent("default")
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "default" / "owners").mkdir()
    os.symlink(outside, store.root / "default" / "owners" / "alice")
    with pytest.raises(InvalidPathError, match="outside the workspace"):
        store.write("default", "MEMORY.md", "x", expected_sha=None, actor="tool", owner="alice")
    assert list(outside.iterdir()) == []


def test_an_agent_folder_linking_into_the_state_folder_is_refused(store: WorkspaceStore) -> None:
    os.symlink(store.state_dir, store.root / "sneaky")
    with pytest.raises(InvalidPathError, match="hidden state folder"):
        store.write("sneaky", "notes.md", "x", expected_sha=None, actor="tool")
    assert not (store.state_dir / "notes.md").exists()


def test_an_agent_folder_that_links_to_another_agent_is_refused(store: WorkspaceStore) -> None:
    store.ensure_agent("default")
    before = (store.root / "default" / "MEMORY.md").read_text(encoding="utf-8")
    os.symlink(store.root / "default", store.root / "twin")
    for call in (
        lambda: store.read("twin", "MEMORY.md"),
        lambda: store.write("twin", "MEMORY.md", "twin's words", expected_sha=None, actor="tool"),
        lambda: store.list_files("twin"),
        lambda: store.ensure_agent("twin"),
    ):
        with pytest.raises(InvalidPathError, match="'twin' is a symbolic link to 'default'"):
            call()
    assert (store.root / "default" / "MEMORY.md").read_text(encoding="utf-8") == before
    assert "twin" not in store.agents() and "default" in store.agents()


def test_an_agent_folder_swapped_for_a_link_after_reads_is_refused(store: WorkspaceStore) -> None:
    # Reads resolve one path when the file is plainly inside its agent's folder (workspace.paths
    # `agent_file`); a folder that becomes a link after they were served must still be refused.
    store.ensure_agent("default")
    store.ensure_agent("other")
    assert store.read("other", "MEMORY.md").text
    (store.root / "other").rename(store.root / "other-moved")
    os.symlink(store.root / "default", store.root / "other")
    with pytest.raises(InvalidPathError, match="'other' is a symbolic link to 'default'"):
        store.read("other", "MEMORY.md")
    with pytest.raises(InvalidPathError, match="'other' is a symbolic link to 'default'"):
        store.write("other", "MEMORY.md", "x", expected_sha=None, actor="tool")


def test_an_owner_folder_that_links_to_another_owner_is_refused(workspace: Path, clock) -> None:
    store = WorkspaceStore(workspace, clock=clock, owner_isolation=True)
    store.ensure_agent("default")
    store.write("default", "MEMORY.md", "alice's\n", expected_sha=None, actor="tool", owner="alice")
    alice = store.agent_dir("default", "alice")
    bob = alice.parent / owner_dirname("bob")
    os.symlink(alice, bob)
    for call in (
        lambda: store.read("default", "MEMORY.md", owner="bob"),
        lambda: store.list_files("default", owner="bob"),
        lambda: store.write("default", "MEMORY.md", "bob's\n", expected_sha=None, actor="tool", owner="bob"),
    ):
        with pytest.raises(InvalidPathError, match="is a symbolic link to 'default/owners/"):
            call()
    assert (alice / "MEMORY.md").read_text(encoding="utf-8").endswith("alice's\n")
