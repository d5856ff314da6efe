"""Where the settings file and the workspace are: the same answer wherever `mateclaw-mem` runs.

Settings file, first found wins:
  `--config PATH` → `$MATECLAW_CONFIG` (both must exist) → the user's
  `$XDG_CONFIG_HOME/mateclaw-mem/mateclaw.yaml` (`~/.config/…`) → the source checkout's
  `config/mateclaw.yaml` (a clone, or an editable install of one) → built-in defaults.
Workspace, first given wins:
  `--workspace DIR` → `$MATECLAW_WORKSPACE` (both relative to the current directory, as typed) →
  the settings file's `workspace:` (relative to that file's folder, so a file means one place) →
  `$XDG_DATA_HOME/mateclaw-mem/workspace` (`~/.local/share/…`).

The current directory plays no part beyond resolving what was typed on this command line: the
shipped file says `workspace: ../workspace`, so a checkout's CLI, daemon and `scripts/run.sh` all
use the checkout's `workspace/` from any folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

APP_DIR = "mateclaw-mem"
CONFIG_NAME = "mateclaw.yaml"
CONFIG_ENV = "MATECLAW_CONFIG"
WORKSPACE_ENV = "MATECLAW_WORKSPACE"
ENV_PREFIX = "MATECLAW_"


class ConfigChoice(NamedTuple):  # not a dataclass: `status` beside a daemon would import `dataclasses` for it
    path: Path | None  # None = built-in defaults
    explicit: bool  # named by --config / $MATECLAW_CONFIG: a missing file is an error
    source: str  # how it was chosen, for `status` and error messages


def _xdg(var: str, fallback: str) -> Path:
    # XDG says a relative value is invalid and to be ignored.
    value = os.environ.get(var, "")
    return Path(value) if value and Path(value).is_absolute() else Path.home() / fallback


def _absolute(path: str | Path) -> Path:
    # abspath, not resolve(): `..` folded, links kept as the person named them.
    return Path(os.path.abspath(Path(path).expanduser()))


def user_config() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config") / APP_DIR / CONFIG_NAME


def user_workspace() -> Path:
    return _xdg("XDG_DATA_HOME", ".local/share") / APP_DIR / "workspace"


def checkout_config() -> Path | None:
    """`config/mateclaw.yaml` of the source tree this package runs from, if it runs from one (a
    clone or an editable install; an installed wheel has no pyproject.toml next to the package)."""
    root = Path(__file__).resolve().parent.parent
    path = root / "config" / CONFIG_NAME
    return path if (root / "pyproject.toml").is_file() and path.is_file() else None


def choose_config(config: str | Path | None) -> ConfigChoice:
    if config is not None and str(config):
        return ConfigChoice(_absolute(config), True, "--config")
    if os.environ.get(CONFIG_ENV):
        return ConfigChoice(_absolute(os.environ[CONFIG_ENV]), True, CONFIG_ENV)
    user = user_config()
    if user.is_file():
        return ConfigChoice(user, False, "user config")
    checkout = checkout_config()
    if checkout is not None:
        return ConfigChoice(checkout, False, "source checkout")
    return ConfigChoice(None, False, "built-in defaults")


def choose_workspace(workspace: str | Path | None, config: Path | None, configured: object) -> tuple[Path, str]:
    """(absolute workspace path, where it came from). `configured` is the file's `workspace:` value."""
    if workspace is not None and str(workspace):
        return _absolute(workspace), "--workspace"
    if os.environ.get(WORKSPACE_ENV):
        return _absolute(os.environ[WORKSPACE_ENV]), WORKSPACE_ENV
    if configured not in (None, "") and config is not None:
        return _absolute(config.parent / Path(str(configured)).expanduser()), f"config {config}"
    return user_workspace(), "user default"


def env_source(loc: tuple[object, ...]) -> str | None:
    """The `MATECLAW_…` variable that set the setting at `loc` (or a section holding it), if one did."""
    names = {k.upper(): k for k in os.environ if k.upper().startswith(ENV_PREFIX)}
    parts = [str(p).upper().replace("-", "_") for p in loc if not isinstance(p, int)]
    for end in range(len(parts), 0, -1):
        name = ENV_PREFIX + "__".join(parts[:end])
        if name in names:
            return names[name]
    # A check across a whole section (model.base-url without model.model) names the section only.
    inside = ENV_PREFIX + "__".join(parts) + "__"
    return next((names[n] for n in sorted(names) if parts and n.startswith(inside)), None)


def is_workspace(path: Path) -> bool:
    """A folder `init` or `serve` made: it has our state folder, or an agent folder with AGENTS.md."""
    if (path / ".mateclaw").is_dir():
        return True
    try:
        return any((child / "AGENTS.md").is_file() for child in path.iterdir() if child.is_dir())
    except OSError:  # missing, not a folder, unreadable
        return False
