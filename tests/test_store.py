from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from mateclaw_mem.errors import ConflictError, NotFoundError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.workspace.atomic import clean_temp_files
from mateclaw_mem.workspace.store import WorkspaceStore


def test_seeded_files_have_frontmatter_and_useful_content(store: WorkspaceStore) -> None:
    files = {f.rel: f for f in store.list_files("default")}
    assert [f.rel for f in store.list_files("default")] == ["AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"]
    assert all(f.enabled for f in files.values())
    agents = store.read("default", "AGENTS.md").text
    assert "<!-- pin -->" in agents and "Read before you write" in agents
    assert frontmatter.parse(agents).meta == {"enabled": True, "sort_order": 0}


def test_stale_machine_write_after_hand_edit_is_refused_and_the_edit_survives(store: WorkspaceStore) -> None:
    seen = store.read("default", "MEMORY.md")  # the machine reads...
    path = store.path("default", "MEMORY.md")
    hand = seen.text + "\n## My edit\nwritten by a person in an editor\n"
    path.write_text(hand, encoding="utf-8")  # ...a person edits in their editor...
    with pytest.raises(ConflictError, match="changed since it was read"):
        store.write("default", "MEMORY.md", seen.text + "\n## Machine\nx\n", expected_sha=seen.sha, actor="extraction")
    assert path.read_text(encoding="utf-8") == hand


def test_create_only_write_refuses_an_existing_file(store: WorkspaceStore) -> None:
    with pytest.raises(ConflictError):
        store.write("default", "MEMORY.md", "x", expected_sha="", actor="tool")


_WRITER = textwrap.dedent(
    """
    import sys
    from datetime import datetime, timezone
    from pathlib import Path
    from mateclaw_mem.clock import SystemClock
    from mateclaw_mem.workspace.store import WorkspaceStore
    store = WorkspaceStore(Path(sys.argv[1]), clock=SystemClock(timezone.utc), ceilings={})
    a, b = "A" * 400_000 + "\\n", "B" * 400_000 + "\\n"
    print("ready", flush=True)
    i = 0
    while True:
        store.write("default", "big.md", a if i % 2 else b, expected_sha=None, actor="person")
        i += 1
    """
)


def test_killing_a_writer_never_leaves_a_torn_file(store: WorkspaceStore, workspace: Path) -> None:
    path = store.path("default", "big.md")
    valid = {"A" * 400_000 + "\n", "B" * 400_000 + "\n"}
    for delay in (0.05, 0.11, 0.17, 0.23, 0.31, 0.37):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(workspace)], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if path.exists():
            assert path.read_text() in valid
    assert path.exists()
    clean_temp_files(workspace)
    assert not list(path.parent.glob(".big.md.*.tmp"))


def test_machine_write_over_ceiling_keeps_head_and_archives_tail(store: WorkspaceStore) -> None:
    snap = store.read("default", "MEMORY.md")
    sections = "".join(f"## Topic {i}\n" + f"fact {i} " * 150 + "\n\n" for i in range(12))
    result = store.write("default", "MEMORY.md", snap.text + sections, expected_sha=snap.sha, actor="dreaming")
    assert result.archived == ("memory/archive/MEMORY-2026-11-30.md",)
    body = store.read("default", "MEMORY.md").body
    assert len(body) <= 8000 and "## Topic 0\n" in body and "## Topic 11\n" not in body
    assert body.count("[mateclaw]") == 1
    archive = store.read("default", "memory/archive/MEMORY-2026-11-30.md").text
    for i in range(12):
        assert (f"## Topic {i}\n" in body) != (f"## Topic {i}\n" in archive), f"Topic {i} lost or duplicated"
    assert frontmatter.parse(archive).meta["enabled"] is False
    assert frontmatter.parse(store.read("default", "MEMORY.md").text).meta["sort_order"] == 3


def test_a_persons_own_write_is_never_cut(store: WorkspaceStore) -> None:
    big = store.read("default", "MEMORY.md").text + "## Long\n" + "mine " * 3000 + "\n"
    store.write("default", "MEMORY.md", big, expected_sha=None, actor="person")
    assert store.read("default", "MEMORY.md").text == big
    info = {f.rel: f for f in store.list_files("default")}["MEMORY.md"]
    assert info.over_budget


def test_pinned_section_survives_machine_rewrite_and_ceiling(store: WorkspaceStore) -> None:
    pinned = "## Never forget\n<!-- pin -->\nThe cat is called Miso.\n"
    snap = store.read("default", "MEMORY.md")
    store.write("default", "MEMORY.md", snap.text + pinned, expected_sha=None, actor="person")
    snap = store.read("default", "MEMORY.md")
    rewrite = "# MEMORY\n\n" + "".join(f"## New {i}\n" + "z " * 800 + "\n" for i in range(10))
    store.write("default", "MEMORY.md", rewrite, expected_sha=snap.sha, actor="dreaming")
    assert pinned in store.read("default", "MEMORY.md").text


def test_undo_restores_byte_for_byte_and_is_itself_undoable(store: WorkspaceStore) -> None:
    original = store.read("default", "PROFILE.md")
    odd = original.text + "## Ünïcode\r\n- tabs:\tand trailing spaces   \r\n"
    store.write("default", "PROFILE.md", odd, expected_sha=original.sha, actor="person")
    mid = store.read("default", "PROFILE.md")
    store.write("default", "PROFILE.md", "replaced\n", expected_sha=mid.sha, actor="extraction")
    replaced = store.read("default", "PROFILE.md").body
    assert replaced.startswith("replaced\n") and "## Ünïcode" in replaced  # a machine never drops a person's section
    store.undo("default", "PROFILE.md")
    assert store.path("default", "PROFILE.md").read_bytes() == odd.encode()
    store.undo("default", "PROFILE.md")  # undo the undo
    assert store.read("default", "PROFILE.md").body == replaced
    versions = store.history("default", "PROFILE.md")
    assert not versions[0].existed  # the seeding created the file
    store.undo("default", "PROFILE.md", version=versions[1].version)  # back to the seed
    assert store.read("default", "PROFILE.md").text == original.text
    with pytest.raises(NotFoundError):
        store.undo("default", "PROFILE.md", version=999)


def test_history_retention_is_bounded(workspace: Path, clock) -> None:
    store = WorkspaceStore(workspace, clock=clock, history_keep=5)
    store.ensure_agent("default")
    for i in range(12):
        store.write("default", "notes.md", f"v{i}\n", expected_sha=None, actor="person")
    versions = store.history("default", "notes.md")
    assert len(versions) == 5 and versions[-1].version == 12
    assert len(list((workspace / ".mateclaw/history/default/notes.md").glob("*.md"))) == 5


def test_undo_a_whole_run(store: WorkspaceStore) -> None:
    before_mem = store.read("default", "MEMORY.md").text
    before_prof = store.read("default", "PROFILE.md").text
    store.update("default", "MEMORY.md", lambda t: t + "## Dream\nx\n", actor="dreaming", batch="run-1")
    store.update("default", "PROFILE.md", lambda t: t + "- k: v\n", actor="dreaming", batch="run-1")
    store.write("default", "DREAMS.md", "# diary\n", expected_sha="", actor="dreaming", batch="run-1")
    store.undo_batch("run-1")
    assert store.read("default", "MEMORY.md").text == before_mem
    assert store.read("default", "PROFILE.md").text == before_prof
    assert not store.read("default", "DREAMS.md").exists


def test_undo_run_refuses_when_a_person_edited_since(store: WorkspaceStore) -> None:
    store.update("default", "MEMORY.md", lambda t: t + "## Dream\nx\n", actor="dreaming", batch="run-2")
    path = store.path("default", "MEMORY.md")
    path.write_text(path.read_text() + "hand\n")
    with pytest.raises(ConflictError):
        store.undo_batch("run-2")
    assert path.read_text().endswith("hand\n")


def test_daily_note_is_append_only_with_heading(store: WorkspaceStore, clock) -> None:
    store.append_daily("default", "Morning", "ran 5 km", actor="extraction")
    clock.advance(minutes=90)
    store.append_daily("default", "Lunch", "ate ramen", actor="extraction")
    note = store.read("default", "memory/2026-11-30.md")
    assert frontmatter.parse(note.text).meta == {"enabled": False}
    assert note.body == "# 2026-11-30\n\n## 09:15 Morning\n\nran 5 km\n\n## 10:45 Lunch\n\nate ramen\n"


def test_concurrent_updates_lose_nothing(store: WorkspaceStore) -> None:
    def worker(n: int) -> None:
        for i in range(20):
            store.update("default", "log.md", lambda t, n=n, i=i: t + f"- {n}:{i}\n", actor="tool")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = [ln for ln in store.read("default", "log.md").text.splitlines() if ln.startswith("- ")]
    assert sorted(lines) == sorted(f"- {n}:{i}" for n in range(8) for i in range(20))


_CROSS = textwrap.dedent(
    """
    import sys
    from datetime import timezone
    from pathlib import Path
    from mateclaw_mem.clock import SystemClock
    from mateclaw_mem.workspace.store import WorkspaceStore
    store = WorkspaceStore(Path(sys.argv[1]), clock=SystemClock(timezone.utc))
    for i in range(30):
        store.update("default", "shared.md", lambda t: t + f"- {sys.argv[2]}:{i}\\n", actor="tool")
    """
)


def test_lock_holds_across_processes(store: WorkspaceStore, workspace: Path) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", _CROSS, str(workspace), str(n)]) for n in range(3)]
    assert [p.wait() for p in procs] == [0, 0, 0]
    lines = [ln for ln in store.read("default", "shared.md").text.splitlines() if ln.startswith("- ")]
    assert len(lines) == 90 and len(set(lines)) == 90


def test_owner_isolation_keeps_personal_memory_apart(workspace: Path, clock) -> None:
    store = WorkspaceStore(workspace, clock=clock, owner_isolation=True)
    store.ensure_agent("default")
    store.ensure_agent("default", owner="alice")
    store.update("default", "MEMORY.md", lambda t: t + "alice secret\n", actor="tool", owner="alice")
    assert "alice secret" not in store.read("default", "MEMORY.md").text
    assert "alice secret" not in store.read("default", "MEMORY.md", owner="alice2").text
    # PROFILE.md is TEAM, as in the seed (issue 18): an owner is seeded a MEMORY.md of their own only.
    assert [f.rel for f in store.list_files("default", owner="alice")] == ["MEMORY.md"]
    assert "owners" not in {f.rel.split("/")[0] for f in store.list_files("default")}


def test_non_utf8_file_is_a_clear_error(store: WorkspaceStore) -> None:
    store.path("default", "latin.md").write_bytes(b"caf\xe9\n")
    from mateclaw_mem.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="not UTF-8"):
        store.read("default", "latin.md")
    assert "latin.md" not in {f.rel for f in store.list_files("default")}


def test_listeners_see_every_write(store: WorkspaceStore) -> None:
    events = []
    store.subscribe(events.append)
    store.write("default", "a.md", "x\n", expected_sha="", actor="tool")
    store.delete("default", "a.md", expected_sha=None, actor="tool")
    assert [(e.rel, bool(e.sha)) for e in events] == [("a.md", True), ("a.md", False)]
    os.environ.pop("UNUSED", None)
