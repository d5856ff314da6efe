"""The throw-away PostgreSQL of tests/support/postgres.py: real databases, isolated per test, and no
server left behind by a test run that dies (SIGKILL included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.postgres import PostgresServer, PostgresUnavailable, find_bin_dir, sweep_orphans

ROOT = Path(__file__).resolve().parent.parent


def _wait(predicate, seconds: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    """A bound on waiting for something another process does, never a measurement."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_each_test_gets_a_fresh_database_that_holds_data(pg_server: PostgresServer, pg_database: str) -> None:
    import psycopg

    with psycopg.connect(pg_database) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY, body text)")
        conn.execute("INSERT INTO t VALUES (1, 'ünïcode ✓')")
    other = pg_server.create_database()
    try:
        with psycopg.connect(other) as conn:
            assert conn.execute("SELECT to_regclass('public.t')").fetchone() == (None,)
        with psycopg.connect(pg_database) as conn:
            assert conn.execute("SELECT body FROM t").fetchall() == [("ünïcode ✓",)]
    finally:
        pg_server.drop_database(pg_server.databases[-1])


def test_the_unix_socket_reaches_the_same_server(pg_server: PostgresServer, pg_database: str) -> None:
    import psycopg

    name = pg_database.rsplit("dbname=", 1)[1]
    with psycopg.connect(pg_server.dsn(name, unix=True)) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == (name,)
        assert conn.execute("SHOW fsync").fetchone() == ("off",)


def test_a_stopped_server_refuses_then_comes_back_with_its_data(pg_server: PostgresServer, pg_database: str) -> None:
    import psycopg

    with psycopg.connect(pg_database) as conn:
        conn.execute("CREATE TABLE kept (v int)")
        conn.execute("INSERT INTO kept VALUES (7)")
    pg_server.stop_server()
    try:
        assert not pg_server.running()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(pg_database, connect_timeout=3)
    finally:
        pg_server.restart_server()
    with psycopg.connect(pg_database) as conn:
        assert conn.execute("SELECT v FROM kept").fetchall() == [(7,)]


def test_missing_binaries_are_named_in_the_reason(tmp_path: Path) -> None:
    with pytest.raises(PostgresUnavailable, match=r"initdb, pg_ctl.*apt-get install postgresql"):
        find_bin_dir(path=str(tmp_path), debian=str(tmp_path / "nothing" / "*" / "bin"))


_CHILD = """
import sys, time
sys.path.insert(0, {root!r})
from tests.support.postgres import PostgresServer
s = PostgresServer.start()
print(s.folder, s.watchdog.pid, flush=True)
time.sleep(600)
"""


def _child_server() -> tuple[subprocess.Popen[str], Path, int, int]:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(root=str(ROOT))], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    folder_text, watchdog = child.stdout.readline().split()
    folder = Path(folder_text)
    postmaster = int((folder / "data" / "postmaster.pid").read_text().split("\n", 1)[0])
    os.kill(postmaster, 0)  # running
    return child, folder, int(watchdog), postmaster


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie of ours is gone too; anything else still runs.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_test_run_killed_with_sigkill_leaves_no_server(pg_server: PostgresServer) -> None:
    child, folder, _, postmaster = _child_server()
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert _wait(lambda: _gone(postmaster) and not folder.exists()), "the watchdog left the server running"


def test_an_orphan_whose_watchdog_died_too_is_swept_at_the_next_start(pg_server: PostgresServer) -> None:
    child, folder, watchdog, postmaster = _child_server()
    os.kill(watchdog, signal.SIGKILL)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert _wait(lambda: _gone(watchdog))
    assert not _gone(postmaster) and folder.exists()  # an orphan, as after a crash with no watchdog
    assert folder in sweep_orphans()
    assert _gone(postmaster) and not folder.exists()
    # The session's own server (a live owner) was left alone.
    assert pg_server.running()
