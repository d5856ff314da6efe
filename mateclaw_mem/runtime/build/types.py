"""The shapes every builder shares: how it registers something to close, and the one way the model
client is handed over."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mateclaw_mem.llm.client import ModelClient

Closer = Callable[[Any], None]  # Services.on_close: closed with the daemon, newest first
# The one model client (None in rules mode), asked for when a step first needs it: building a part
# never builds the client, so a CLI command that never calls the model never imports openai.
ModelProvider = Callable[[], "ModelClient | None"]
