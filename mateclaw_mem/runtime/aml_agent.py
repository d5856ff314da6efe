"""The AML agent, created on first use (issue 38.9).

`/v1/aml/add` logs into the configured `aml-agent`; its folder was seeded at every daemon start, so an
`aml` agent appeared in every workspace (status, the Memory Browser's agent picker) whether or not
Add/Search was ever used. Nothing of Add/Search reads the folder -- messages live in log.db and
messages.db -- so the folder is now made by the first Add, for the person to see where those
conversations went; a Search before any Add needs nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from mateclaw_mem.conversations.aml import AmlMessage, AmlService


class AmlOnFirstUse(AmlService):
    """An AmlService that creates its agent (`ensure`, idempotent) before its first Add is stored.
    Every Add goes through `add_json` (the fast lane's `add_json_now` too), so one override covers all."""

    def __init__(self, *args: Any, ensure: Callable[[str], object], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ensure = ensure
        self._ensured = False
        self._lock = threading.Lock()

    def add_json(self, request_id: str, user_id: str, session_id: str, messages: list[AmlMessage], *,
                 index_lag: bool = True) -> str:
        if not self._ensured:
            with self._lock:
                if not self._ensured:
                    self._ensure(self.agent)
                    self._ensured = True
        return super().add_json(request_id, user_id, session_id, messages, index_lag=index_lag)
