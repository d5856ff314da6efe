"""Pytest fixtures for a real PostgreSQL (tests/support/postgres.py). Imported by tests/conftest.py.

    pg_server    session: the running PostgresServer (started on first use, stopped at session end)
    pg_dsn       session: its maintenance database's DSN (`dbname=postgres`: create or drop databases)
    pg_database  function: the DSN of a fresh, empty database of its own, dropped after the test

They skip the test with the reason when no PostgreSQL can be started here (no binaries, no
`postgres` user as root, initdb or start failed); with `CI_REQUIRE_POSTGRES=1` (`.ci/run`) they fail
instead, so CI never passes by skipping the PostgreSQL half.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.postgres import PostgresServer, PostgresUnavailable


def _unavailable(reason: str) -> None:
    message = f"no PostgreSQL for this test: {reason}"
    if os.environ.get("CI_REQUIRE_POSTGRES") == "1":
        pytest.fail(message + " (CI_REQUIRE_POSTGRES=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("the psycopg driver is not installed (pip install -e '.[postgresql]')")
    try:
        server = PostgresServer.start()
    except PostgresUnavailable as exc:
        _unavailable(str(exc))
        raise  # unreachable: _unavailable raises
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_dsn(pg_server: PostgresServer) -> str:
    return pg_server.dsn()


@pytest.fixture
def pg_database(pg_server: PostgresServer) -> Iterator[str]:
    dsn = pg_server.create_database()
    name = pg_server.databases[-1]
    try:
        yield dsn
    finally:
        if pg_server.running():
            pg_server.drop_database(name)
