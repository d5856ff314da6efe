"""No half operations (issue 35.3): each multi-file operation, run as a real `mateclaw-mem` command,
killed with SIGKILL at a chosen point of its real code path (MATECLAW_MEM_CRASH_AT, workspace/journal.py),
is found half done on disk where the point is mid-way, and whole after the next start; a file the person
edited after the crash is left as they saved it and reported; `status`, `/health` and the health page
say what was finished. The randomized campaign is scripts/bench/half_operations.py."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import httpx
import pytest

from tests.support import half_ops
from tests.support.half_ops import SCENARIOS, cli, journal_left, restart

N = 8  # files per operation: enough for a kill to fall between two of them

# (operation, crash point, what the disk must show right after the kill)
POINTS = [
    ("import", "begin", "before"), ("import", "write:4", "half"), ("import", "end", "after"),
    ("undo", "begin", "before"), ("undo", "write:4", "half"), ("undo", "end", "after"),
    ("forget", "begin", "before"), ("forget", "write:4", "half"), ("forget", "end", "after"),
    ("month-roll", "write:1", "before"), ("month-roll", "write:4", "half"), ("month-roll", "end", "after"),
    ("soul-apply", "begin", "before"), ("soul-apply", "write:1", "before"), ("soul-apply", "end", "after"),
    ("contradiction", "begin", "before"), ("contradiction", "write:2", "half"), ("contradiction", "end", "after"),
    ("import-chats", "begin", "before"), ("import-chats", "end", "after"),
    # A folder renamed: each file copied under its new name, then removed under its old one.
    ("rename", "begin", "before"), ("rename", "write:2", "half"), ("rename", "write:7", "half"),
    ("rename", "end", "after"),
    ("delete", "begin", "before"), ("delete", "write:4", "half"), ("delete", "end", "after"),
    # A dream: MEMORY.md rewritten ("written": before its DREAMS.md entry and run record), then recorded.
    ("dream", "begin", "before"), ("dream", "write:1", "before"), ("dream", "written", "half"),
    ("dream", "end", "after"),
    # DREAMS.md over its cap: two months' files, then DREAMS.md without what they now hold.
    ("diary-cap", "begin", "before"), ("diary-cap", "write:2", "half"), ("diary-cap", "write:3", "half"),
    ("diary-cap", "end", "after"),
    # An extraction: PROFILE.md, MEMORY.md, the daily note ("written": the conversation not yet marked read).
    ("extraction", "begin", "before"), ("extraction", "write:2", "half"), ("extraction", "written", "half"),
    ("extraction", "end", "after"),
]
SIZE = {"import-chats": 2, "dream": 4}  # conversations; lines the dream promotes


@pytest.mark.parametrize(("op", "point", "right_after"), POINTS, ids=[f"{o}-{p}" for o, p, _ in POINTS])
def test_a_kill_at_any_point_is_whole_after_the_next_start(tmp_path: Path, op: str, point: str,
                                                           right_after: str) -> None:
    scenario = SCENARIOS[op]
    n = SIZE.get(op, N)
    args = scenario.prepare(tmp_path, n)
    killed = cli(tmp_path, *args, crash_at=f"{op}:{point}", module=scenario.module)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    kind, detail = scenario.state(tmp_path, n)
    assert kind == right_after, detail  # the point is where the test says: mid-way is really half done
    assert journal_left(tmp_path), "the kill left no journal"

    done = restart(tmp_path)
    assert done.returncode == 0, done.stderr
    kind, detail = scenario.state(tmp_path, n)
    assert kind == "after", detail
    assert journal_left(tmp_path) == []
    finished = json.loads(done.stdout)["finished_now"]
    assert [(e["operation"], e["outcome"]) for e in finished] == [
        (op, "already complete" if right_after == "after" else "completed")]
    assert "Traceback" not in done.stderr

    status = json.loads(cli(tmp_path, "status", "--json").stdout)
    recovered = status["interrupted_operations"]["recovered"]
    assert recovered[0]["operation"] == op and recovered[0]["how"]


def test_a_file_edited_by_hand_after_the_crash_is_left_alone_and_reported(tmp_path: Path) -> None:
    scenario = SCENARIOS["import"]
    args = scenario.prepare(tmp_path, N)
    assert cli(tmp_path, *args, crash_at="import:write:4").returncode == -signal.SIGKILL
    # The person saves two files while nothing runs: one the import had written, one it had not reached.
    notes = tmp_path / "workspace" / "default" / "notes"
    written = sorted(p.name for p in notes.glob("*.md"))
    assert 0 < len(written) < N
    (notes / written[0]).write_text("# mine now\n", encoding="utf-8")
    (notes / f"n{N - 1:04d}.md").write_text("# also mine\n", encoding="utf-8")

    done = restart(tmp_path)
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout)["finished_now"][0]
    assert (notes / written[0]).read_text(encoding="utf-8") == "# mine now\n"
    assert (notes / f"n{N - 1:04d}.md").read_text(encoding="utf-8") == "# also mine\n"
    assert sorted(f["file"] for f in entry["left_alone"]) == [f"default/notes/{written[0]}",
                                                                f"default/notes/n{N - 1:04d}.md"]
    assert entry["files"]["left_alone"] == 2
    assert entry["files"]["written_now"] + entry["files"]["already_done"] == N - 2
    for i in range(1, N - 1):  # every other file is the import's
        if f"n{i:04d}.md" != written[0]:
            assert (notes / f"n{i:04d}.md").read_text(encoding="utf-8") == half_ops._note(i)
    assert "left alone" in entry["how"]
    shown = cli(tmp_path, "status").stdout  # the short report says it, without --all
    assert "interrupted import (run import-default-" in shown and "completed at start" in shown
    assert f"left alone: default/notes/n{N - 1:04d}.md: changed by hand after the crash" in shown


@pytest.mark.parametrize("point", ["write:2", "write:3"])
def test_a_finished_diary_cap_is_byte_for_byte_what_an_uninterrupted_one_writes(tmp_path: Path, point: str) -> None:
    scenario = SCENARIOS["diary-cap"]
    files = {}
    for name, crash in (("clean", None), ("killed", f"diary-cap:{point}")):
        folder = tmp_path / name
        folder.mkdir()
        args = scenario.prepare(folder, N)
        run = cli(folder, *args, crash_at=crash)
        assert run.returncode == (-signal.SIGKILL if crash else 0), run.stderr
        assert restart(folder).returncode == 0
        ws = folder / "workspace" / "default"
        files[name] = {p.relative_to(ws).as_posix(): p.read_bytes()
                       for p in [ws / "DREAMS.md", *sorted((ws / "memory" / "dreams").glob("*.md"))]}
    assert sorted(files["clean"]) == ["DREAMS.md", "memory/dreams/2026-09.md", "memory/dreams/2026-10.md"]
    assert files["killed"] == files["clean"]


def test_a_model_dream_killed_between_its_archive_and_memory_md_is_finished_as_it_would_have_run(
        tmp_path: Path, model_server) -> None:
    """Model mode drops an entry: the archive of what it drops is written first, then MEMORY.md. Killed
    between the two (the entry both archived and still in MEMORY.md), the next start writes MEMORY.md,
    the diary entry and the run record: the files are those of a run nobody killed."""
    from tests.test_dreaming import MACHINE_MEMORY

    body = MACHINE_MEMORY.split("---\n", 2)[2].replace("- Prefers short answers\n", "")
    files = {}
    for name, crash in (("clean", None), ("killed", "dream:write:2")):
        folder = tmp_path / name
        folder.mkdir()
        args = SCENARIOS["dream"].prepare(folder, 4)
        with (folder / "mateclaw.yaml").open("a", encoding="utf-8") as cfg:
            cfg.write(f"model:\n  base-url: {model_server.base_url}\n  model: test-model\n")
        svc = half_ops.services_as_configured(folder)
        try:
            snap = svc.store.read("default", "MEMORY.md")
            svc.store.write("default", "MEMORY.md", MACHINE_MEMORY, expected_sha=snap.sha, actor="extraction")
        finally:
            svc.close()
        model_server.reply_json({"should_update": True, "reason": "dropped an outdated preference",
                                 "memory_content": body})
        run = cli(folder, *args, crash_at=crash)
        assert run.returncode == (-signal.SIGKILL if crash else 0), run.stderr
        ws = folder / "workspace" / "default"
        archive = ws / "memory" / "archive" / "MEMORY-2026-11-30.md"
        if crash:  # half: the entry archived and still in MEMORY.md, no diary entry
            assert "- Prefers short answers" in archive.read_text(encoding="utf-8")
            assert "- Prefers short answers" in (ws / "MEMORY.md").read_text(encoding="utf-8")
            assert not (ws / "DREAMS.md").exists() or "Dreaming" not in (ws / "DREAMS.md").read_text(encoding="utf-8")
            done = restart(folder)
            assert done.returncode == 0, done.stderr
            entry = json.loads(done.stdout)["finished_now"][0]
            assert entry["operation"] == "dream" and entry["files"] == {
                "planned": 2, "written_now": 1, "already_done": 1, "left_alone": 0}
        files[name] = {"MEMORY.md": (ws / "MEMORY.md").read_bytes(), "archive": archive.read_bytes()}
        with sqlite3.connect(folder / "workspace" / ".mateclaw" / "log.db") as conn:
            assert conn.execute("SELECT status FROM dream_runs").fetchall() == [("done",)]
        assert "Prefers short answers" not in files[name]["MEMORY.md"].decode("utf-8")
        assert "`dream-default-20261130T235900`" in (ws / "DREAMS.md").read_text(encoding="utf-8")
    assert files["killed"] == files["clean"]


def test_an_extraction_finished_at_start_is_not_read_again(tmp_path: Path) -> None:
    """Killed once every file is written but before the conversation is marked read: the next start
    marks it read, so extracting it again adds nothing (no second daily entry)."""
    scenario = SCENARIOS["extraction"]
    args = scenario.prepare(tmp_path, 1)
    assert cli(tmp_path, *args, crash_at="extraction:written").returncode == -signal.SIGKILL
    assert restart(tmp_path).returncode == 0
    again = cli(tmp_path, *args)
    assert again.returncode in (0, 10), again.stderr
    kind, detail = scenario.state(tmp_path, 1)
    assert kind == "after", detail  # one daily entry, not two


def test_a_memory_md_saved_by_hand_after_a_killed_dream_is_kept_and_the_run_recorded_as_not_done(
        tmp_path: Path) -> None:
    scenario = SCENARIOS["dream"]
    args = scenario.prepare(tmp_path, 4)
    assert cli(tmp_path, *args, crash_at="dream:write:1").returncode == -signal.SIGKILL
    memory = tmp_path / "workspace" / "default" / "MEMORY.md"
    mine = memory.read_text(encoding="utf-8") + "\n## Mine\n\n- saved by the person after the crash\n"
    memory.write_text(mine, encoding="utf-8")

    done = restart(tmp_path)
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout)["finished_now"][0]
    assert entry["operation"] == "dream" and entry["files"]["left_alone"] == 1
    assert entry["left_alone"][0]["file"] == "default/MEMORY.md"
    assert memory.read_text(encoding="utf-8") == mine
    diary = (tmp_path / "workspace" / "default" / "DREAMS.md").read_text(encoding="utf-8")
    assert "saved by hand after the run was killed" in diary
    with sqlite3.connect(tmp_path / "workspace" / ".mateclaw" / "log.db") as conn:
        assert conn.execute("SELECT status, lines_added FROM dream_runs").fetchall() == [("failed", 0)]
    assert journal_left(tmp_path) == []


def test_a_running_operation_is_never_recovered_beside_itself(tmp_path: Path) -> None:
    """The journal of a live operation is locked: another process's start leaves it alone."""
    from mateclaw_mem.workspace.journal import Journal, Step

    svc = half_ops.services(tmp_path)
    try:
        journal = Journal(svc.store.state_dir / "journal")
        step = Step("default", None, "notes/live.md", "", b"# live\n", "import")
        with journal.operation("import", "import-live", [step]):
            other = cli(tmp_path, "doctor", "--json")
            assert json.loads(other.stdout)["finished_now"] == []
            assert not (tmp_path / "workspace" / "default" / "notes" / "live.md").exists()
            unfinished = json.loads(cli(tmp_path, "status", "--json").stdout)["interrupted_operations"]["unfinished"]
            assert [(u["operation"], u["running"]) for u in unfinished] == [("import", True)]
        assert journal_left(tmp_path) == []
    finally:
        svc.close()


def test_the_daemon_finishes_an_interrupted_import_at_start_and_says_so(tmp_path: Path) -> None:
    from tests.test_daemon_e2e import Daemon

    args = SCENARIOS["import"].prepare(tmp_path, N)
    assert cli(tmp_path, *args, crash_at="import:write:4").returncode == -signal.SIGKILL
    daemon = Daemon(tmp_path)
    daemon.workspace = tmp_path / "workspace"
    daemon.start()
    try:
        assert SCENARIOS["import"].state(tmp_path, N)[0] == "after"
        health = httpx.get(f"{daemon.url}/health", timeout=30).json()
        recovered = health["interrupted_operations"]["recovered"]
        assert recovered[0]["operation"] == "import" and recovered[0]["outcome"] == "completed"
        assert "notes/" not in json.dumps(health)  # /health is open without a key: no file names
        page = httpx.get(f"{daemon.url}/ui/health", timeout=30)
        assert page.status_code == 200 and "Operations a crash interrupted" in page.text
        assert "completed at start" in page.text
        assert "interrupted import" in daemon.log()
    finally:
        daemon.stop()


def test_a_daemon_killed_mid_way_through_an_http_import_finishes_it_at_its_next_start(tmp_path: Path) -> None:
    """The HTTP face's import (`POST …/workspace/memory/import`), the daemon itself killed at its fourth
    file (MATECLAW_MEM_CRASH_AT in the daemon's environment), then a plain restart of the daemon."""
    import io
    import zipfile

    from tests.test_daemon_e2e import WS, Daemon

    class Crashing(Daemon):
        def env(self) -> dict[str, str]:
            return {**super().env(), "MATECLAW_MEM_CRASH_AT": "import:write:4"}

    SCENARIOS["import"].prepare(tmp_path, N)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for p in sorted((tmp_path / "vault").rglob("*.md")):
            zf.writestr(p.relative_to(tmp_path).as_posix(), p.read_bytes())  # vault/notes/…: its one folder is the root
    first = Crashing(tmp_path)
    first.workspace = tmp_path / "workspace"
    first.start()
    assert first.proc is not None
    with pytest.raises(httpx.TransportError):  # the daemon dies under the request
        httpx.post(f"{first.url}{WS}/import", files={"file": ("vault.zip", buf.getvalue(), "application/zip")},
                   data={"strategy": "overwrite"}, timeout=60)
    assert first.proc.wait(timeout=30) == -signal.SIGKILL
    assert SCENARIOS["import"].state(tmp_path, N)[0] == "half"

    second = Daemon(tmp_path)
    second.workspace = tmp_path / "workspace"
    second.start()
    try:
        kind, detail = SCENARIOS["import"].state(tmp_path, N)
        assert kind == "after", detail
        recovered = httpx.get(f"{second.url}/health", timeout=30).json()["interrupted_operations"]["recovered"]
        assert [(e["operation"], e["outcome"]) for e in recovered] == [("import", "completed")]
    finally:
        second.stop()


def test_a_running_daemons_heartbeat_finishes_what_another_process_died_in(tmp_path: Path) -> None:
    """A CLI import killed while the daemon (here its services, in this process) runs: the scheduler's
    heartbeat finishes it without a restart; an operation running in this process is left alone."""
    from mateclaw_mem.workspace.journal import Step

    args = SCENARIOS["import"].prepare(tmp_path, N)
    svc = half_ops.services(tmp_path)
    try:
        svc.build()  # as the daemon has them: built before anything dies
        assert cli(tmp_path, *args, crash_at="import:write:4").returncode == -signal.SIGKILL
        assert SCENARIOS["import"].state(tmp_path, N)[0] == "half"
        live = Step("default", None, "notes/live.md", "", b"# live\n", "import")
        with svc.store.journal.operation("import", "import-live", [live]):
            beat = dict(svc.scheduler.tick_all())
            assert beat.get("interrupted_operations") == "1 finished"
            assert not (tmp_path / "workspace" / "default" / "notes" / "live.md").exists()
        kind, detail = SCENARIOS["import"].state(tmp_path, N)
        assert kind == "after", detail
        assert journal_left(tmp_path) == []
        assert "interrupted_operations" not in dict(svc.scheduler.tick_all())  # nothing left to finish
    finally:
        svc.close()
