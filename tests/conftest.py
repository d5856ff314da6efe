from __future__ import annotations

from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from mateclaw_mem.workspace.store import WorkspaceStore

TZ = ZoneInfo("Europe/Berlin")


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
def settings(tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch):
    # Never pick up the repo's config/ or the developer's environment.
    for key in [k for k in __import__("os").environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key, raising=False)
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    return load_settings(cfg, workspace)


@pytest.fixture
def services(settings, clock: ManualClock):
    svc = Services(settings, clock)
    yield svc
    svc.close()


# Shared fixtures from tests/support (the scripted model server, ...).
from tests.support.fixtures import model_server, model_settings_overrides  # noqa: E402, F401
