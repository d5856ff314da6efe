"""scripts/setup.sh installs only when pyproject.toml or the requested extras changed.

Each test runs the real script in a temp copy of the repo whose `.venv/bin/python` is the real
interpreter, except that `python -m pip` is a stand-in that records its arguments, prints what
setuptools prints during an editable install and "installs" the `mateclaw-mem` entry point.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BANNER = "BuildBackendWarning: Editable installation."

STAND_IN = """#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  shift 2
  echo "$*" >> "$PIP_CALLS"
  echo "  {banner}" >&2
  if [ -n "${{PIP_FAIL:-}}" ]; then echo "ERROR: No matching distribution found for nothing" >&2; exit 1; fi
  printf '#!/bin/sh\\n' > .venv/bin/mateclaw-mem && chmod +x .venv/bin/mateclaw-mem
  exit 0
fi
exec "{python}" "$@"
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup.sh", root / "scripts" / "setup.sh")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STAND_IN.format(banner=BANNER, python=sys.executable), encoding="utf-8")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return root


def setup(repo: Path, *args: str, fail: bool = False,
          bytecode: bool = True) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run setup.sh (`bytecode` False: under PYTHONDONTWRITEBYTECODE=1); return its result and the
    pip calls it made."""
    calls = repo / "pip-calls"
    calls.unlink(missing_ok=True)
    env = {"PATH": "/usr/bin:/bin", "PIP_CALLS": str(calls), **({"PIP_FAIL": "1"} if fail else {}),
           **({} if bytecode else {"PYTHONDONTWRITEBYTECODE": "1"})}
    done = subprocess.run(["bash", str(repo / "scripts" / "setup.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=60)
    return done, calls.read_text().splitlines() if calls.exists() else []


def stamp(repo: Path) -> list[str]:
    return (repo / ".venv" / "setup-stamp").read_text().splitlines()


def test_first_setup_installs_once_says_so_and_hides_the_banner(repo: Path) -> None:
    done, calls = setup(repo, "--dev")
    assert done.returncode == 0, done.stderr
    assert calls == ["install --quiet --disable-pip-version-check -e .[dev]"]
    assert "installing mateclaw-mem and its dependencies" in done.stderr
    assert "done" in done.stderr
    assert BANNER not in done.stdout + done.stderr
    assert BANNER in (repo / ".venv" / "setup.log").read_text()  # kept, not lost
    digest = hashlib.sha256((repo / "pyproject.toml").read_bytes()).hexdigest()
    assert stamp(repo) == [digest, "dev"]


def test_second_setup_is_a_no_op(repo: Path) -> None:
    setup(repo, "--dev")
    for args in (["--dev"], []):  # plain run.sh after test.sh: the dev extras are a superset
        done, calls = setup(repo, *args)
        assert done.returncode == 0, done.stderr
        assert calls == []
        assert "up to date" in done.stderr


def test_dev_extra_missing_from_the_stamp_triggers_an_install(repo: Path) -> None:
    setup(repo)
    assert stamp(repo)[1] == ""
    done, calls = setup(repo, "--dev")  # scripts/test.sh after a first scripts/run.sh
    assert done.returncode == 0, done.stderr
    assert calls == ["install --quiet --disable-pip-version-check -e .[dev]"]
    assert stamp(repo)[1] == "dev"


def test_changed_pyproject_reinstalls_and_keeps_the_extras(repo: Path) -> None:
    setup(repo, "--dev")
    pyproject = repo / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n# a new dependency\n")
    done, calls = setup(repo)
    assert done.returncode == 0, done.stderr
    assert "pyproject.toml changed" in done.stderr
    assert calls == ["install --quiet --disable-pip-version-check -e .[dev]"]
    assert stamp(repo)[0] == hashlib.sha256(pyproject.read_bytes()).hexdigest()


def test_failed_install_shows_pip_output_and_is_retried(repo: Path) -> None:
    done, _ = setup(repo, fail=True)
    assert done.returncode == 1
    assert "No matching distribution" in done.stderr and ".venv/setup.log" in done.stderr
    assert not (repo / ".venv" / "setup-stamp").exists()
    done, calls = setup(repo)
    assert done.returncode == 0 and len(calls) == 1


def test_missing_entry_point_reinstalls_despite_the_stamp(repo: Path) -> None:
    setup(repo)
    (repo / ".venv" / "bin" / "mateclaw-mem").unlink()
    _, calls = setup(repo)
    assert len(calls) == 1


def test_unknown_argument_is_a_usage_error(repo: Path) -> None:
    done, calls = setup(repo, "--devv")
    assert done.returncode == 2 and "usage" in done.stderr and calls == []


def test_setup_writes_the_packages_bytecode_even_where_python_would_not(repo: Path) -> None:
    """A daemon started with PYTHONDONTWRITEBYTECODE=1 compiled every module from source at every
    start (an editable install's tree has no .pyc, and such a start writes none): setup writes them,
    on an install and on a run with nothing to install, and again after a module changed."""
    module = repo / "mateclaw_mem" / "probe.py"
    module.parent.mkdir()
    module.write_text("X = 1\n", encoding="utf-8")
    pyc = Path(importlib.util.cache_from_source(str(module)))
    for first in (True, False):
        pyc.unlink(missing_ok=True)
        done, calls = setup(repo, bytecode=False)
        assert done.returncode == 0, done.stderr
        assert bool(calls) is first
        assert pyc.exists()
    module.write_text("X = 22\n", encoding="utf-8")
    os.utime(module, (module.stat().st_atime, module.stat().st_mtime + 10))  # (compileall looks at whole seconds)
    stale = pyc.read_bytes()
    setup(repo, bytecode=False)
    assert pyc.read_bytes() != stale  # compiled again from the changed source

