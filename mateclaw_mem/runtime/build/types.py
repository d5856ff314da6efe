"""The shapes every builder shares: how it registers something to close, and the one way the model
client is handed over."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mateclaw_mem.llm.client import ModelClient

Closer = Callable[[Any], None]  # Services.on_close: closed with the daemon, newest first
# The one model client (None in rules mode) as a zero-argument provider - the one way it is handed over,
# to builders and lifecycle services alike. Why a provider and not the client: the part decides when to
# ask, so one that calls the model now and then (dreaming, SOUL, the contradiction judge) is built
# without it and a CLI command that never calls the model never imports openai (~0.4 s).
ModelProvider = Callable[[], "ModelClient | None"]
