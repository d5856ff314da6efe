"""The Add/Search contract served over either store, in-process, on real HTTP: SQLite through the full
daemon's app (`serve_api`), PostgreSQL through `serve --aml-only`'s app over a real server's fresh
database (tests/support/postgres.py). A test module's `client` fixture parametrised with `STORES`
runs its contract tests on both, unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server import ApiServer, serve_api

STORES = ("sqlite", "postgresql")


def serve_store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                **overrides: object) -> Iterator[httpx.Client]:
    """`request.param` is the store; PostgreSQL takes the `pg_database` fixture (skipped, with the
    reason, where no server can start)."""
    if request.param == "sqlite":
        yield from serve_api(tmp_path / "ws", seed=False, **overrides)
        return
    dsn = request.getfixturevalue("pg_database")
    yield from serve_aml_only(tmp_path, dsn, monkeypatch)


def serve_aml_only(tmp_path: Path, dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[httpx.Client]:
    from mateclaw_mem.api.aml_only_app import create_aml_only_app
    from mateclaw_mem.runtime.aml_only import open_node
    from mateclaw_mem.settings import load_settings

    cfg = tmp_path / "aml-only.yaml"
    cfg.write_text("aml:\n  store: postgresql\n", encoding="utf-8")
    monkeypatch.setenv("MATECLAW_PG_DSN", dsn)
    node = open_node(load_settings(cfg, tmp_path / "ws"))
    try:
        node.start()
        with ApiServer(create_aml_only_app(node)) as server, httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        node.close()
