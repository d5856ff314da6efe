"""The file-memory command set (view, create, str_replace, insert, delete, rename) over the real store."""

from __future__ import annotations

import os

import pytest

from mateclaw_mem.errors import ConflictError, InvalidInputError, InvalidPathError, NotFoundError
from mateclaw_mem.workspace.file_commands import FileCommands


@pytest.fixture
def cmds(services) -> FileCommands:
    services.store.ensure_agent("default")
    return services.file_commands


def test_paths_map_memories_onto_the_agent_dir(cmds: FileCommands, services) -> None:
    cmds.create("default", "/memories/notes/today.md", "first\nsecond\n", actor="mcp")
    path = services.store.agent_dir("default") / "notes" / "today.md"
    assert path.exists()
    assert "first\nsecond\n" in path.read_text(encoding="utf-8")
    assert cmds.relative("/memories") == "" and cmds.relative("notes/today.md") == "notes/today.md"


@pytest.mark.parametrize(
    "bad",
    ["/memories/../outside.md", "/etc/passwd.md", "/memories/.mateclaw/log.md", "/memories/a/../../b.md",
     "/memories/x.txt", "/memories/%2e%2e/x.md", "C:/x.md", "/memories/a\\..\\b.md"],
)
def test_escapes_and_non_memory_files_are_refused(cmds: FileCommands, services, bad: str) -> None:
    with pytest.raises(InvalidPathError):
        cmds.create("default", bad, "x", actor="mcp")
    assert not (services.settings.workspace / "outside.md").exists()


def test_a_symlink_out_of_the_workspace_is_refused(cmds: FileCommands, services, tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, services.store.agent_dir("default") / "link")
    with pytest.raises(InvalidPathError):
        cmds.create("default", "/memories/link/x.md", "x", actor="mcp")
    assert list(outside.iterdir()) == []


def test_view_numbers_lines_and_honours_ranges(cmds: FileCommands) -> None:
    cmds.create("default", "/memories/n.md", "---\nenabled: false\n---\none\ntwo\nthree\n", actor="mcp")
    full = cmds.view("default", "/memories/n.md").text
    assert "     4\tone" in full and "     6\tthree" in full
    part = cmds.view("default", "/memories/n.md", view_range=(5, -1)).text
    assert "two" in part and "three" in part and "one" not in part
    with pytest.raises(InvalidInputError):
        cmds.view("default", "/memories/n.md", view_range=(9, 10))
    folder = cmds.view("default", "/memories").text
    assert "/memories/n.md" in folder and "/memories/MEMORY.md" in folder
    with pytest.raises(NotFoundError):
        cmds.view("default", "/memories/missing.md")


def test_create_new_file_starts_disabled_and_replace_keeps_frontmatter(cmds: FileCommands, services) -> None:
    assert "created" in cmds.create("default", "/memories/n.md", "hello\n", actor="mcp").text
    assert next(f for f in services.tools.list("default") if f.rel == "n.md").enabled is False
    services.tools.set_enabled("default", "n.md", True, actor="person")
    assert "replaced" in cmds.create("default", "/memories/n.md", "bye\n", actor="mcp").text
    snap = services.store.read("default", "n.md")
    assert snap.body == "bye\n" and "enabled: true" in snap.text


def test_str_replace_needs_exactly_one_occurrence(cmds: FileCommands, services) -> None:
    cmds.create("default", "/memories/n.md", "qq mid qq\n", actor="mcp")
    with pytest.raises(InvalidInputError, match="2 times"):
        cmds.str_replace("default", "/memories/n.md", "qq", "x", actor="mcp")
    with pytest.raises(InvalidInputError, match="not found"):
        cmds.str_replace("default", "/memories/n.md", "zzz", "x", actor="mcp")
    cmds.str_replace("default", "/memories/n.md", "mid", "MID", actor="mcp")
    assert services.store.read("default", "n.md").body == "qq MID qq\n"


def test_insert_counts_lines_as_view_shows_them(cmds: FileCommands, services) -> None:
    cmds.create("default", "/memories/n.md", "---\nenabled: false\n---\none\nthree\n", actor="mcp")
    cmds.insert("default", "/memories/n.md", 4, "two", actor="mcp")
    cmds.insert("default", "/memories/n.md", 3, "# Top", actor="mcp")
    text = services.store.read("default", "n.md").text
    assert text == "---\nenabled: false\n---\n# Top\none\ntwo\nthree\n"
    with pytest.raises(InvalidInputError, match="frontmatter"):
        cmds.insert("default", "/memories/n.md", 0, "x", actor="mcp")
    with pytest.raises(InvalidInputError, match="past the end"):
        cmds.insert("default", "/memories/n.md", 99, "x", actor="mcp")
    with pytest.raises(NotFoundError):
        cmds.insert("default", "/memories/missing.md", 0, "x", actor="mcp")


def test_delete_and_rename_files_and_folders_keep_history(cmds: FileCommands, services) -> None:
    cmds.create("default", "/memories/p/a.md", "A\n", actor="mcp")
    cmds.create("default", "/memories/p/sub/b.md", "B\n", actor="mcp")
    cmds.rename("default", "/memories/p", "/memories/q", actor="mcp")
    assert {f.rel for f in services.tools.list("default", prefix="q/")} == {"q/a.md", "q/sub/b.md"}
    assert services.tools.list("default", prefix="p/") == []
    cmds.create("default", "/memories/r.md", "R\n", actor="mcp")
    with pytest.raises(ConflictError):
        cmds.rename("default", "/memories/r.md", "/memories/q/a.md", actor="mcp")
    cmds.delete("default", "/memories/q", actor="mcp")
    assert services.tools.list("default", prefix="q/") == []
    services.store.undo("default", "q/a.md")  # a delete is undoable
    assert services.store.read("default", "q/a.md").body == "A\n"
    with pytest.raises(InvalidPathError):
        cmds.delete("default", "/memories", actor="mcp")
    with pytest.raises(NotFoundError):
        cmds.delete("default", "/memories/nothing-here", actor="mcp")


@pytest.mark.parametrize("bad, says", [
    ("/memories/a//b.md", "empty"),
    ("/memories/ /x.md", "blank"),
    ("/memories/notes/ /x.md", "blank"),
    ("a//b.md", "empty"),
])
def test_an_empty_or_blank_path_part_is_refused_naming_the_path(cmds: FileCommands, services, bad: str,
                                                                  says: str) -> None:
    with pytest.raises(InvalidPathError) as caught:
        cmds.create("default", bad, "x\n", actor="mcp")
    assert bad.removeprefix("/memories/") in str(caught.value) and says in str(caught.value)
    agent_dir = services.store.agent_dir("default")
    assert not (agent_dir / " ").exists() and not (agent_dir / "a").exists()
    assert not (agent_dir / "notes" / " ").exists()


def test_a_trailing_slash_names_a_folder_and_never_replaces_the_file(cmds: FileCommands, services) -> None:
    cmds.create("default", "/memories/keep.md", "original\n", actor="mcp")
    for command in (lambda: cmds.create("default", "/memories/keep.md/", "replaced\n", actor="mcp"),
                    lambda: cmds.str_replace("default", "/memories/keep.md/", "original", "x", actor="mcp")):
        with pytest.raises(InvalidPathError) as caught:
            command()
        assert "/memories/keep.md/" in str(caught.value) and "folder" in str(caught.value)
    assert "original" in (services.store.agent_dir("default") / "keep.md").read_text(encoding="utf-8")
    with pytest.raises(InvalidPathError):
        services.store.write("default", "keep.md/", "replaced\n", expected_sha=None, actor="api")
