"""Where the CLI finds its settings and workspace (the same from any folder), that reading never
creates a workspace, and that `status` asks the running daemon (issue 16, points 4, 5 and 10)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mateclaw_mem.cli.main import main
from mateclaw_mem.errors import ConfigError, ConflictError
from mateclaw_mem.locations import checkout_config
from mateclaw_mem.runtime import pidfile
from mateclaw_mem.settings import load_settings
from mateclaw_mem.workspace.store import WorkspaceStore

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder that is not the repo, as cwd; no MATECLAW_ variable; the user's folders in tmp_path."""
    for key in [k for k in os.environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key)
    cwd = tmp_path / "somewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    return cwd


def run(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# -- where --------------------------------------------------------------------------------------


def test_a_config_files_relative_workspace_is_relative_to_the_file_not_the_current_folder(
        elsewhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg_dir = tmp_path / "conf"
    cfg_dir.mkdir()
    cfg = cfg_dir / "mateclaw.yaml"
    cfg.write_text("workspace: ../mem\n", encoding="utf-8")
    s = load_settings(cfg)
    assert s.workspace == tmp_path / "mem" and s.workspace_source == f"config {cfg}"
    monkeypatch.chdir(tmp_path)  # another folder, the same answer
    assert load_settings(cfg).workspace == tmp_path / "mem"
    # The environment beats the file, --workspace beats both; both are relative to where they are typed.
    monkeypatch.setenv("MATECLAW_WORKSPACE", "from-env")
    s = load_settings(cfg)
    assert (s.workspace, s.workspace_source) == (tmp_path / "from-env", "MATECLAW_WORKSPACE")
    s = load_settings(cfg, "typed")
    assert (s.workspace, s.workspace_source) == (tmp_path / "typed", "--workspace")


def test_without_any_setting_the_user_default_is_used_and_the_user_config_wins(
        elsewhere: Path, tmp_path: Path) -> None:
    s = load_settings()
    # Running from the checkout (an editable install), its shipped config is found from anywhere ...
    assert checkout_config() == REPO / "config" / "mateclaw.yaml"
    assert s.config_path == REPO / "config" / "mateclaw.yaml" and s.config_source == "source checkout"
    assert s.workspace == REPO / "workspace"  # ... and names the checkout's workspace/, as run.sh uses
    # A user-level config is preferred; without a `workspace:` key the user-level data folder is used.
    user = tmp_path / "xdg-config" / "mateclaw-mem" / "mateclaw.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("default-agent: me\n", encoding="utf-8")
    s = load_settings()
    assert (s.config_path, s.config_source, s.default_agent) == (user, "user config", "me")
    assert (s.workspace, s.workspace_source) == (tmp_path / "xdg-data" / "mateclaw-mem" / "workspace", "user default")


def test_init_and_serve_use_the_user_default_and_status_names_it(
        elsewhere: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    user = tmp_path / "xdg-config" / "mateclaw-mem" / "mateclaw.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("timezone: UTC\n", encoding="utf-8")
    ws = tmp_path / "xdg-data" / "mateclaw-mem" / "workspace"
    assert run(capsys, "init")[0] == 0
    assert (ws / "default" / "AGENTS.md").is_file() and not (elsewhere / "workspace").exists()
    code, out, _ = run(capsys, "status")
    assert code == 0
    assert f"workspace: {ws}  (from user default)" in out and f"config: {user}  (user config)" in out


def test_a_bad_environment_value_is_blamed_on_the_variable_not_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MATECLAW_MATE__MEMORY__COOLDOWN_MINUTES", "abc")
    with pytest.raises(ConfigError) as err:
        load_settings(REPO / "config" / "mateclaw.yaml")
    assert "environment variable MATECLAW_MATE__MEMORY__COOLDOWN_MINUTES" in err.value.message
    assert "mate.memory.cooldown-minutes" in err.value.message and "mateclaw.yaml" not in err.value.message


# -- reading creates nothing ---------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ("status",), ("ls",), ("cat", "default", "MEMORY.md"), ("search", "tea"), ("context", "default"),
    ("history", "default", "MEMORY.md"), ("recall", "default"),
])
def test_reading_a_missing_workspace_says_so_exits_3_and_creates_nothing(
        elsewhere: Path, tmp_path: Path, capsys: pytest.CaptureFixture, args: tuple[str, ...]) -> None:
    ws = tmp_path / "typo"
    code, _, err = run(capsys, "--workspace", str(ws), *args)
    assert code == 3 and f"no workspace at {ws} (from --workspace)" in err and "mateclaw-mem init" in err
    assert not ws.exists() and list(elsewhere.iterdir()) == []


def test_serve_on_a_busy_port_fails_before_it_touches_the_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
        proc = subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", "serve", "--workspace", str(ws),
                               "--port", str(port)], capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 6 and f"cannot listen on 127.0.0.1:{port}" in proc.stderr, proc.stderr
    assert not ws.exists()


# -- status, the daemon and the smaller items ------------------------------------------------------


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, str]]:
    """A real daemon (workers, watcher, scheduler, uvicorn) in this process: (workspace, config, url)."""
    from mateclaw_mem.api.app import create_app
    from mateclaw_mem.runtime.daemon import Daemon
    from mateclaw_mem.runtime.services import Services

    root = tmp_path_factory.mktemp("daemon")
    cfg = root / "mateclaw.yaml"
    cfg.write_text("timezone: UTC\n", encoding="utf-8")
    ws = root / "ws"
    d = Daemon(Services(load_settings(cfg, ws)), host="127.0.0.1", port=0,
               app_factory=lambda s, host: create_app(s, host=host))
    d.start()
    try:
        yield ws, cfg, d.url
    finally:
        d.stop()
    assert not pidfile.path_in(ws / ".mateclaw").exists()  # removed at stop


def test_status_asks_the_running_daemon(daemon: tuple[Path, Path, str], capsys: pytest.CaptureFixture) -> None:
    ws, cfg, url = daemon
    record = json.loads((ws / ".mateclaw" / "daemon.json").read_text(encoding="utf-8"))
    assert record["pid"] == os.getpid() and record["url"] == url
    code, out, _ = run(capsys, "--workspace", str(ws), "--config", str(cfg), "status")
    assert code == 0
    lines = out.splitlines()
    assert lines[3].startswith(f"daemon: running (pid {os.getpid()}, {url}, since ")
    assert "extraction workers: running" in lines[4] and "file watcher: running" in lines[4]
    assert "scheduler: running" in lines[4] and lines[5].startswith("  next runs: dreaming ")
    assert "watcher: not running" not in out
    data = json.loads(run(capsys, "--workspace", str(ws), "--config", str(cfg), "status", "--json")[1])
    assert data["daemon"]["health"]["background"]["scheduler"] == "running"
    assert data["index"]["watcher"]["state"].startswith("running (in the daemon")


def test_http_search_defaults_to_every_scope_as_the_readme_says(daemon: tuple[Path, Path, str]) -> None:
    _, _, url = daemon
    with httpx.Client(base_url=url, timeout=30) as c:
        r = c.post("/api/v1/memory/default/conversations/s1/turns",
                   json={"user": "We talked about the quokka sanctuary today.", "assistant": "Lovely."})
        assert r.status_code == 202, r.text
        hits = c.get("/api/v1/agents/default/workspace/memory/search", params={"q": "quokka"}).json()["hits"]
    assert any(h["file"].startswith("conversations/") for h in hits), hits


def test_without_a_daemon_status_says_so_and_ignores_a_stale_pid_file(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ws = tmp_path / "ws"
    assert run(capsys, "--workspace", str(ws), "init")[0] == 0
    code, out, _ = run(capsys, "--workspace", str(ws), "status")
    assert code == 0 and out.splitlines()[3] == "daemon: not running"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pidfile.write(ws / ".mateclaw", pidfile.DaemonRecord(int(dead.stdout), "http://127.0.0.1:9", "x", "0"))
    code, out, _ = run(capsys, "--workspace", str(ws), "status")
    assert out.splitlines()[3] == f"daemon: not running (stale pid file of pid {int(dead.stdout)} ignored)"


def test_status_aligns_its_columns_and_lists_hand_edits(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ws = tmp_path / "ws"
    assert run(capsys, "--workspace", str(ws), "init")[0] == 0
    profile = ws / "default" / "PROFILE.md"
    profile.write_text(profile.read_text(encoding="utf-8") + "\n- likes tea\n", encoding="utf-8")
    os.utime(profile, (2_000_000_000, 2_000_000_000))  # later than every recorded write
    out = run(capsys, "--workspace", str(ws), "status")[1].splitlines()
    rows = [line for line in out if line.endswith(("  MEMORY.md", "  structured block"))]
    assert len(rows) == 2
    # The budget column ends in the same place in every row, and so does the tokens column.
    ends = {tuple(m.end() for m in list(re.finditer(r"\S+", row))[:2]) for row in rows}
    assert len(ends) == 1, rows
    writes = out[out.index("  last writes:") + 1:]
    assert "you" in writes[0] and "PROFILE.md" in writes[0] and "(hand edit)" in writes[0]


def test_ls_of_an_empty_prefix_says_what_is_empty(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ws = tmp_path / "ws"
    assert run(capsys, "--workspace", str(ws), "init")[0] == 0
    code, out, _ = run(capsys, "--workspace", str(ws), "ls", "--prefix", "memory/")
    assert code == 0 and out.strip() == "no files under memory/"


def test_undoing_a_run_twice_says_it_was_undone(store: WorkspaceStore) -> None:
    before = store.read("default", "MEMORY.md").text
    store.write("default", "MEMORY.md", before + "\n## Dreamt\n- a fact\n", expected_sha=None, actor="dreaming",
                batch="dream-default-1")
    store.undo_batch("dream-default-1")
    assert store.read("default", "MEMORY.md").text == before
    with pytest.raises(ConflictError) as err:
        store.undo_batch("dream-default-1")
    assert "run dream-default-1 was already undone (run undo-dream-default-1 at " in err.value.message


def test_a_second_serve_on_the_daemons_port_is_told_the_daemon_runs(daemon: tuple[Path, Path, str]) -> None:
    ws, cfg, url = daemon
    env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
    proc = subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", "serve", "--workspace", str(ws),
                           "--config", str(cfg), "--port", url.rsplit(":", 1)[1]], capture_output=True, text=True,
                          env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 5 and f"(pid {os.getpid()}) is already running" in proc.stderr, proc.stderr
