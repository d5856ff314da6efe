"""Run the CLI in-process the way a test means it: from a temp folder, on a named workspace there.

The current folder decides nothing (mateclaw_mem.locations): without this, a command with no
--workspace would use the checkout's workspace/ that the shipped config names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def no_config_here(monkeypatch: pytest.MonkeyPatch, root: Path, *, workspace: Path | None = None) -> Path:
    """chdir to `root`, no MATECLAW_ variable from the shell, no settings file (an empty one named),
    and MATECLAW_WORKSPACE = `workspace` (default root/workspace). Returns the workspace."""
    for key in [k for k in os.environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(root)
    empty = root / ".empty-config.yaml"
    empty.write_text("{}\n", encoding="utf-8")
    monkeypatch.setenv("MATECLAW_CONFIG", str(empty))
    ws = workspace or root / "workspace"
    monkeypatch.setenv("MATECLAW_WORKSPACE", str(ws))
    return ws
