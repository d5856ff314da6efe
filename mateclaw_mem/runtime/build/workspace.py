"""Builders of the memory files' side: the store, its tools, file commands and export/import."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.memory.facts.service import FactService
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.file_commands import FileCommands
    from mateclaw_mem.workspace.store import WorkspaceStore
    from mateclaw_mem.workspace.tools import WorkspaceTools
    from mateclaw_mem.workspace.transfer import Transfer


def store(settings: Settings, clock: Clock) -> WorkspaceStore:
    """Who hears its writes is runtime/events.py's table, wired when the container builds it."""
    from mateclaw_mem.workspace.store import WorkspaceStore

    return WorkspaceStore.from_settings(settings, clock)


def tools(store: WorkspaceStore) -> WorkspaceTools:
    from mateclaw_mem.workspace.tools import WorkspaceTools

    return WorkspaceTools(store)


def transfer(settings: Settings, store: WorkspaceStore, *, facts: Callable[[], FactService]) -> Transfer:
    """export/import of an agent's files; every import write goes through `store` (actor "import").
    `facts` is built only when `snapshot-extras` names them (their event log travels in the snapshot)."""
    from mateclaw_mem.workspace.snapshot_rules import policy_from
    from mateclaw_mem.workspace.transfer import Transfer

    memory = settings.mate.memory
    sidecars: list[Any] = []
    if "facts" in memory.snapshot_extras:
        from mateclaw_mem.memory.facts.snapshot import FactEvents

        sidecars.append(FactEvents(facts().db))
    return Transfer(store, policy=policy_from(memory.snapshot_vault_import, memory.snapshot_extras), sidecars=sidecars)


def file_commands(store: WorkspaceStore, tools: WorkspaceTools) -> FileCommands:
    """view/create/str_replace/insert/delete/rename over `/memories/...` (MCP's file-memory set)."""
    from mateclaw_mem.workspace.file_commands import FileCommands

    return FileCommands(store, tools)
