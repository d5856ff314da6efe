"""Services built from one Settings object. Everything is created lazily on first use so a CLI
command pays only for what it touches (`mateclaw-mem cat` never opens SQLite)."""

from __future__ import annotations

import os
import threading
from functools import cached_property
from typing import TYPE_CHECKING, Any

from mateclaw_mem.clock import Clock, SystemClock, resolve_timezone

if TYPE_CHECKING:
    from mateclaw_mem.conversations.aml import AmlService
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.message_index import MessageIndex
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.store import WorkspaceStore
    from mateclaw_mem.workspace.tools import WorkspaceTools


class Services:
    def __init__(self, settings: Settings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock(resolve_timezone(settings.timezone))
        self._closers: list[Any] = []
        self._reporters: list[tuple[str, Any]] = []
        self._lock = threading.RLock()

    @property
    def mode(self) -> str:
        """"model" when a model is configured, else "rules" (explicit, never a silent fallback)."""
        return "model" if self.settings.model.configured else "rules"

    @cached_property
    def store(self) -> WorkspaceStore:
        from mateclaw_mem.workspace.store import WorkspaceStore

        return WorkspaceStore.from_settings(self.settings, self.clock)

    @cached_property
    def tools(self) -> WorkspaceTools:
        from mateclaw_mem.workspace.tools import WorkspaceTools

        return WorkspaceTools(self.store)

    @cached_property
    def log(self) -> ConversationLog:
        from mateclaw_mem.conversations.log import ConversationLog

        with self._lock:
            log = ConversationLog(self.settings.state_dir / "log.db")
            self.on_close(log)
            return log

    @cached_property
    def message_index(self) -> MessageIndex:
        from mateclaw_mem.index.message_index import MessageIndex

        with self._lock:
            index = MessageIndex(self.settings.state_dir / "messages.db")
            self.on_close(index)
            return index

    @cached_property
    def aml(self) -> AmlService:
        from mateclaw_mem.conversations.aml import AmlService

        with self._lock:
            return AmlService(self.log, self.message_index, self.clock, agent=self.settings.aml_agent)

    @cached_property
    def api_key(self) -> str | None:
        """The HTTP API key from the environment variable the settings name; None = open.

        Read once; never logged or rendered (not even by repr)."""
        return os.environ.get(self.settings.server.api_key_env) or None

    def status_reporters(self) -> list[tuple[str, Any]]:
        """(name, callable) pairs for `status`; services add theirs with `add_status`."""
        return list(self._reporters)

    def add_status(self, name: str, reporter: Any) -> None:
        self._reporters.append((name, reporter))

    def on_close(self, closer: Any) -> None:
        """Register something with a close()/shutdown() to be called by close(), newest first."""
        self._closers.append(closer)

    def close(self) -> None:
        while self._closers:
            closer = self._closers.pop()
            for name in ("shutdown", "close", "stop"):
                fn = getattr(closer, name, None)
                if callable(fn):
                    fn()
                    break
