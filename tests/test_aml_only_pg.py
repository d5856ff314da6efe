"""`serve --aml-only` over a real PostgreSQL (issue 40): many daemons are one service (read-after-write,
idempotency across daemons), the DSN's variable named when missing, and a lost database answered 503
with the reason, then recovered without a restart. SQLite's half: tests/test_aml_only.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from mateclaw_mem.conversations.aml_check import check
from tests.support.postgres import PostgresServer
from tests.test_aml_only import POSTGRES_CONFIG, AmlOnly, _add, _contents, _run
from tests.test_daemon_e2e import wait_for


def _pg_daemon(tmp_path: Path, dsn: str, name: str = "a", variable: str = "MATECLAW_PG_DSN") -> AmlOnly:
    """A daemon of its own folder (config, log, a workspace it must never create) reading `variable`."""
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    daemon = AmlOnly(folder, env={variable: dsn})
    daemon.config.write_text(POSTGRES_CONFIG + f"  postgres-dsn-env: {variable}\n", encoding="utf-8")
    return daemon


def test_postgresql_without_its_variable_stops_naming_it(tmp_path: Path, pg_database: str) -> None:
    (tmp_path / "c.yaml").write_text(POSTGRES_CONFIG, encoding="utf-8")
    done = _run(tmp_path, "serve", "--aml-only", "--workspace", str(tmp_path / "ws"), "--config",
                str(tmp_path / "c.yaml"), "--port", "0")
    assert done.returncode == 6, done.stderr
    assert "MATECLAW_PG_DSN" in done.stderr and "Traceback" not in done.stderr
    # A database it cannot reach: exit 8, the cause named (not only "no connection within 5 s").
    missing = pg_database.rsplit("=", 1)[0] + "=no_such_database"
    done = _run(tmp_path, "serve", "--aml-only", "--workspace", str(tmp_path / "ws"), "--config",
                str(tmp_path / "c.yaml"), "--port", "0", env={"MATECLAW_PG_DSN": missing})
    assert done.returncode == 8, done.stderr
    assert 'database "no_such_database" does not exist' in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "ws").exists()


def test_two_daemons_over_one_postgresql_are_one_service(tmp_path: Path, pg_database: str) -> None:
    a = _pg_daemon(tmp_path, pg_database).start()
    b = _pg_daemon(tmp_path, pg_database, "b", variable="STORE_DSN_OF_B").start()  # aml.postgres-dsn-env
    try:
        assert check(a.url).ok and check(b.url).ok
        with a.client() as ca, b.client() as cb:
            health = cb.get("/health").json()
            assert health["store"]["backend"] == "postgresql" and health["store"]["state"] == "ok", health
            first = _add(ca, "r1", "My sister Lena moved to Porto in March")
            assert first.status_code == 200, first.text
            # Read-after-write on the other daemon, at once.
            assert any("Porto" in c for c in _contents(cb, "where did Lena move"))
            # The retry lands on the other daemon: the same bytes, one stored copy; a changed body is a 409.
            again = _add(cb, "r1", "My sister Lena moved to Porto in March")
            assert (again.status_code, again.content) == (200, first.content)
            assert sum("Porto" in c for c in _contents(ca, "Lena Porto")) == 1
            assert _add(cb, "r1", "something else").status_code == 409
    finally:
        a.stop()
        b.stop()
    assert not a.workspace.exists() and not b.workspace.exists(), "a PostgreSQL daemon wrote files on this machine"


def test_a_lost_database_is_a_503_with_the_reason_and_the_daemon_recovers(
        tmp_path: Path, pg_server: PostgresServer, pg_database: str) -> None:
    daemon = _pg_daemon(tmp_path, pg_database).start()
    try:
        with daemon.client() as client:
            assert _add(client, "before", "The boat is called Albatross").status_code == 200
            pg_server.stop_server()
            try:
                r = _add(client, "during", "The car is called Rocinante")
                assert r.status_code == 503, r.text
                assert r.headers["retry-after"] == "1"
                assert r.json()["detail"]["reason"], r.text
                s = client.post("/v1/aml/search", json={"query": "boat", "user_id": "u1", "top_k": 3})
                assert s.status_code == 503 and s.json()["detail"]["reason"]
                h = client.get("/health")
                assert h.status_code == 503 and h.json()["store"]["state"] == "unavailable", h.text
                assert "password" not in h.text.lower()
            finally:
                pg_server.restart_server()
            # Back by itself: no restart of the daemon.
            wait_for(lambda: _add(client, "during", "The car is called Rocinante").status_code == 200,
                     "the daemon to answer again once the database is back")
            assert any("Albatross" in c for c in _contents(client, "boat called"))
            assert any("Rocinante" in c for c in _contents(client, "car called"))
            assert client.get("/health").json()["store"]["state"] == "ok"
            # Every connection of the pool cut under the daemon (a failover, an idle timeout): no 500.
            import psycopg

            with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = %s AND pid <> pg_backend_pid()", [pg_database.rsplit("=", 1)[1]])
            statuses = [_add(client, f"after-{i}", f"note {i} about the kite").status_code for i in range(5)]
            assert set(statuses) <= {200, 503}, statuses
            wait_for(lambda: _add(client, "after-x", "the kite is red").status_code == 200, "recovery after a cut")
            assert len([c for c in _contents(client, "kite") if "kite" in c]) >= 1
        assert daemon.stop() == 0
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()


def test_the_kill_9_campaign_at_its_smallest_loses_and_duplicates_nothing(pg_database: str) -> None:
    """scripts/bench/aml_cluster.py, briefly: 3 daemons, concurrent double deliveries, searches on other
    daemons, kill -9 every 1-2 s; it exits non-zero when any failure counter (lost, duplicated,
    read-after-write miss, replay mismatch, changed body not 409, other 5xx) is not 0."""
    import re
    import subprocess
    import sys

    bench = Path(__file__).resolve().parents[1] / "scripts" / "bench" / "aml_cluster.py"
    done = subprocess.run([sys.executable, str(bench), "--seconds", "6", "--workers", "3", "--kill-min", "1",
                           "--kill-max", "2", "--dsn", pg_database], capture_output=True, text=True, timeout=240,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    rows = (re.match(r"^(.+?)\s{2,}(\S.*)$", line) for line in done.stdout.splitlines()[1:-1])
    counts = dict(m.groups() for m in rows if m)
    assert int(counts["kill -9 of a daemon (restarted)"]) >= 1, done.stdout  # the campaign really killed
    assert int(counts["Adds acknowledged"]) > 0, done.stdout
    assert counts["acknowledged Adds lost"] == "0" and counts["acknowledged Adds duplicated"] == "0", done.stdout


def test_the_postgresql_service_is_given_the_settings_reranker(tmp_path: Path, pg_database: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """aml.rerank reaches the PostgreSQL service as it reaches the SQLite one (not silently dropped)."""
    from mateclaw_mem.runtime.aml_only import open_node
    from mateclaw_mem.settings import load_settings

    monkeypatch.setenv("MATECLAW_PG_DSN", pg_database)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(POSTGRES_CONFIG + "  rerank:\n    url: http://127.0.0.1:9/v1/rerank\n    top-n: 5\n",
                   encoding="utf-8")
    node = open_node(load_settings(cfg, tmp_path / "ws"))
    try:
        assert node.backend == "postgresql" and node.aml.reranker is not None
        assert (node.aml.reranker.settings.url, node.aml.reranker.settings.top_n) == ("http://127.0.0.1:9/v1/rerank", 5)
    finally:
        node.close()
