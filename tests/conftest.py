from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from mateclaw_mem.workspace.store import WorkspaceStore

TZ = ZoneInfo("Europe/Berlin")


@pytest.fixture(autouse=True)
def _no_mateclaw_environment(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A developer's shell (MATECLAW_WORKSPACE, MATECLAW_MODEL__BASE_URL, ...) must not change results.

    Function-scoped fixtures and the test body run after this one, so a test that sets a MATECLAW_
    variable itself (monkeypatch.setenv) still gets it; monkeypatch puts the shell's values back after.
    The user's own config and data folders (XDG) point into a temp folder, and MATECLAW_CONFIG names
    an empty file: a test that forgets --workspace lands in that temp folder, never in the
    checkout's workspace/ (which the shipped config names) or the developer's ~/.local/share."""
    for key in [k for k in os.environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key)
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    empty = home / "empty.yaml"
    empty.write_text("{}\n", encoding="utf-8")
    monkeypatch.setenv("MATECLAW_CONFIG", str(empty))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 30, 9, 15, tzinfo=TZ))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path / "workspace"


@pytest.fixture
def store(workspace: Path, clock: ManualClock) -> WorkspaceStore:
    s = WorkspaceStore(workspace, clock=clock)
    s.ensure_agent("default")
    return s


@pytest.fixture
def settings(tmp_path: Path, workspace: Path):
    # Never pick up the repo's config/ (the environment is scrubbed by the autouse fixture above).
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    return load_settings(cfg, workspace)


@pytest.fixture
def services(settings, clock: ManualClock):
    svc = Services(settings, clock)
    svc.store.ensure_agent(settings.default_agent)  # as the daemon's first start does
    yield svc
    svc.close()


# Shared fixtures from tests/support (the scripted model server, ...).
from tests.support.extraction_env import make_env  # noqa: E402, F401
from tests.support.fixtures import model_server, model_settings_overrides  # noqa: E402, F401
from tests.support.pg_fixtures import pg_database, pg_dsn, pg_server  # noqa: E402, F401


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The marks of tests/support/marks.py's table (`-m "not slow"` is the quick subset)."""
    from tests.support.marks import MARKS, TIMEOUTS, keys_of

    for item in items:
        for key in keys_of(item.nodeid):
            for name in MARKS.get(key, ()):
                item.add_marker(getattr(pytest.mark, name))
            if key in TIMEOUTS and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(TIMEOUTS[key]))
