"""Reconcile: make the index agree with the disk, whatever the watcher missed.

A quick pass compares mtime and size (stat only; a file whose stat matches is not read). A deep
pass (`deep=True`) reads every file and compares its SHA-256 and its chunk rows, which repairs an
index that was changed behind its back or a file edited within the same mtime tick.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mateclaw_mem.index.file_index import FileIndex


@dataclass
class ReconcileReport:
    checked: int = 0
    added: list[tuple[str, str, str]] = field(default_factory=list)  # (agent, owner, rel)
    changed: list[tuple[str, str, str]] = field(default_factory=list)
    removed: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def touched(self) -> int:
        return len(self.added) + len(self.changed) + len(self.removed)

    def to_dict(self) -> dict:
        def fmt(items: list[tuple[str, str, str]]) -> list[str]:
            return [f"{a}/{'owners/' + o + '/' if o else ''}{r}" for a, o, r in items]

        return {"checked": self.checked, "added": fmt(self.added), "changed": fmt(self.changed),
                "removed": fmt(self.removed)}


def reconcile(index: FileIndex, *, agent: str | None = None, deep: bool = False) -> ReconcileReport:
    report = ReconcileReport()
    indexed = index.indexed_files(agent)
    seen: set[tuple[str, str, str]] = set()
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
