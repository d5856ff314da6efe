"""The service examples in scripts/service/: each one parses as its tool reads it, and does what its
comments promise (no restart loop on exit 5/6, private file modes, a cron log outside the repo)."""

from __future__ import annotations

import os
import plistlib
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from apscheduler.triggers.cron import CronTrigger

from mateclaw_mem.cron import parse_cron

REPO = Path(__file__).resolve().parents[1]
SERVICE = REPO / "scripts" / "service"
WRAPPER = "scripts/service/launchd-serve.sh"

# ---------------------------------------------------------------------------- launchd


def test_launchd_plist_parses_and_stops_on_clean_exit() -> None:
    with (SERVICE / "com.mateclaw.mem.plist").open("rb") as f:
        plist = plistlib.load(f)
    assert plist["Label"] == "com.mateclaw.mem"
    bash, script = plist["ProgramArguments"]
    assert bash == "/bin/bash" and script.endswith("/" + WRAPPER)
    assert (REPO / WRAPPER).is_file()
    # Restart on failure only; the wrapper makes 5 and 6 a success.
    assert plist["KeepAlive"] == {"SuccessfulExit": False}
    assert plist["Umask"] == 0o077
    assert set(plist["EnvironmentVariables"]) == {"MATECLAW_WORKSPACE", "MATECLAW_CONFIG"}
    if shutil.which("plutil"):  # macOS only
        done = subprocess.run(["plutil", "-lint", str(SERVICE / "com.mateclaw.mem.plist")], capture_output=True)
        assert done.returncode == 0, done.stdout


def wrapper_tree(tmp_path: Path, daemon: str | None = None) -> Path:
    """A repo-shaped folder holding the wrapper and, as `.venv/bin/mateclaw-mem`, either a stand-in
    shell script (`daemon`) or, when None, the real venv."""
    (tmp_path / "scripts" / "service").mkdir(parents=True)
    shutil.copy(REPO / WRAPPER, tmp_path / WRAPPER)
    if daemon is None:
        (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    else:
        exe = tmp_path / ".venv" / "bin" / "mateclaw-mem"
        exe.parent.mkdir(parents=True)
        exe.write_text("#!/bin/sh\n" + daemon, encoding="utf-8")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return tmp_path


def test_wrapper_turns_a_real_configuration_error_into_a_clean_stop(tmp_path: Path) -> None:
    root = wrapper_tree(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("timezone: [unclosed\n", encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "MATECLAW_WORKSPACE": str(tmp_path / "ws"), "MATECLAW_CONFIG": str(bad)}
    direct = subprocess.run([str(root / ".venv/bin/mateclaw-mem"), "serve"], env=env, capture_output=True, timeout=120)
    assert direct.returncode == 6  # what launchd would otherwise restart every 10 s
    done = subprocess.run(["/bin/bash", str(root / WRAPPER)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert "not valid YAML" in done.stderr  # the daemon's own message is still in the log
    assert "exited 6 (configuration error); not restarting" in done.stderr


@pytest.mark.parametrize("code, expected", [(5, 0), (6, 0), (0, 0), (1, 1), (7, 7)])
def test_wrapper_passes_other_exit_codes_through(tmp_path: Path, code: int, expected: int) -> None:
    root = wrapper_tree(tmp_path, f"exit {code}\n")
    done = subprocess.run(["/bin/bash", str(root / WRAPPER)], capture_output=True, text=True, timeout=60)
    assert done.returncode == expected, done.stderr


def test_wrapper_forwards_sigterm_and_reports_the_daemons_exit(tmp_path: Path) -> None:
    ready, got = tmp_path / "ready", tmp_path / "got-term"
    # A daemon that takes a moment to shut down cleanly after SIGTERM, then exits 0.
    root = wrapper_tree(tmp_path, f"trap 'sleep 0.3; echo yes > {got}; exit 0' TERM\n"
                                  f"echo up > {ready}\nwhile :; do sleep 0.05; done\n")
    proc = subprocess.Popen(["/bin/bash", str(root / WRAPPER)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "stand-in daemon never started"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0  # the daemon's status, not the wrapper's 143
        assert got.read_text().strip() == "yes"
    finally:
        if proc.poll() is None:
            proc.kill()


# ---------------------------------------------------------------------------- systemd


def unit_entries(path: Path) -> list[tuple[str, str, str]]:
    section, entries = "", []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        entries.append((section, key.strip(), value.strip()))
    return entries


def test_systemd_unit_is_private_and_does_not_wait_for_the_network() -> None:
    entries = unit_entries(SERVICE / "mateclaw-mem.service")
    keys = {(s, k): v for s, k, v in entries}
    assert keys[("Service", "UMask")] == "0077"
    assert keys[("Service", "Restart")] == "on-failure"
    assert set(keys[("Service", "RestartPreventExitStatus")].split()) == {"5", "6"}
    for section, key, value in entries:
        if key in ("After", "Wants", "Requires", "Before"):
            assert "network" not in value, (section, key, value)


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the unit was only parsed, not verified")
    unit = tmp_path / "mateclaw-mem.service"
    shutil.copy(SERVICE / "mateclaw-mem.service", unit)
    # `verify` checks that ExecStart exists: give %h the layout the unit expects.
    exe = tmp_path / "mateclaw" / ".venv" / "bin" / "mateclaw-mem"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n", encoding="utf-8")
    exe.chmod(0o755)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(runtime)}
    done = subprocess.run([analyze, "--user", "verify", str(unit)], env=env, capture_output=True, text=True,
                          timeout=120)
    if "Failed to initialize manager" in done.stderr:  # no user manager possible here: check as a system unit
        done = subprocess.run([analyze, "verify", str(unit)], env=env, capture_output=True, text=True, timeout=120)
    complaints = [line for line in (done.stdout + done.stderr).splitlines() if unit.name in line]
    assert done.returncode == 0 and complaints == [], done.stdout + done.stderr


# ---------------------------------------------------------------------------- cron


def cron_entries() -> list[tuple[str, str]]:
    """(schedule, command) of every entry, the commented-out examples included."""
    entries = []
    for raw in (SERVICE / "crontab.example").read_text(encoding="utf-8").splitlines():
        line = raw.lstrip("# ").rstrip() if re.match(r"#\s*[0-9*]", raw) else raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(None, 5)
        entries.append((" ".join(fields[:5]), fields[5]))
    return entries


def test_crontab_lines_parse_and_log_outside_the_repo() -> None:
    entries = cron_entries()
    assert len(entries) == 2
    for schedule, command in entries:
        CronTrigger(**parse_cron(schedule).trigger_kwargs(), timezone="UTC")  # raises on a bad field
        assert not re.search(r"(?<!\\)%", command), "cron turns an unescaped % into a newline"
        assert "mateclaw-mem dream" in command
        assert command.startswith("umask 077; mkdir -p $HOME/.local/state/mateclaw-mem && ")
        assert command.endswith(">> $HOME/.local/state/mateclaw-mem/cron.log 2>&1")


def test_crontab_line_runs_as_cron_runs_it(tmp_path: Path) -> None:
    # cron: /bin/sh, $HOME set, almost nothing else. The repo lives at ~/mateclaw as the line assumes.
    repo = tmp_path / "mateclaw"
    (repo / "config").mkdir(parents=True)
    (repo / "config" / "mateclaw.yaml").write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    (repo / ".venv").symlink_to(Path(sys.executable).parents[1])
    # cron consolidates an existing workspace: reading never creates one (`init` or `serve` does).
    subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", "--workspace", str(tmp_path / "mateclaw" / "workspace"),
                    "--config", str(repo / "config" / "mateclaw.yaml"), "init"], check=True, capture_output=True,
                   env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=60)
    _, command = cron_entries()[0]
    done = subprocess.run(["/bin/sh", "-c", command], env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 10), done.stdout + done.stderr  # 10: no daily notes to consolidate yet
    log = tmp_path / ".local" / "state" / "mateclaw-mem" / "cron.log"
    assert "dream-default" in log.read_text(encoding="utf-8")
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert not list(repo.glob("*.log"))
    diary = repo / "workspace" / "default" / "DREAMS.md"
    assert stat.S_IMODE(diary.stat().st_mode) == 0o600  # the dream's own write, under umask 077
