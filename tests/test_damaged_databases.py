"""A damaged database never keeps the daemon down (issue 35, point 2).

Each of the six databases, damaged four ways (garbage bytes, cut to half, a zeroed header, one
garbage page inside its largest table), under what `serve` runs at start (`Daemon.start`, without
HTTP): the start succeeds, the file is set aside with a timestamp, derived data is whole again (a
search finds a word only MEMORY.md holds; the fact projection is back), `status` says what was set
aside and how to recover, and no memory file changes by a byte. Then the real daemon's `/health` and
`status`, a CLI command on a damaged file, `doctor`, `doctor --salvage` on a log with one bad page
and on one with a zeroed header, and a damaged history record.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mateclaw_mem import db
from mateclaw_mem.cli.main import main
from mateclaw_mem.clock import SystemClock
from mateclaw_mem.runtime import heal
from mateclaw_mem.runtime.daemon import Daemon
from mateclaw_mem.runtime.heal import DATABASES as KINDS
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.runtime.status import collect
from mateclaw_mem.settings import load_settings
from tests.support.damage import DAMAGES, DATABASES, TURNS, WORD, corrupt_page, leaf_pages, populate, rows

DAMAGED = ("garbage", "truncated", "zero_header", "corrupt_page")
DERIVED = {k.name for k in KINDS if k.derived}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One filled workspace (tests/support/damage.py), copied by every test."""
    return populate(tmp_path_factory.mktemp("template"))


@pytest.fixture
def ws(template: Path, tmp_path: Path) -> Path:
    shutil.copy(template.parent / "mateclaw.yaml", tmp_path / "mateclaw.yaml")
    shutil.copytree(template, tmp_path / "ws")
    return tmp_path / "ws"


def markdown(ws: Path) -> dict[str, str]:
    return {str(p.relative_to(ws)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(ws.rglob("*.md")) if ".mateclaw" not in p.parts}


def set_aside(ws: Path, name: str) -> list[Path]:
    pattern = re.compile(re.escape(name) + r"\.damaged-\d{8}T\d{6}")
    return [p for p in (ws / ".mateclaw").iterdir() if pattern.fullmatch(p.name)]


def services_on(ws: Path) -> Services:
    return Services(load_settings(ws.parent / "mateclaw.yaml", ws), SystemClock())


@pytest.fixture
def started() -> Iterator[list[Daemon]]:
    daemons: list[Daemon] = []
    yield daemons
    for d in daemons:
        d.stop()


def wait_for(condition, what: str, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("damage", DAMAGED)
@pytest.mark.parametrize("name", DATABASES)
def test_the_start_sets_a_damaged_database_aside_and_comes_up(ws: Path, name: str, damage: str,
                                                              started: list[Daemon],
                                                              caplog: pytest.LogCaptureFixture) -> None:
    before = markdown(ws)
    path = ws / ".mateclaw" / name
    DAMAGES[damage](path)
    assert db.check(path) is not None  # the damage is real: the start has something to find

    services = services_on(ws)
    daemon = Daemon(services)  # what `serve` runs at start, without the HTTP face
    with caplog.at_level(logging.INFO, logger="mateclaw_mem"):
        daemon.start()
    started.append(daemon)

    moved = set_aside(ws, name)
    assert len(moved) == 1, sorted(p.name for p in (ws / ".mateclaw").iterdir())
    assert Path(f"{moved[0]}.json").exists()
    assert db.check(path) is None  # a new, healthy file in its place
    said = [r.getMessage() for r in caplog.records if str(path) in r.getMessage() and "damaged" in r.getMessage()]
    assert len(said) == 1 and str(moved[0]) in said[0], said  # one line, naming the file and where it went

    report = collect(services)["set_aside_databases"]
    assert [r["database"] for r in report] == [name]
    entry = report[0]
    assert entry["file"] == str(moved[0]) and entry["problem"]
    if name in DERIVED:
        assert entry["kind"] == "derived" and "nothing to recover" in entry["recover"]
    else:
        assert entry["kind"] == "log" and entry["recover"] == f"mateclaw-mem doctor --salvage {moved[0]}"

    # Derived data is whole again: the file index (the watcher's start-up catch-up), the projection.
    wait_for(lambda: services.watcher.status()["last_reconcile"] is not None, "the start-up reconcile")
    hits = services.search.search(WORD, agent="default").hits
    assert any(h.file == "MEMORY.md" for h in hits), hits
    assert services.facts.list("default", None), "the fact projection is rebuilt from the files"
    if name != "log.db":  # the message index holds the whole log again (rebuilt from it when it was the one)
        assert services.message_index.watermark() == TURNS
    if name == "log.db":
        # A new log continues the old one's ids where they could be read; otherwise the indexes
        # that copy it were rebuilt from it. Either way a new turn is found by search.
        services.log.append("default", "after", [_message("the zeppelin moored at dawn")], now_ms=1)
        hits = services.search.search("zeppelin", agent="default", scope="conversations").hits
        assert hits, "a turn logged after the set-aside is searchable"
    daemon.stop()
    started.clear()
    assert markdown(ws) == before  # not one byte of a memory file changed


def _message(text: str):
    from mateclaw_mem.conversations.log import NewMessage

    return NewMessage("user", text)


def test_a_new_log_continues_the_ids_of_the_damaged_one(ws: Path, started: list[Daemon]) -> None:
    corrupt_page(ws / ".mateclaw/log.db")
    services = services_on(ws)
    daemon = Daemon(services)
    daemon.start()
    started.append(daemon)
    [new_id] = services.log.append("default", "after", [_message("a turn after the set-aside")], now_ms=1)
    assert new_id == TURNS + 1  # not 1: the damaged file's rows keep their ids when salvaged
    assert rows(ws / ".mateclaw/log.db", "messages") == 1


def test_the_real_daemon_reports_what_was_set_aside(ws: Path) -> None:
    """`serve` as a subprocess: it listens; /health and `status` (asking the daemon) name the file."""
    corrupt_page(ws / ".mateclaw/log.db")
    env = {"MATECLAW_CONFIG": str(ws.parent / "mateclaw.yaml"), "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "mateclaw_mem.cli.main", "--workspace", str(ws), "serve", "--port", "0"]
    log = ws.parent / "daemon.log"
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "bench"))
    from _daemon import start_daemon

    proc, url = start_daemon(cmd, log, env=env, cwd=ws.parent, timeout=60)
    try:
        assert url is not None, log.read_text()
        health = httpx.get(f"{url}/health", timeout=30).json()
        [entry] = health["set_aside"]
        assert entry["database"] == "log.db" and entry["kind"] == "log"
        assert re.fullmatch(r"\.mateclaw/log\.db\.damaged-\d{8}T\d{6}", entry["file"])  # no absolute path
        assert entry["recover"] == f"mateclaw-mem doctor --salvage {entry['file']}"
        status = subprocess.run([*cmd[:5], "status", "--json"], env=env, capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        [full] = json.loads(status.stdout)["set_aside_databases"]
        assert full["file"] == str(ws / entry["file"]) and full["problem"] == entry["problem"]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    lines = [line for line in log.read_text().splitlines() if "log.db is damaged" in line]
    assert len(lines) == 1 and "doctor --salvage" in lines[0], lines


def test_a_start_reads_every_page_of_what_changed_since_the_last_clean_stop(ws: Path, started: list[Daemon]) -> None:
    """A clean stop marks each database as it leaves it (runtime/heal.py: CLEAN_STOP); the next start
    reads only the header of those still so, and every page of any other: one damaged after the stop,
    by any writer, changed its times and is found and set aside."""
    services = services_on(ws)
    existing = {d.name for d in KINDS if (ws / ".mateclaw" / d.name).exists()}
    assert heal.untouched(services.settings) == set()  # (a copied workspace: no mark of this one's)
    daemon = Daemon(services)
    daemon.start()
    daemon.stop()
    assert heal.untouched(services.settings) == existing and len(existing) == len(KINDS)
    corrupt_page(ws / ".mateclaw/messages.db")
    assert heal.untouched(services.settings) == existing - {"messages.db"}
    services = services_on(ws)
    daemon = Daemon(services)
    daemon.start()
    started.append(daemon)
    assert len(set_aside(ws, "messages.db")) == 1 and services.message_index.watermark() == TURNS


def test_a_file_as_the_clean_stop_left_it_is_read_page_by_page_once_the_daemon_runs(
        ws: Path, started: list[Daemon], caplog: pytest.LogCaptureFixture) -> None:
    """A bad page in a file whose mark says it is as a clean stop left it (no writer changed it: a
    failing disk) is not read at start - what the mark buys - but a few seconds after: the log names
    it, no mark is left for it, and the next start sets it aside."""
    settings = services_on(ws).settings
    path = ws / ".mateclaw/messages.db"
    corrupt_page(path)
    heal.mark_clean_stop(settings)  # (as if the damage had been there at the stop)
    assert heal.untouched(settings) >= {"messages.db"}
    services = services_on(ws)
    daemon = Daemon(services)
    daemon.start()
    started.append(daemon)
    assert set_aside(ws, "messages.db") == [] and db.check(path) is not None  # (not read at start)
    assert "messages.db" in services.heal_skipped
    with caplog.at_level(logging.ERROR, logger="mateclaw_mem"):
        later = heal.check_skipped(services, delay=0)  # (what the start began, without its delay)
        assert later is not None
        later.join(60)
    said = [r.getMessage() for r in caplog.records if f"{path} is damaged" in r.getMessage()]
    # (One line; two if the start's own thread, 5 s after it, ran on a slow machine before this.)
    assert said and all("restart the daemon" in line for line in said), said
    daemon.stop()
    started.clear()
    assert "messages.db" not in heal.untouched(settings)  # (the clean stop left it unmarked)
    services = services_on(ws)
    daemon = Daemon(services)
    daemon.start()
    started.append(daemon)
    assert len(set_aside(ws, "messages.db")) == 1 and services.message_index.watermark() == TURNS


def test_the_clean_stop_mark_holds_only_for_the_same_file_unchanged(ws: Path) -> None:
    settings = services_on(ws).settings
    state = ws / ".mateclaw"
    (state / heal.CLEAN_STOP).write_text("not json", encoding="utf-8")
    assert heal.untouched(settings) == set()
    heal.mark_clean_stop(settings)
    assert heal.untouched(settings) == {d.name for d in KINDS}
    st = (state / "facts.db").stat()
    os.utime(state / "facts.db", ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # a sync tool's touch
    (state / "state.db-wal").write_bytes(b"")  # a WAL beside it: opened and not closed since
    copy = state / "forget.db.copy"
    shutil.copy2(state / "forget.db", copy)
    os.replace(copy, state / "forget.db")  # the same bytes and times, another file
    assert heal.untouched(settings) == {d.name for d in KINDS} - {"facts.db", "state.db", "forget.db"}


def test_a_cli_command_sets_a_damaged_file_aside_before_it_opens_it(ws: Path, capsys) -> None:
    DAMAGES["garbage"](ws / ".mateclaw/index.db")
    code = main(["--workspace", str(ws), "--config", str(ws.parent / "mateclaw.yaml"), "search", WORD])
    out, err = capsys.readouterr()
    assert code == 0 and "MEMORY.md" in out, (out, err)
    assert len(set_aside(ws, "index.db")) == 1
    DAMAGES["zero_header"](ws / ".mateclaw/messages.db")
    code = main(["--workspace", str(ws), "--config", str(ws.parent / "mateclaw.yaml"), "reindex"])
    out, err = capsys.readouterr()
    assert code == 0 and out.startswith("reindexed "), (out, err)
    assert len(set_aside(ws, "messages.db")) == 1


def test_beside_a_running_daemon_the_error_names_the_file_and_moves_nothing(ws: Path, capsys) -> None:
    from filelock import FileLock

    DAMAGES["garbage"](ws / ".mateclaw/index.db")
    with FileLock(str(ws / ".mateclaw/daemon.lock")):  # what a running daemon holds
        code = main(["--workspace", str(ws), "--config", str(ws.parent / "mateclaw.yaml"), "search", WORD])
    _, err = capsys.readouterr()
    assert code == 1
    assert str(ws / ".mateclaw/index.db") in err and "restart the daemon" in err and "internal error" not in err
    assert set_aside(ws, "index.db") == []


def test_connect_names_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    path.write_bytes(b"not a database at all, just text " * 200)
    with pytest.raises(db.DamagedDatabaseError) as exc:
        db.connect(path)
    assert str(path) in exc.value.message and "mateclaw-mem doctor" in exc.value.message


def doctor(ws: Path, capsys, *args: str) -> tuple[int, str]:
    code = main(["--workspace", str(ws), "--config", str(ws.parent / "mateclaw.yaml"), "doctor", *args])
    out, err = capsys.readouterr()
    return code, out + err


def test_doctor_on_a_healthy_workspace_finds_nothing(ws: Path, capsys) -> None:
    code, out = doctor(ws, capsys)
    assert code == 0, out
    for name in DATABASES:
        assert re.search(rf"^  {re.escape(name)} +(derived|log) +\d+ KB  ok$", out, re.M), out
    assert "set aside" not in out and not any(set_aside(ws, n) for n in DATABASES)


def test_salvage_copies_back_every_readable_row_of_a_log_with_a_bad_page(ws: Path, capsys) -> None:
    log_db = ws / ".mateclaw/log.db"
    leaves = leaf_pages(log_db)
    page = leaves[len(leaves) // 2]
    with sqlite3.connect(log_db) as conn:
        lost = conn.execute("SELECT ncell FROM dbstat WHERE pageno = ?", (page,)).fetchone()[0]
    corrupt_page(log_db, page)

    code, out = doctor(ws, capsys)
    assert code == 0 and "DAMAGED: database disk image is malformed" in out, out
    [moved] = set_aside(ws, "log.db")
    services = services_on(ws)  # a turn logged before the salvage keeps its own, new id
    services.log.append("default", "after", [_message("logged between the set-aside and the salvage")], now_ms=1)
    services.close()
    assert rows(log_db, "messages") == 1

    code, out = doctor(ws, capsys, "--salvage", str(moved))
    assert code == 0, out
    assert f"messages: {TURNS - lost} read, {TURNS - lost} copied, 0 already there, 1 unreadable run(s) skipped" in out
    assert 0 < lost < TURNS and rows(log_db, "messages") == TURNS - lost + 1
    code, out = doctor(ws, capsys, "--salvage", str(moved))  # again: nothing new to copy
    assert code == 10 and f"messages: {TURNS - lost} read, 0 copied, {TURNS - lost} already there" in out, out

    [entry] = collect(services_on(ws))["set_aside_databases"]
    assert entry["salvaged"]["copied"] == TURNS - lost  # `meta`: the new log has its own markers
    assert entry["recover"].startswith("salvaged on ")


def test_salvage_reads_a_log_whose_header_was_zeroed_in_full(ws: Path, capsys) -> None:
    DAMAGES["zero_header"](ws / ".mateclaw/forget.db")
    DAMAGES["zero_header"](ws / ".mateclaw/log.db")
    code, out = doctor(ws, capsys)
    assert code == 0 and out.count("DAMAGED") == 2, out
    code, out = doctor(ws, capsys, "--salvage", str(set_aside(ws, "log.db")[0]))
    assert code == 0 and "its header was unreadable" in out and f"messages: {TURNS} read, {TURNS} copied" in out, out
    assert rows(ws / ".mateclaw/log.db", "messages") == TURNS
    moved = set_aside(ws, "forget.db")[0]  # named as /health names it: relative to the workspace
    code, out = doctor(ws, capsys, "--salvage", str(moved.relative_to(ws)))
    assert code == 0 and "tombstones: 1 read, 1 copied" in out, out


def test_salvage_of_a_derived_file_has_nothing_to_do(ws: Path, capsys) -> None:
    DAMAGES["truncated"](ws / ".mateclaw/index.db")
    assert doctor(ws, capsys)[0] == 0
    code, out = doctor(ws, capsys, "--salvage", str(set_aside(ws, "index.db")[0]))
    assert code == 10 and "nothing to salvage" in out, out
    code, out = doctor(ws, capsys, "--salvage", str(ws / "default/MEMORY.md"))
    assert code == 2 and "not a set-aside database" in out, out


def test_a_damaged_history_record_is_skipped_with_a_warning(ws: Path, caplog: pytest.LogCaptureFixture) -> None:
    from mateclaw_mem.api.app import create_app
    from tests.support.server import ApiServer

    record = ws / ".mateclaw/history/default/MEMORY.md/versions.jsonl"
    good = record.read_bytes()
    assert good.count(b"\n") >= 1
    record.write_bytes(good + b"\xff\xfe garbage \x00\n" + b'{"version": "x", "sha": 1}\n'
                       + json.dumps({**json.loads(good.splitlines()[0]), "version": "two"}).encode() + b"\n")
    services = services_on(ws)
    services.build()
    try:
        with caplog.at_level(logging.WARNING), ApiServer(create_app(services)) as server:
            r = httpx.get(f"{server.url}/api/v1/agents/default/workspace/memory/history",
                          params={"path": "MEMORY.md"}, timeout=30)
            page = httpx.get(f"{server.url}/ui/files/history", params={"path": "MEMORY.md"}, timeout=30)
    finally:
        services.close()
    assert r.status_code == 200, r.text
    assert len(r.json()["versions"]) == good.count(b"\n")
    assert page.status_code == 200, page.text[:500]
    assert any("skipped 3 damaged history record(s)" in m for m in caplog.messages), caplog.messages
