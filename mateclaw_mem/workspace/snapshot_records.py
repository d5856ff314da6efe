"""What export and import (workspace/transfer.py) report, and the sidecar a layer above may add."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mateclaw_mem.workspace.import_source import SourceFile

ACTOR = "import"
FORMAT = "mateclaw-mem-export"
FORMAT_VERSION = 1
STRATEGIES: tuple[str, ...] = ("skip", "overwrite", "merge")
WRITES = ("create", "overwrite", "merge")


class Sidecar(Protocol):
    """Data that is not a memory file but travels in a snapshot (facts/events.jsonl), owned by a layer
    above this one (runtime wires it in): exported beside the files, imported after all of them."""

    name: str

    def export(self, agent: str) -> bytes: ...

    def plan(self, data: bytes) -> list[Any]: ...

    def apply(self, agent: str, events: list[Any], *, dry_run: bool = False) -> int: ...


@dataclass(frozen=True)
class ExportedFile:
    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class ExportResult:
    agent: str
    owner: str | None
    out: Path
    files: list[ExportedFile]
    skipped: list[tuple[str, str]]  # (path, reason)
    history_files: int = 0


@dataclass(frozen=True)
class ImportItem:
    source: str  # path inside the source
    rel: str  # target path inside the agent's (or owner's) folder; "" when skipped before mapping
    owner: str | None
    action: str  # create | overwrite | merge | unchanged | conflict | skip | failed
    reason: str = ""
    archived: tuple[str, ...] = ()  # where a ceiling moved cut text
    old_sha: str = ""  # the version on disk the plan read ("" = none): the write's compare-and-swap
    old_size: int = 0
    new_sha: str = ""  # what would be written
    new_size: int = 0
    entry: SourceFile | None = field(default=None, repr=False, compare=False)  # read again to write
    # The text the plan would write (a preview shows it as a diff against the file now); "" for a
    # sidecar or a file skipped before it was read.
    planned: str = field(default="", repr=False, compare=False)


@dataclass(frozen=True)
class ImportReport:
    agent: str
    strategy: str
    dry_run: bool
    batch: str | None  # None for a dry run or when nothing was written
    items: list[ImportItem]
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for item in self.items:
            out[item.action] = out.get(item.action, 0) + 1
        return out

    @property
    def written(self) -> int:
        return sum(1 for i in self.items if i.action in WRITES)

    @property
    def failed(self) -> int:
        return sum(1 for i in self.items if i.action == "failed")

    def log_line(self, source: str, owner: str | None, ms: float) -> str:
        """`import default from notes.zip: updated MEMORY.md, notes/a.md (1 create, 1 merge) in 12 ms`."""
        files = [i.rel for i in self.items if i.action in WRITES]
        outcome = "updated" if files else "failed" if self.failed else "no_change"
        counts = ", ".join(f"{n} {action}" for action, n in sorted(self.counts().items()))
        who = self.agent + (f" (owner {owner})" if owner else "")
        return f"import {who} from {source}: {outcome} {', '.join(files)} ({counts or 'no files'}) in {ms:.0f} ms"


