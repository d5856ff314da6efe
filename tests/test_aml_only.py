"""`mateclaw-mem serve --aml-only` (issue 40): the Add/Search service alone, as a real process, over
SQLite and over a real PostgreSQL - the contract (`aml check`), nothing but its files, many daemons
over one database, and a lost database answered 503 with the reason, then recovered without a restart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from mateclaw_mem.conversations.aml_check import check
from tests.test_daemon_e2e import Daemon, wait_for

POSTGRES_CONFIG = "timezone: Europe/Berlin\naml:\n  store: postgresql\n"


class AmlOnly(Daemon):
    """`serve --aml-only` as a real process; `env` adds variables (the DSN) to the scrubbed environment."""

    def __init__(self, tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        super().__init__(tmp_path, "--aml-only", *extra)
        self.extra_env = env or {}

    def env(self) -> dict[str, str]:
        return {**super().env(), **self.extra_env}


def _add(client: httpx.Client, rid: str, text: str, user: str = "u1") -> httpx.Response:
    return client.post("/v1/aml/add", json={"request_id": rid, "user_id": user, "session_id": "s1",
                                            "messages": [{"role": "user", "content": text,
                                                          "timestamp": 1683554160000}]})


def _contents(client: httpx.Client, query: str, user: str = "u1") -> list[str]:
    r = client.post("/v1/aml/search", json={"query": query, "user_id": user, "top_k": 5})
    assert r.status_code == 200, r.text
    return [item["content"] for item in r.json()["data"]]


def _run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
    return subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", *args], cwd=tmp_path, text=True,
                          capture_output=True, timeout=60, env={**base, **(env or {})}, check=False)


# -- SQLite --------------------------------------------------------------------------------------------


def test_sqlite_daemon_serves_the_contract_and_writes_nothing_but_its_databases(tmp_path: Path) -> None:
    daemon = AmlOnly(tmp_path).start()
    try:
        report = check(daemon.url)
        assert report.ok, report.lines()
        with daemon.client() as client:
            health = client.get("/health").json()
            assert (health["role"], health["store"]["backend"], health["store"]["state"]) == (
                "aml-only", "sqlite", "ok")
            assert client.get("/api/v1/memory/default/files").status_code == 404  # no workspace face
            assert client.get("/mcp").status_code == 404
            assert client.get("/docs").status_code == 200
            paths = set(client.get("/openapi.json").json()["paths"])
            assert paths == {"/health", "/api/v1/status", "/v1/aml/add", "/v1/aml/search", "/v1/aml/users/{user_id}"}
            assert _add(client, "r1", "I adopted a cat named Miso").status_code == 200
            assert any("Miso" in c for c in _contents(client, "cat named"))
    finally:
        assert daemon.stop() == 0
    # No agent folder, no seeded memory file, no index.db: only the Add/Search databases.
    made = {p.relative_to(daemon.workspace).as_posix() for p in daemon.workspace.rglob("*")}
    assert ".mateclaw/daemon.json" not in made  # removed at the stop
    # (.mateclaw/journal: the check's users deleted, each delete journaled and its journal gone after)
    assert made <= {".mateclaw", ".mateclaw/daemon.lock", ".mateclaw/journal",
                    *(f".mateclaw/{db}.db{s}" for db in ("log", "messages") for s in ("", "-wal", "-shm"))}, made
    assert {".mateclaw/log.db", ".mateclaw/messages.db"} <= made
    # And what it stored is the full daemon's Add/Search data: found by the full daemon, unchanged.
    full = Daemon(tmp_path).start()
    try:
        with full.client() as client:
            assert any("Miso" in c for c in _contents(client, "cat named"))
    finally:
        full.stop()


def test_a_second_sqlite_daemon_on_the_workspace_is_refused_naming_postgresql(tmp_path: Path) -> None:
    first = AmlOnly(tmp_path).start()
    try:
        # `status` of the workspace finds the daemon (its pid file) and shows its parts.
        status = _run(tmp_path, "status", "--workspace", str(first.workspace), "--config", str(first.config))
        assert first.proc is not None
        assert f"daemon: running (pid {first.proc.pid}, {first.url}" in status.stdout, status.stdout + status.stderr
        assert "WAL checkpoints: running" in status.stdout
        second = _run(tmp_path, "serve", "--aml-only", "--workspace", str(first.workspace), "--config",
                      str(first.config), "--port", "0")
        assert second.returncode == 5, second.stderr
        assert "aml.store: postgresql" in second.stderr and "Traceback" not in second.stderr
    finally:
        first.stop()


def test_the_full_daemon_refuses_a_postgresql_store_naming_aml_only(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(POSTGRES_CONFIG, encoding="utf-8")
    done = _run(tmp_path, "serve", "--workspace", str(tmp_path / "ws"), "--config", str(tmp_path / "c.yaml"),
                "--port", "0")
    assert done.returncode == 6, done.stderr
    assert "serve --aml-only" in done.stderr
    assert not (tmp_path / "ws").exists()


def test_listening_beyond_loopback_needs_a_key(tmp_path: Path) -> None:
    done = _run(tmp_path, "serve", "--aml-only", "--workspace", str(tmp_path / "ws"), "--host", "0.0.0.0",
                "--port", "0")
    assert done.returncode == 6, done.stderr
    assert "needs an API key" in done.stderr and "MATECLAW_API_KEY" in done.stderr
    assert not (tmp_path / "ws").exists()


def test_sigterm_during_a_hanging_fact_extraction_stops_cleanly_and_the_job_runs_at_the_next_start(
        tmp_path: Path) -> None:
    """Model mode: a fact job waits on a model that never answers when SIGTERM comes. Its call is
    cancelled before the stop's deadline, so the daemon stops cleanly (0, not a forced exit's 143),
    and the job, still queued, is sent to the model again by the next start."""
    from tests.support.model_server import Answer, ModelServer

    config = "timezone: UTC\nmodel:\n  base-url: {url}\n  model: test-model\n  timeout-seconds: 300\n"
    for answer in (Answer(content={"facts": []}, delay=120), Answer(content={"facts": []})):
        with ModelServer(responder=lambda body, answer=answer: answer) as model:
            (tmp_path / "mateclaw.yaml").write_text(config.replace("{url}", model.base_url), encoding="utf-8")
            daemon = AmlOnly(tmp_path).start()
            try:
                if answer.delay:
                    with daemon.client() as client:
                        assert _add(client, "r1", "I adopted a cat named Miso").status_code == 200
                wait_for(lambda: any("Miso" in json.dumps(q.body) for q in model.chat_requests),
                         "the fact job's call to the model")
            finally:
                assert daemon.stop() == 0, daemon.log()
            if answer.delay:
                assert "cancelling the model calls still running" in daemon.log()
