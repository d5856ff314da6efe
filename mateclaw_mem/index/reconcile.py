"""Reconcile: make the index agree with the disk, whatever the watcher missed.

A quick pass compares mtime and size (stat only; a file whose stat matches is not read). A deep
pass (`deep=True`) reads every file and compares its SHA-256 and its chunk rows, which repairs an
index that was changed behind its back or a file edited within the same mtime tick.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mateclaw_mem.index.files.index import FileIndex

FileKey = tuple[str, str | None, str]  # (agent, owner - None for shared files, rel)


def _plain(agent: str, owner: str | None, rel: str) -> str:
    return f"{agent}/{rel}" if owner is None else f"{agent} ({owner})/{rel}"


@dataclass
class ReconcileReport:
    checked: int = 0
    added: list[FileKey] = field(default_factory=list)
    changed: list[FileKey] = field(default_factory=list)
    removed: list[FileKey] = field(default_factory=list)
    # How a file is named in `to_dict`: its folder inside the workspace (the store knows the layout).
    label: Callable[[str, str | None, str], str] = field(default=_plain, repr=False, compare=False)

    @property
    def touched(self) -> int:
        return len(self.added) + len(self.changed) + len(self.removed)

    def to_dict(self) -> dict:
        def fmt(items: list[FileKey]) -> list[str]:
            return [self.label(a, o, r) for a, o, r in items]

        return {"checked": self.checked, "added": fmt(self.added), "changed": fmt(self.changed),
                "removed": fmt(self.removed)}


def reconcile(index: FileIndex, *, agent: str | None = None, deep: bool = False) -> ReconcileReport:
    store = index.store
    report = ReconcileReport(label=lambda a, o, r: f"{store.agent_key(a, o)}/{r}")
    indexed = index.indexed_files(agent)
    seen: set[FileKey] = set()
    for f in index.disk_files(agent):
        key = (f.agent, f.owner, f.rel)
        seen.add(key)
        report.checked += 1
        known = indexed.get(key)
        if known is not None and not deep and known.mtime == f.mtime and known.size == f.size:
            continue
        result = index.ingest(f.agent, f.owner, f.rel, verify=deep)
        if result.changed:
            (report.added if known is None else report.changed).append(key)
    for key in indexed.keys() - seen:
        if index.delete(*key).changed:
            report.removed.append(key)
    index.mark_synced()
    return report
