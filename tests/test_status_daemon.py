"""`status` beside a running daemon asks the daemon (`GET /api/v1/status`) instead of building every
service itself; anything short of a full answer from that daemon falls back to the local report."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx
import pytest
import yaml

from mateclaw_mem.cli.main import main
from mateclaw_mem.runtime import pidfile
from mateclaw_mem.runtime.daemon_status import DEFAULT_KEY_ENV, STATUS_PATH, from_daemon
from mateclaw_mem.settings import ServerSettings, load_settings

KEY_ENV = "MATECLAW_TEST_STATUS_KEY"
KEY = "s3cret-status-key"
# What `status` prints as lines of its own; every other key is a nested report.
_SHOWN_AS_LINES = ("mode", "model", "workspace", "workspace_source", "config", "config_source", "daemon",
                   "owner_isolation", "agents", "prompt_budget", "model_health")


def run(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, str]]:
    """A real daemon with an API key (named by the config's server.api-key-env): (workspace, config, url)."""
    from mateclaw_mem.api.app import create_app
    from mateclaw_mem.runtime.daemon import Daemon
    from mateclaw_mem.runtime.services import Services

    root = tmp_path_factory.mktemp("status")
    cfg = root / "mateclaw.yaml"
    cfg.write_text(f"timezone: UTC\nserver:\n  api-key-env: {KEY_ENV}\n", encoding="utf-8")
    ws = root / "ws"
    os.environ[KEY_ENV] = KEY
    try:
        d = Daemon(Services(load_settings(cfg, ws)), host="127.0.0.1", port=0,
                   app_factory=lambda s, host: create_app(s, host=host))
        d.start()
        try:
            yield ws, cfg, d.url
        finally:
            d.stop()
    finally:
        os.environ.pop(KEY_ENV, None)


@pytest.fixture()
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def _from_the_daemon(report: dict) -> bool:
    # Only the daemon has its watcher in hand: a local report names its state and nothing more.
    return "restarts" in report["index"]["watcher"]


def test_the_status_route_needs_the_key_and_says_which_daemon_answers(daemon: tuple[Path, Path, str]) -> None:
    ws, _, url = daemon
    with httpx.Client(base_url=url, timeout=30) as c:
        assert c.get(STATUS_PATH).status_code == 401  # paths, file names, last writes: not for anyone
        assert c.get(STATUS_PATH, headers={"X-Api-Key": "wrong"}).status_code == 403
        r = c.get(STATUS_PATH, headers={"Authorization": f"Bearer {KEY}"})
        assert r.status_code == 200, r.text
        report = r.json()
        assert report["daemon"]["running"] and report["daemon"]["pid"] == os.getpid()
        assert report["daemon"]["url"] == url and report["daemon"]["health"]["status"] == "ok"
        assert report["workspace"] == str(ws.resolve()) and "default" in report["agents"]
        assert report["index"]["watcher"]["state"] == f"running (in the daemon, pid {os.getpid()})"
        one = c.get(STATUS_PATH, params={"agent": "default"}, headers={"X-Api-Key": KEY}).json()
        assert list(one["agents"]) == ["default"]
        missing = c.get(STATUS_PATH, params={"agent": "nobody"}, headers={"X-Api-Key": KEY})
        assert missing.status_code == 404 and "nobody" in missing.text


def test_status_asks_the_daemon_with_the_key_the_config_names(
        daemon: tuple[Path, Path, str], key: None, capsys: pytest.CaptureFixture) -> None:
    ws, cfg, url = daemon
    asked = from_daemon(str(cfg), str(ws), None)
    assert asked is not None and _from_the_daemon(asked)
    assert asked["workspace_source"] == "--workspace"  # how this command found it, not how the daemon did
    code, out, _ = run(capsys, "--workspace", str(ws), "--config", str(cfg), "status", "--json")
    data = json.loads(out)
    assert code == 0 and _from_the_daemon(data) and data["daemon"]["pid"] == os.getpid()
    assert data["agents"].keys() == asked["agents"].keys()
    code, out, _ = run(capsys, "--workspace", str(ws), "--config", str(cfg), "status", "--all")
    lines = out.splitlines()
    assert code == 0 and lines[1] == f"workspace: {ws.resolve()}  (from --workspace)"
    assert lines[3].startswith(f"daemon: running (pid {os.getpid()}, {url}, since ")
    assert "file watcher: running" in lines[4] and "agent default" in out
    # The nested reports (cli/yaml_block.py, no PyYAML on this path) read back as the JSON's values.
    nested = yaml.safe_load(out[out.index("\nindex:\n"):])
    assert list(nested) == [k for k in data if k not in _SHOWN_AS_LINES]
    assert nested["index"]["watcher"]["state"] == data["index"]["watcher"]["state"]
    assert nested["dreaming"]["enabled"] is data["dreaming"]["enabled"] and nested["index"]["built"] is True


def test_a_bad_setting_is_exit_6_while_a_daemon_runs_as_for_every_command(
        daemon: tuple[Path, Path, str], key: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    # Issue 38.9: status answered the daemon's report (exit 0) with a setting `ls` refused (exit 6).
    ws, cfg, _ = daemon
    monkeypatch.setenv("MATECLAW_MATE__MEMORY__COOLDOWN_MINUTES", "soon")
    for command in ("status", "ls"):
        code, out, err = run(capsys, "--workspace", str(ws), "--config", str(cfg), command)
        assert code == 6 and "cooldown" in err and out == "", (command, code, out, err)


def test_status_is_short_by_default_and_whole_with_all(
        daemon: tuple[Path, Path, str], key: None, capsys: pytest.CaptureFixture) -> None:
    ws, cfg, _ = daemon
    code, short, _ = run(capsys, "--workspace", str(ws), "--config", str(cfg), "status")
    code_all, whole, _ = run(capsys, "--workspace", str(ws), "--config", str(cfg), "status", "--all")
    assert code == code_all == 0
    assert len(short.splitlines()) <= 40 < len(whole.splitlines()), (len(short.splitlines()), short)
    assert "\nindex:\n" not in short and "\nindex:\n" in whole  # the nested reports: --all's
    assert "index: " in short and "dreaming: next run " in short and "status --all" in short
    assert short.splitlines()[:4] == whole.splitlines()[:4]  # mode, workspace, config, daemon: both


def test_without_the_key_status_reports_locally_and_still_names_the_daemon(
        daemon: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    ws, cfg, _ = daemon
    monkeypatch.delenv(KEY_ENV, raising=False)
    assert from_daemon(str(cfg), str(ws), None) is None  # 401: not an answer
    code, out, _ = run(capsys, "--workspace", str(ws), "--config", str(cfg), "status", "--json")
    data = json.loads(out)
    assert code == 0 and not _from_the_daemon(data)
    assert data["daemon"]["running"] and data["index"]["watcher"]["state"].startswith("running (in the daemon")


def test_an_unknown_agent_is_refused_as_before_while_a_daemon_runs(
        daemon: tuple[Path, Path, str], key: None, capsys: pytest.CaptureFixture) -> None:
    ws, cfg, _ = daemon
    code, _, err = run(capsys, "--workspace", str(ws), "--config", str(cfg), "status", "nobody")
    assert code == 3 and "nobody" in err
    code, out, _ = run(capsys, "--workspace", str(ws), "--config", str(cfg), "status", "default", "--json")
    data = json.loads(out)
    assert code == 0 and list(data["agents"]) == ["default"] and _from_the_daemon(data)


class _Impostor(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"pid": 1, "daemon": {"pid": 1}, "workspace": "/elsewhere", "agents": {}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


def test_a_record_answered_by_another_process_is_not_believed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ws = tmp_path / "ws"
    assert run(capsys, "--workspace", str(ws), "init")[0] == 0
    server = HTTPServer(("127.0.0.1", 0), _Impostor)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        # Our own pid is alive, so the record counts as live; the answer names pid 1, not us.
        pidfile.write(ws / ".mateclaw", pidfile.DaemonRecord(os.getpid(), url, "x", "0"))
        assert from_daemon(None, str(ws), None) is None
        code, out, _ = run(capsys, "--workspace", str(ws), "status", "--json")
        assert code == 0 and json.loads(out)["daemon"]["health_error"]  # the local report says what is wrong
    finally:
        server.shutdown()
        server.server_close()


def test_no_daemon_and_a_closed_port_are_no_answer(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ws = tmp_path / "ws"
    assert run(capsys, "--workspace", str(ws), "init")[0] == 0
    assert from_daemon(None, str(ws), None) is None  # no daemon.json
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    pidfile.write(ws / ".mateclaw", pidfile.DaemonRecord(os.getpid(), f"http://127.0.0.1:{closed}", "x", "0"))
    assert from_daemon(None, str(ws), None) is None
    code, out, _ = run(capsys, "--workspace", str(ws), "status")
    assert code == 0 and "not answering" in out


def test_the_key_variable_defaults_as_the_settings_do() -> None:
    # status finds the key without the settings model: its default must not drift from the model's.
    assert ServerSettings().api_key_env == DEFAULT_KEY_ENV
