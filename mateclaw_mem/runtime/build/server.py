"""Builder of what the HTTP face is guarded by."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mateclaw_mem.settings import Settings


def api_key(settings: Settings) -> str | None:
    """The HTTP API key from the environment variable the settings name; None = open.

    Read once; never logged or rendered (not even by repr)."""
    return os.environ.get(settings.server.api_key_env) or None
