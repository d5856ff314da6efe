"""The watcher keeps the index fresh: other processes' writes, hand deletes, own writes recognised,
temp files ignored, periodic reconcile, a dead observer restarted and reported."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from mateclaw_mem.api.app import create_app
from mateclaw_mem.clock import ManualClock
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.runtime.watcher import Watcher, ignored
from tests.support.server import ApiServer

PERSON = "person"
TIMEOUT = 15.0  # generous: we wait for an outcome, we never assert how long it took


def eventually(check: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def found(svc: Services, query: str) -> list[str]:
    return [h.file for h in svc.search.search(query, record=False).hits]


@pytest.fixture
def svc(services: Services) -> Iterator[Services]:
    services.store.ensure_agent("default")
    (services.settings.workspace / "default" / "memory").mkdir()
    services.search.search("warm up", record=False)  # builds the index
    yield services


@pytest.fixture
def watcher(svc: Services) -> Iterator[Watcher]:
    w = svc.watcher
    w.start()
    assert eventually(w.idle)
    yield w
    w.stop()


def test_a_file_written_by_another_process_becomes_searchable(svc: Services, watcher: Watcher) -> None:
    path = svc.settings.workspace / "default" / "memory" / "from-elsewhere.md"
    code = (
        "import pathlib, sys; p = pathlib.Path(sys.argv[1]); p.parent.mkdir(parents=True, exist_ok=True);"
        " p.write_text('# Elsewhere\\n\\n## Habit\\n\\n用户喜欢周日早上跑步 with a kayak\\n', encoding='utf-8')"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    assert eventually(lambda: "memory/from-elsewhere.md" in found(svc, "kayak"))
    assert found(svc, "周日早上")[0] == "memory/from-elsewhere.md"


def test_hand_edits_and_deletes_reach_the_index_and_subscribers(svc: Services, watcher: Watcher) -> None:
    events: list[tuple] = []
    watcher.subscribe(lambda agent, owner, rel, deleted: events.append((agent, owner, rel, deleted)))
    path = svc.settings.workspace / "default" / "AGENTS.md"
    path.write_text(path.read_text(encoding="utf-8") + "\n## Added by hand\n\nspeak like a lighthouse keeper\n",
                    encoding="utf-8")
    assert eventually(lambda: found(svc, "lighthouse") == ["AGENTS.md"])
    assert eventually(lambda: ("default", None, "AGENTS.md", False) in events)
    note = svc.settings.workspace / "default" / "memory" / "gone.md"
    note.parent.mkdir(exist_ok=True)
    note.write_text("# G\n\n## x\n\nzeppelin\n", encoding="utf-8")
    assert eventually(lambda: found(svc, "zeppelin") == ["memory/gone.md"])
    note.unlink()
    assert eventually(lambda: found(svc, "zeppelin") == [])
    assert eventually(lambda: ("default", None, "memory/gone.md", True) in events)


def test_own_writes_are_ingested_once_and_not_reported_as_hand_edits(svc: Services, watcher: Watcher) -> None:
    events: list[tuple] = []
    watcher.subscribe(lambda *e: events.append(e))
    before = watcher.ingested
    svc.store.write("default", "MEMORY.md", "# M\n\n## Boat\n\na catamaran\n", expected_sha=None, actor="tool")
    assert found(svc, "catamaran") == ["MEMORY.md"]  # at once, through the store listener
    # A marker written by hand after ours: once it is indexed, our write's echo was processed before it.
    (svc.settings.workspace / "default" / "memory" / "marker.md").write_text("# m\n\n## m\n\nmarker\n", "utf-8")
    assert eventually(lambda: found(svc, "marker") == ["memory/marker.md"])
    assert eventually(watcher.idle)
    assert [e[2] for e in events] == ["memory/marker.md"]
    assert watcher.ingested == before + 1


def test_editor_temp_and_swap_files_are_ignored(svc: Services, watcher: Watcher) -> None:
    for name in (".MEMORY.md.swp", "MEMORY.md~", "4913", ".#MEMORY.md", ".MEMORY.md.1a2b3c.tmp", "notes.txt"):
        assert ignored(f"default/{name}"), name
    assert ignored(".mateclaw/history/default/MEMORY.md")
    assert ignored("default/.obsidian/x.md")
    assert not ignored("default/memory/2026-11-30.md")
    base = svc.settings.workspace / "default"
    (base / ".hidden").mkdir()
    (base / ".hidden" / "secret.md").write_text("# s\n\n## s\n\nplatypus\n", "utf-8")
    (base / "MEMORY.md~").write_text("# s\n\n## s\n\nplatypus\n", "utf-8")
    (base / "memory").mkdir(exist_ok=True)
    (base / "memory" / "visible.md").write_text("# v\n\n## v\n\nwombat\n", "utf-8")
    assert eventually(lambda: found(svc, "wombat") == ["memory/visible.md"])
    assert eventually(watcher.idle)
    assert found(svc, "platypus") == []


def test_periodic_reconcile_repairs_what_events_missed(svc: Services) -> None:
    w = Watcher(svc.file_index, svc.settings.workspace, reconcile_interval=0.3, health_interval=0.3)
    w.start()
    try:
        svc.store.write("default", "MEMORY.md", "# M\n\n## Owl\n\nthe barn owl\n", expected_sha=None, actor=PERSON)
        assert eventually(w.idle)
        db = sqlite3.connect(svc.settings.state_dir / "index.db")
        db.execute("DELETE FROM fts WHERE rowid IN (SELECT id FROM chunks WHERE rel = 'MEMORY.md')")
        db.execute("DELETE FROM chunks WHERE rel = 'MEMORY.md'")
        db.execute("DELETE FROM files WHERE rel = 'MEMORY.md'")
        db.commit()
        db.close()
        assert eventually(lambda: found(svc, "owl") == ["MEMORY.md"])
        assert w.status()["last_reconcile"] is not None
    finally:
        w.stop()


def test_a_dead_observer_is_restarted_and_reported(svc: Services) -> None:
    w = Watcher(svc.file_index, svc.settings.workspace, health_interval=0.2)
    w.start()
    try:
        w._observer.stop()  # the observer thread dies (as it would on an inotify error)
        assert eventually(lambda: w.status()["restarts"] >= 1)
        status = w.status()
        assert status["state"] == "running" and "restarted" in status["last_error"]
        # ... and it watches again.
        (svc.settings.workspace / "default" / "memory").mkdir(exist_ok=True)
        (svc.settings.workspace / "default" / "memory" / "after.md").write_text("# a\n\n## a\n\nnarwhal\n", "utf-8")
        assert eventually(lambda: found(svc, "narwhal") == ["memory/after.md"])
    finally:
        w.stop()
    assert w.status()["state"] == "stopped"


def test_status_shows_the_watcher(svc: Services, watcher: Watcher) -> None:
    from mateclaw_mem.runtime.status import collect

    info = collect(svc)["index"]
    assert info["watcher"]["state"] == "running"
    assert info["files_indexed"] == info["files_on_disk"]


def test_moved_file_is_reindexed_under_its_new_name(svc: Services, watcher: Watcher) -> None:
    base = svc.settings.workspace / "default" / "memory"
    base.mkdir(exist_ok=True)
    (base / "old.md").write_text("# o\n\n## o\n\nchinchilla\n", "utf-8")
    assert eventually(lambda: found(svc, "chinchilla") == ["memory/old.md"])
    (base / "old.md").rename(base / "new.md")
    assert eventually(lambda: found(svc, "chinchilla") == ["memory/new.md"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")
def test_a_dead_inotify_reader_is_noticed_and_replaced(svc: Services) -> None:
    # The observer thread lives on while the one thread that reads inotify events is gone: what a
    # KeyError inside watchdog (a folder swapped for a link) did. Only events could find the new
    # file here: the periodic reconcile is far away.
    from watchdog.observers.inotify_c import InotifyFD

    w = svc.watcher  # the daemon's own, so that /health reports on it
    w.health_interval, w.reconcile_interval = 0.2, 3600.0
    w.start()
    try:
        assert eventually(w.idle)
        reader = InotifyFD.get_instance()
        reader.stop()
        reader.join(timeout=5)
        assert not reader.is_alive() and w._observer.is_alive()
        assert eventually(lambda: w.status()["restarts"] >= 1)
        status = w.status()
        assert status["state"] == "running" and "inotify reader" in status["restart_reason"]
        assert status["last_restart"] is not None
        memory = svc.settings.workspace / "default" / "memory"
        (memory / "later.md").write_text("# l\n\n## l\n\nokapi\n", "utf-8")
        assert eventually(lambda: found(svc, "okapi") == ["memory/later.md"])
        with ApiServer(create_app(svc, mcp=False)) as server:
            index = httpx.get(server.url + "/health").json()["index"]
        assert index["watcher_restarts"] >= 1 and "inotify reader" in index["watcher_restart_reason"]
        assert index["watcher_last_restart"]
    finally:
        w.stop()


def test_events_for_one_file_coalesce_until_it_is_quiet_but_never_wait_past_the_cap() -> None:
    from mateclaw_mem.runtime.watcher import Coalescer

    q = Coalescer(quiet=0.05, max_wait=0.5)
    for t in (0.0, 0.03, 0.06, 0.09):  # a save's truncate, writes and close, 30 ms apart
        q.add("a.md", t)
        assert q.pop_due(t) == []
    assert q.pop_due(0.139) == []  # every event restarted the quiet window
    assert q.next_due() == pytest.approx(0.14)
    assert q.pop_due(0.14) == ["a.md"] and len(q) == 0 and q.pop_due(10.0) == []
    # A file written without pause is still due once `max_wait` after its first event, and
    # another file's events neither delay it nor are delayed by it.
    t = 1.0
    while t < 1.49:
        q.add("log.md", t)
        if t == 1.0:
            q.add("b.md", t)
        t += 0.02
    assert q.pop_due(1.049) == []
    assert q.pop_due(1.05) == ["b.md"]
    assert q.pop_due(1.499) == []
    assert q.pop_due(1.5) == ["log.md"]
    q.add("log.md", 1.51)  # and its next event starts a new wait
    assert q.pop_due(1.55) == [] and q.pop_due(1.56) == ["log.md"]


def test_a_burst_of_saves_of_one_file_is_one_ingest_of_its_final_content(svc: Services) -> None:
    # The watcher is not started: its queue is fed and drained by hand, so the rule is checked
    # without any timing (the observer's events are what `_schedule` receives in the daemon).
    w = Watcher(svc.file_index, svc.settings.workspace)
    path = svc.settings.workspace / "default" / "memory" / "burst.md"
    for word in ("alpaca", "bison", "caribou", "dromedary"):
        path.write_text("", "utf-8")  # a truncating save: the file is empty for a moment ...
        w._schedule(str(path))
        path.write_text(f"# b\n\n## b\n\n{word}\n", "utf-8")  # ... then has the new text
        w._schedule(str(path))
    due = w._pending.pop_due(time.monotonic() + 1.0)
    assert due == [str(path)]
    w._process(due)
    assert w.ingested == 1 and w.idle()
    assert found(svc, "dromedary") == ["memory/burst.md"]
    assert found(svc, "alpaca") == found(svc, "caribou") == []


def test_a_folder_reconcile_waits_for_the_burst_of_file_events_to_end(svc: Services) -> None:
    from mateclaw_mem.runtime.watcher import _RECONCILE, RECONCILE_QUIET

    w = Watcher(svc.file_index, svc.settings.workspace)
    note = str(svc.settings.workspace / "default" / "memory" / "x.md")
    w._schedule(_RECONCILE)  # a new folder
    first = w._pending.next_due()
    time.sleep(0.01)  # so that the file's event is later than the folder's
    w._schedule(note)  # a file in it
    assert first is not None
    assert w._pending.pop_due(first) == [note]  # the file is due; the reconcile moved later
    assert _RECONCILE in w._pending
    assert w._pending.pop_due(time.monotonic() + RECONCILE_QUIET) == [_RECONCILE]


def test_a_hand_edit_rewrites_only_the_sections_it_changed(svc: Services) -> None:
    def rows() -> dict[str, tuple[int, int]]:
        db = sqlite3.connect(svc.settings.state_dir / "index.db")
        try:
            got = db.execute("SELECT title, id, line_start FROM chunks WHERE rel = 'memory/long.md'").fetchall()
        finally:
            db.close()
        return {title: (cid, start) for title, cid, start in got}

    path = svc.settings.workspace / "default" / "memory" / "long.md"
    birds = ["heron", "crane", "stork", "pelican", "puffin"]
    sections = [f"## Part {i}\n\nabout the {bird}\n" for i, bird in enumerate(birds)]
    path.write_text("# Long\n\n" + "\n".join(sections), "utf-8")
    assert svc.file_index.ingest("default", None, "memory/long.md").changed
    before = rows()
    # A new section on top (every later section moves down), one section edited, one removed.
    sections[2] = "## Part 2\n\nabout the egret instead\n"
    del sections[4]
    path.write_text("# Long\n\n## Preface\n\nthe ibis\n\n" + "\n".join(sections), "utf-8")
    assert svc.file_index.ingest("default", None, "memory/long.md").changed
    after = rows()
    assert set(after) == set(before) - {"Part 4"} | {"Preface"}
    for kept in ("Part 0", "Part 1", "Part 3"):
        # The same row (a full rewrite inserts in file order, the preface first: Part 0 gets another id)
        assert after[kept][0] == before[kept][0]
        assert after[kept][1] > before[kept][1]  # ... with its lines moved down by the preface
    assert after["Part 2"][0] != before["Part 2"][0]
    assert found(svc, "egret") == found(svc, "ibis") == ["memory/long.md"]
    assert found(svc, "heron") == found(svc, "pelican") == ["memory/long.md"]
    assert found(svc, "stork") == found(svc, "puffin") == []


def test_the_state_folder_is_not_watched_and_new_agent_folders_are(svc: Services, watcher: Watcher) -> None:
    # Every SQLite page written under .mateclaw/ used to come back as an event to ignore.
    state = svc.settings.workspace / ".mateclaw"
    state.mkdir(exist_ok=True)
    before = watcher.status()["events"]
    for i in range(60):
        (state / "churn.db").write_bytes(b"x" * (i + 1))
    # A folder created after the start (a new agent) is watched: its file arrives by its events.
    notes = svc.settings.workspace / "late-agent" / "memory"
    notes.mkdir(parents=True)
    (notes / "2024-01-01.md").write_text("# d\n\n## d\n\nokapi sighting\n", "utf-8")
    svc.store.ensure_agent("late-agent")
    assert eventually(lambda: bool(svc.search.search("okapi", agent="late-agent")))
    # Events arrive in order: the churn would have come before the note's. Only the folder and
    # note events (and the agent's seeded files) may be counted.
    assert watcher.status()["events"] - before < 40, watcher.status()
    # (A new folder also asks for a reconcile; a file added to it later has only its own events.)
    (notes / "2024-01-03.md").write_text("# d\n\n## d\n\nnumbat sighting\n", "utf-8")
    assert eventually(lambda: bool(svc.search.search("numbat", agent="late-agent")))
    # Removed and made again: watched again (the old watch died with the folder).
    import shutil

    shutil.rmtree(svc.settings.workspace / "late-agent")
    notes.mkdir(parents=True)
    (notes / "2024-01-02.md").write_text("# d\n\n## d\n\nquokka sighting\n", "utf-8")
    svc.store.ensure_agent("late-agent")
    assert eventually(lambda: bool(svc.search.search("quokka", agent="late-agent")))
    (notes / "2024-01-04.md").write_text("# d\n\n## d\n\nwombat sighting\n", "utf-8")
    assert eventually(lambda: bool(svc.search.search("wombat", agent="late-agent")))


def test_search_watch_false_starts_no_observer_and_a_search_still_finds_a_hand_save(
        tmp_path: Path, clock: ManualClock) -> None:
    from mateclaw_mem.settings import load_settings

    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\nsearch:\n  watch: false\n", encoding="utf-8")
    svc = Services(load_settings(cfg, tmp_path / "ws"), clock)
    try:
        svc.store.ensure_agent("default")
        assert found(svc, "canoe") == []  # builds the index; nothing about a canoe yet
        w = svc.watcher
        assert w.live is False
        w.reconcile_interval = 1.0  # the setting's floor is 10 s: the test does not wait that long
        w.start()
        assert eventually(w.idle)
        assert w.state == "reconcile only (search.watch: false; every 1 s)" and w._observer is None
        path = svc.settings.workspace / "default" / "MEMORY.md"
        path.write_text(path.read_text(encoding="utf-8") + "\n## By hand\n\nthe canoe is moored at Tegel\n",
                        encoding="utf-8")
        # No observer delivers the save; the periodic reconcile indexes it.
        assert eventually(lambda: found(svc, "canoe") == ["MEMORY.md"])
        assert w.events == 0 and w.last_reconcile is not None
        w.stop()
    finally:
        svc.close()


def test_search_watch_true_by_default_runs_the_observer(svc: Services, watcher: Watcher) -> None:
    assert svc.settings.search.watch is True and watcher.state == "running" and watcher._observer is not None
