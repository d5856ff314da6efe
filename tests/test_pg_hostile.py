"""A hostile tester's cases for the PostgreSQL store (issue 40): DSNs an operator gets wrong, databases
that will not take the store's tables (another application's, a role without CREATE, a read-only
database) and a database turned read-only under a running daemon - each a clear error (exit 6 at
start, 503 at run time), never an "internal error", never the DSN's password."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.aml import AmlMessage, AmlService
from mateclaw_mem.conversations.pg import open_pg_service
from mateclaw_mem.errors import StoreUnavailableError
from mateclaw_mem.settings import load_settings
from tests.support.cli_runner import run_one

SECRET = "S3cr3tPW-x9"


def _status(tmp_path: Path, dsn: str) -> dict[str, object]:
    folder = tmp_path / "c"
    folder.mkdir(exist_ok=True)
    (folder / "c.yaml").write_text("timezone: Europe/Berlin\naml:\n  store: postgresql\n", encoding="utf-8")
    return run_one({"argv": ["--workspace", str(folder / "ws"), "--config", str(folder / "c.yaml"), "aml", "status"],
                    "env": {"MATECLAW_PG_DSN": dsn}})


def _admin(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)  # type: ignore[arg-type]


@pytest.mark.parametrize("dsn", [
    f"host=127.0.0.1 port=1 password{SECRET}",           # '=' forgotten: libpq quotes the password back
    f"host=127.0.0.1 password='{SECRET}",                # an unterminated quote
    f"postgresql://u:{SECRET}@127.0.0.1:1/db?nosuch=1",  # an unknown URI parameter
])
def test_a_dsn_libpq_cannot_read_is_exit_6_without_its_password(tmp_path: Path, dsn: str) -> None:
    done = _status(tmp_path, dsn)
    err = str(done["stderr"])
    assert done["rc"] == 6, done
    assert "MATECLAW_PG_DSN" in err and "cannot be read" in err and "internal error" not in err, err
    assert SECRET not in err and "Traceback" not in err, err


def test_scrub_takes_out_every_spelling_of_the_password() -> None:
    from mateclaw_mem.conversations.pg.connection import scrub

    assert SECRET not in scrub(f'missing "=" after "password{SECRET}"', f"host=h password{SECRET}")
    assert SECRET not in scrub(f"bad {SECRET}", f"host=h password = '{SECRET}'")
    encoded = "p%40ss%2Fword"
    assert "p@ss/word" not in scrub("x p@ss/word y", f"postgresql://u:{encoded}@h/db")
    assert scrub("database \"x\" does not exist", "host=h password=ab") == "database \"x\" does not exist"


def test_a_database_of_another_application_is_refused_by_name(tmp_path: Path, pg_database: str) -> None:
    _admin(pg_database, "CREATE TABLE messages (id serial PRIMARY KEY, body text)")
    done = _status(tmp_path, pg_database)
    err = str(done["stderr"])
    assert done["rc"] == 6 and "already holds tables mateclaw-mem did not make" in err and "messages" in err, done
    with psycopg.connect(pg_database) as conn:  # its table untouched, nothing of ours left behind
        assert conn.execute("SELECT to_regclass('schema_version') IS NULL").fetchone() == (True,)


def test_another_applications_schema_version_table_is_not_taken_for_ours(tmp_path: Path, pg_database: str) -> None:
    # A version 57 of theirs read as ours would say "upgrade mateclaw-mem"; a 2 would skip our tables.
    for theirs in ("CREATE TABLE schema_version (version int PRIMARY KEY)",
                   "CREATE TABLE schema_version (version int PRIMARY KEY, name text, applied_ms bigint)"):
        _admin(pg_database, "DROP TABLE IF EXISTS schema_version", theirs,
               "INSERT INTO schema_version VALUES (1)" if "name" not in theirs else
               "INSERT INTO schema_version VALUES (1, 'init', 0), (2, 'users', 0)")
        done = _status(tmp_path, pg_database)
        err = str(done["stderr"])
        assert done["rc"] == 6 and "schema_version that mateclaw-mem did not make" in err, done


def test_a_role_without_create_is_told_what_to_grant(tmp_path: Path, pg_database: str) -> None:
    _admin(pg_database, "DROP ROLE IF EXISTS weak", f"CREATE ROLE weak LOGIN PASSWORD '{SECRET}'",
           "REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    weak = pg_database.replace("user=postgres", "user=weak") + f" password={SECRET}"
    try:
        done = _status(tmp_path, weak)
    finally:
        _admin(pg_database, "DROP OWNED BY weak", "DROP ROLE weak")
    err = str(done["stderr"])
    assert done["rc"] == 6 and "may not create or write" in err and "GRANT CREATE ON SCHEMA" in err, done
    assert SECRET not in err


def test_a_read_only_database_at_start_is_exit_6(tmp_path: Path, pg_database: str) -> None:
    dbname = pg_database.split("dbname=")[1].split()[0]
    assert _status(tmp_path, pg_database)["rc"] == 0  # migrated while writable
    _admin(pg_database, f"ALTER DATABASE {dbname} SET default_transaction_read_only = on")
    done = _status(tmp_path, pg_database)
    assert done["rc"] == 6 and "accepts no writes" in str(done["stderr"]), done


def _service(tmp_path: Path, dsn: str) -> AmlService:
    """A running PostgreSQL store holding one Add (what a daemon serving it has)."""
    (tmp_path / "c.yaml").write_text("aml:\n  store: postgresql\n", encoding="utf-8")
    settings = load_settings(tmp_path / "c.yaml", tmp_path / "ws")
    svc = open_pg_service(settings, ManualClock(datetime(2024, 1, 1, tzinfo=UTC)), dsn=dsn)
    try:
        svc.add("r1", "u1", "s1", [AmlMessage("user", "Ann: the lighthouse keeper", 1683554160000)])
    except BaseException:
        svc.stop()
        raise
    return svc


def test_a_database_turned_read_only_under_a_daemon_is_store_unavailable(tmp_path: Path, pg_database: str) -> None:
    svc = _service(tmp_path, pg_database)
    dbname = pg_database.split("dbname=")[1].split()[0]
    try:
        # A failover's demoted primary: new sessions read-only, the pooled ones dropped.
        _admin(pg_database, f"ALTER DATABASE {dbname} SET default_transaction_read_only = on",
               f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{dbname}'"
               " AND pid <> pg_backend_pid()")
        with pytest.raises(StoreUnavailableError, match="refuses writes"):
            for _ in range(3):  # (the first may meet a connection the pool has not yet found dead)
                try:
                    svc.add("r2", "u1", "s1", [AmlMessage("user", "Ann: after the failover", 1683554220000)])
                except StoreUnavailableError as exc:
                    if "refuses writes" in str(exc):
                        raise
    finally:
        svc.stop()


def test_a_newer_daemons_migration_under_a_running_one_is_a_503_not_a_500(tmp_path: Path, pg_database: str) -> None:
    from mateclaw_mem.conversations.pg import pg_health
    from mateclaw_mem.conversations.pg.schema import LATEST

    svc = _service(tmp_path, pg_database)
    try:
        # What a later version's migration could do while this daemon runs (a rolling upgrade).
        _admin(pg_database, "ALTER TABLE docs RENAME TO docs_v9",
               f"INSERT INTO schema_version (version, name, applied_ms) VALUES ({LATEST + 1}, 'later', 0)")
        # (Either way a 503: the statement's missing table, or the schema check when a second has passed.)
        with pytest.raises(StoreUnavailableError, match=r"no longer those this mateclaw-mem knows|newer than this"):
            svc.search("lighthouse", "u1", 5)
        health = pg_health(svc)
        assert health["state"] == "unavailable" and "newer than this" in health["reason"], health
    finally:
        svc.stop()


def test_a_newer_migration_that_renames_nothing_this_daemon_reads_is_refused_within_a_second(
        tmp_path: Path, pg_database: str) -> None:
    """A later version's migration may change what this daemon reads without removing anything it
    names (migrations 5-7 moved the messages' text): its statements would then succeed and its answers
    quietly lack what moved. Within `Checkout.SCHEMA_EVERY` every call is refused instead (a 503 naming
    both versions), Adds included; and once the schema is one this daemon knows again, it serves."""
    import time

    from mateclaw_mem.conversations.pg.connection import Checkout
    from mateclaw_mem.conversations.pg.schema import LATEST

    svc = _service(tmp_path, pg_database)
    try:
        assert ["the lighthouse keeper" in i.content for i in svc.search("lighthouse", "u1", 5)] == [True]
        _admin(pg_database, f"INSERT INTO schema_version (version, name, applied_ms) VALUES ({LATEST + 1}, 'later', 0)")
        time.sleep(Checkout.SCHEMA_EVERY + 0.1)
        with pytest.raises(StoreUnavailableError, match=f"version {LATEST + 1}, newer than this mateclaw-mem knows"
                                                        f" \\({LATEST}\\)"):
            svc.search("lighthouse", "u1", 5)
        with pytest.raises(StoreUnavailableError, match="newer than this"):
            svc.add("r2", "u1", "s1", [AmlMessage("user", "Ann: written by an older daemon", 1683554220000)])
        _admin(pg_database, f"DELETE FROM schema_version WHERE version = {LATEST + 1}")
        time.sleep(Checkout.SCHEMA_EVERY + 0.1)
        assert ["the lighthouse keeper" in i.content for i in svc.search("keeper", "u1", 5)] == [True]
    finally:
        svc.stop()


def test_a_role_with_rights_on_the_rows_only_runs_a_migrated_store(tmp_path: Path, pg_database: str) -> None:
    # Least privilege: the owner migrates; the daemons' role may read and write rows, not create tables.
    assert _status(tmp_path, pg_database)["rc"] == 0
    _admin(pg_database, "DROP ROLE IF EXISTS runner", f"CREATE ROLE runner LOGIN PASSWORD '{SECRET}'",
           "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
           "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO runner",
           "GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO runner")
    runner = pg_database.replace("user=postgres", "user=runner") + f" password={SECRET}"
    try:
        done = _status(tmp_path, runner)
    finally:
        _admin(pg_database, "DROP OWNED BY runner", "DROP ROLE runner")
    assert done["rc"] == 0 and "messages" in str(done["stdout"]), done
