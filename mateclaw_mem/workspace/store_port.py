"""What the store's parts call back on: the store as a Protocol, so they need not import the store.

The store (store.py) hands itself to its parts - binary files (blobs.py), ceilings and pins
(ceilings.py), daily notes, seeding, undo, month archives, the journal's replay - and they read and
write through it. Typed with `WorkspaceStore` they imported the module that imports them (a cycle);
typed with this they depend only on what they use. `WorkspaceStore` matches it (mypy checks every
call that hands a store over). The underscored members are the store's own write path, shared with
its parts only: nothing outside workspace/ calls them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.workspace.history import History, Version
    from mateclaw_mem.workspace.provenance import ProvenanceStore
    from mateclaw_mem.workspace.records import Snapshot, Step, WriteEvent, WriteResult


class JournalPort(Protocol):
    """The intent journal (journal.py) as the store's parts use it."""

    def operation(self, op: str, batch: str, steps: Sequence[Step] = (), *,
                  finish: dict[str, Any] | None = None,
                  staged: dict[str, Path | bytes] | None = None) -> contextlib.AbstractContextManager[str]: ...

    def note(self, batch: str | None, key: str, rel: str, before: str, after: str) -> None: ...


class StorePort(Protocol):
    root: Path
    clock: Clock
    history_store: History
    provenance: ProvenanceStore
    owner_isolation: bool
    file_max_bytes: int

    @property  # read-only here: the store's is a `Journal`, which this narrower type matches
    def journal(self) -> JournalPort: ...

    def agent_key(self, agent: str, owner: str | None = None) -> str: ...
    def agent_dir(self, agent: str, owner: str | None = None) -> Path: ...
    def path(self, agent: str, rel: str, owner: str | None = None) -> Path: ...
    def ceiling_for(self, rel: str) -> int: ...
    def lock(self, path: Path) -> contextlib.AbstractContextManager[None]: ...
    def read(self, agent: str, rel: str, *, owner: str | None = None) -> Snapshot: ...
    def history(self, agent: str, rel: str, *, owner: str | None = None) -> list[Version]: ...

    def write(self, agent: str, rel: str, text: str, *, expected_sha: str | None, actor: str,
              owner: str | None = None, reason: str = "", batch: str | None = None) -> WriteResult: ...

    def update(self, agent: str, rel: str, fn: Callable[[str], str | None], *, actor: str,
               owner: str | None = None, reason: str = "", batch: str | None = None) -> WriteResult | None: ...

    def delete(self, agent: str, rel: str, *, expected_sha: str | None, actor: str,
               owner: str | None = None, reason: str = "", batch: str | None = None) -> WriteResult: ...

    # The store's own write path, shared with its parts (binary files, undo).
    def _snapshot(self, rel: str, path: Path) -> Snapshot: ...
    def _parts(self, agent: str, owner: str | None, rel: str) -> tuple[list[str], str]: ...
    def _keep_superseded(self, agent: str, owner: str | None, rel: str, versions: list[bytes], actor: str) -> None: ...
    def _notify(self, event: WriteEvent) -> None: ...
