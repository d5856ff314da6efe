"""What every command gets: settings and services built from the global options, and output helpers."""

from __future__ import annotations

import argparse
import json
import sys
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Imported where used: the settings model alone is ~0.15 s, which `status` beside a running
    # daemon never needs (runtime/daemon_status.py).
    from mateclaw_mem.runtime.services import Services
    from mateclaw_mem.settings import Settings


class CliContext:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.json: bool = bool(getattr(args, "json", False))

    @cached_property
    def settings(self) -> Settings:
        from mateclaw_mem.settings import load_settings

        return load_settings(getattr(self.args, "config", None), getattr(self.args, "workspace", None))

    @cached_property
    def services(self) -> Services:
        from mateclaw_mem.runtime.services import Services

        self.require_workspace()
        return Services(self.settings)

    def require_workspace(self) -> None:
        """Only `init` and `serve` create a workspace: any other command on a folder that is not one
        says so and touches nothing (a typo in --workspace must not grow a second, empty memory)."""
        if getattr(self.args, "creates_workspace", False):
            return
        from mateclaw_mem.errors import NotFoundError
        from mateclaw_mem.locations import is_workspace

        ws = self.settings.workspace
        if not is_workspace(ws):
            what = "no workspace" if not ws.exists() else "not a mateclaw-mem workspace"
            raise NotFoundError(
                f"{what} at {ws} (from {self.settings.workspace_source or 'the settings'}); create it with "
                "`mateclaw-mem init`, or name another with --workspace DIR / MATECLAW_WORKSPACE"
            )

    def agent(self) -> str:
        """The agent the command names, else the default one; either must exist (exit 3 if not)."""
        return self.services.store.require_agent(getattr(self.args, "agent", None) or self.settings.default_agent)

    def emit(self, data: Any, human: str | None = None) -> None:
        """JSON for scripts (`--json`), text for people."""
        if self.json:
            print(json.dumps(data, ensure_ascii=False, indent=2, default=str))
        elif human is not None:
            print(human)

    def fail(self, message: str, *, code: str = "error") -> None:
        if self.json:
            print(json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False))
        else:
            print(f"mateclaw-mem: error: {message}", file=sys.stderr)

    def close(self) -> None:
        if "services" in self.__dict__:
            self.services.close()
