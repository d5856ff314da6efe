"""The parts `status` is made of, each against the slow way it replaced: a count of the files on
disk without a stat of each (`count_files` against `walk_files`), one listing per report
(`one_listing`), and the newest kept versions of every file (`History.tails` against `list`)."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from mateclaw_mem.workspace.history import History, Version
from mateclaw_mem.workspace.month_archive import ARCHIVE_DIR

NAMES = ("a.md", "b.md", ".hidden.md", "notes.txt", "2026-01.md.gz", "x.md.swp", "~y.md")


def _services(tmp_path: Path, isolation: bool) -> Services:
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text(f"timezone: Europe/Berlin\nowner-isolation: {str(isolation).lower()}\n", encoding="utf-8")
    svc = Services(load_settings(cfg, tmp_path / "ws"))
    svc.store.ensure_agent("default")
    svc.store.ensure_agent("other")
    return svc


@pytest.mark.parametrize("seed", range(8))
def test_the_count_of_files_on_disk_is_what_walking_them_yields(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    svc = _services(tmp_path, isolation=seed % 2 == 0)
    root = svc.store.root
    folders = ["default", "default/memory", f"default/{ARCHIVE_DIR}", "default/.obsidian", "default/owners/bob",
               "default/owners/bob/memory", "other/notes", "global", "global/memory", "default/owners"]
    for _ in range(rng.randint(5, 60)):
        path = root / rng.choice(folders) / rng.choice(NAMES)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"# x\n")
    for archives in (False, True):
        assert svc.store.count_files(archives=archives) == len(list(svc.store.walk_files(archives=archives)))
    svc.close()


def test_one_listing_lists_each_folder_once_in_its_thread_only(tmp_path: Path) -> None:
    svc = _services(tmp_path, isolation=False)
    store = svc.store
    before = [f.rel for f in store.list_files("default")]
    seen_elsewhere: list[list[str]] = []
    with store.one_listing():
        first = [f.rel for f in store.list_files("default")]
        (store.agent_dir("default") / "new.md").write_text("# new\n", encoding="utf-8")
        with store.one_listing():  # nested: the outer block's listing still holds
            assert [f.rel for f in store.list_files("default")] == first == before
        # another thread is outside the block: it lists the folder as it is now
        worker = threading.Thread(target=lambda: seen_elsewhere.append([f.rel for f in store.list_files("default")]))
        worker.start()
        worker.join()
        mine = store.list_files("default")
        mine.clear()  # a caller's copy: emptying it leaves the block's listing whole
        assert [f.rel for f in store.list_files("default")] == first
    assert "new.md" in seen_elsewhere[0]
    assert "new.md" in [f.rel for f in store.list_files("default")]  # the block is over
    svc.close()


def _record(n: int) -> Version:
    return Version(version=0, sha=f"s{n}", replaced_by=f"r{n}", at=f"2026-01-01T00:00:{n:02d}", actor="extract",
                   reason=f"write {n}", size=1)


def test_the_tails_are_the_newest_versions_as_listing_them_all_gives(tmp_path: Path) -> None:
    history = History(tmp_path / "history")
    rels = ["memory/2026-01-01.md", "memory/2026-01-02.md", "notes/a.md", "AGENTS.md", "never/kept.md"]
    rng = random.Random(7)
    for _ in range(3):
        for _ in range(rng.randint(1, 20)):
            history.save("default", rng.choice(rels[:4]), b"old", _record(rng.randint(0, 59)))
        for last in (1, 3):
            assert history.tails("default", rels, last) == [history.list("default", r)[-last:] for r in rels]
    # a torn last line (a crash mid-append) hides nothing before it
    torn = tmp_path / "history" / "default" / "AGENTS.md" / "versions.jsonl"
    with torn.open("a", encoding="utf-8") as fh:
        fh.write('{"version": 99, "sha": "cut')
    assert history.tails("default", ["AGENTS.md"], 3) == [history.list("default", "AGENTS.md")[-3:]]
    assert history.tails("default", ["AGENTS.md"], 3)[0]  # still the versions before the torn line
    assert history.tails("nobody", rels, 3) == [[] for _ in rels]


def test_the_index_counts_follow_every_commit_of_any_connection(tmp_path: Path) -> None:
    """`counts()` is kept per reading connection until the database changes (/health asks it on
    every call): a store write, a delete and another process's commit must each show at once."""
    import sqlite3

    svc = _services(tmp_path, isolation=False)
    index = svc.file_index
    index.rebuild()
    before = index.counts()
    assert index.counts() == before
    written = svc.store.write("default", "notes/extra.md", "# x\n\n## One\n\nalpha\n\n## Two\n\nbeta\n",
                              expected_sha=None, actor="person")
    after = index.counts()
    assert after["files"] == before["files"] + 1 and after["chunks"] >= before["chunks"] + 2
    svc.store.delete("default", "notes/extra.md", expected_sha=written.sha, actor="person")
    assert index.counts() == before
    other = sqlite3.connect(svc.settings.index_db)
    with other:
        other.execute("DELETE FROM files WHERE rel = 'AGENTS.md' AND agent = 'other'")
    other.close()
    assert index.counts()["files"] == before["files"] - 1
    svc.close()
