"""Previous versions of memory files, kept before every change (and every delete).

Layout: `.mateclaw/history/<agent dir>/<file path>/NNNNNN.md` plus `versions.jsonl` with one record
per kept version. The newest `keep` versions per file are retained (default 50, `history.keep-versions`).
"""

from __future__ import annotations

import builtins
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from mateclaw_mem.errors import NotFoundError
from mateclaw_mem.workspace.walk import OWNERS_DIR

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Version:
    version: int
    sha: str  # hash of the kept (previous) content
    replaced_by: str  # hash of the content that replaced it ("" = deleted)
    at: str  # ISO time of the change
    actor: str
    reason: str
    size: int
    batch: str | None = None
    key: str = ""  # agent directory relative to the workspace ("default", "default/owners/bob")
    rel: str = ""  # file path inside it
    existed: bool = True  # False: the change created the file; undoing it removes the file


_TYPES: dict[str, type | tuple[type, ...]] = {
    "version": int, "sha": str, "replaced_by": str, "at": str, "actor": str, "reason": str, "size": int,
    "batch": (str, type(None)), "key": str, "rel": str, "existed": bool}


def _version(line: str) -> Version | None:
    """One record of versions.jsonl, or None when the line is not one (each field of its type: a
    record that parsed into the wrong types would fail later, inside a page or a report)."""
    try:
        data = json.loads(line)
        record = Version(**data)
    except (ValueError, TypeError):
        return None
    if any(not isinstance(data[k], t) for k, t in _TYPES.items() if k in data) or isinstance(data["version"], bool):
        return None
    return record


class History:
    def __init__(self, root: Path, keep: int = 50) -> None:
        self.root = root
        self.keep = keep
        # tails(): (path, last) -> (the record file's inode, mtime, size; its newest versions). Every
        # save appends and every prune or purge replaces the file, so a stat tells a stale entry.
        self._tails: dict[tuple[str, int], tuple[tuple[int, int, int], list[Version]]] = {}

    def _dir(self, key: str, rel: str) -> Path:
        return self.root / key / rel

    def _records(self, folder: Path | str, last: int = 0) -> list[Version]:
        """The kept versions, oldest first; with `last`, only the newest that many (parsed from the end)."""
        # Plain strings and one open, no pathlib and no exists(): `status` lists the history of every
        # file of the workspace (1,000 daily notes: ~20 ms of path objects alone).
        try:
            # Bytes that are not UTF-8 (a damaged disk block) spoil their lines only, not the file.
            with open(os.path.join(folder, "versions.jsonl"), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except (FileNotFoundError, NotADirectoryError):
            return []
        lines = text.splitlines()
        out = []
        damaged = 0
        for line in reversed(lines) if last else lines:
            if line.strip():
                record = _version(line)
                if record is None:  # a torn last line after a crash, a damaged one: never hides the rest
                    damaged += 1
                    continue
                out.append(record)
                if last and len(out) == last:
                    break
        if damaged:
            log.warning("%s: skipped %d damaged history record(s)", os.path.join(folder, "versions.jsonl"), damaged)
        return out[::-1] if last else out

    def save(self, key: str, rel: str, content: bytes, record: Version) -> Version:
        folder = self._dir(key, rel)
        folder.mkdir(parents=True, exist_ok=True)
        records = self._records(folder)
        number = (records[-1].version + 1) if records else 1
        saved = Version(**{**asdict(record), "version": number, "key": key, "rel": rel})
        data = folder / f"{number:06d}.md"
        with open(data, "wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        with open(folder / "versions.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(asdict(saved), ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        records.append(saved)
        if len(records) > self.keep:
            self._prune(folder, records)
        return saved

    def _prune(self, folder: Path, records: list[Version]) -> None:
        drop, keep = records[: -self.keep], records[-self.keep :]
        tmp = folder / "versions.jsonl.tmp"
        tmp.write_text("".join(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in keep), encoding="utf-8")
        os.replace(tmp, folder / "versions.jsonl")
        for r in drop:
            (folder / f"{r.version:06d}.md").unlink(missing_ok=True)

    def list(self, key: str, rel: str) -> builtins.list[Version]:
        return self._records(os.path.join(self.root, key, rel))

    def tails(self, key: str, rels: Sequence[str], last: int) -> builtins.list[builtins.list[Version]]:
        """The newest `last` kept versions of each of these files, in their order (`status`'s last
        writes, over every file of an agent): a folder without any history is looked up once for all
        its files, not once per file, and a record file is parsed again only once it has changed."""
        base = os.path.join(self.root, key)
        kept: dict[str, bool] = {}
        out: builtins.list[builtins.list[Version]] = []
        for rel in rels:
            folder = rel.rpartition("/")[0]
            if folder not in kept:
                kept[folder] = os.path.isdir(os.path.join(base, folder))
            if not kept[folder]:
                out.append([])
                continue
            where = os.path.join(base, rel)
            try:
                st = os.stat(os.path.join(where, "versions.jsonl"))
            except OSError:
                out.append([])
                continue
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            hit = self._tails.get((where, last))
            if hit is None or hit[0] != stamp:
                hit = self._tails[(where, last)] = (stamp, self._records(where, last))
            out.append(list(hit[1]))
        return out

    def content(self, key: str, rel: str, version: int) -> bytes:
        path = self._dir(key, rel) / f"{version:06d}.md"
        if not path.exists():
            raise NotFoundError(f"{rel}: no kept version {version} (see `mateclaw-mem history`)")
        return path.read_bytes()

    def batch(self, batch: str) -> builtins.list[Version]:
        """Every version saved under one batch id (a whole dream run, say), oldest first."""
        out: builtins.list[Version] = []
        if self.root.exists():
            for index in self.root.rglob("versions.jsonl"):
                out.extend(r for r in self._records(index.parent) if r.batch == batch)
        return sorted(out, key=lambda r: (r.at, r.version))

    def purge(self, key: str, match: Callable[[bytes], bool]) -> builtins.list[Version]:
        """Remove the kept versions of one agent directory (`key`) whose content `match`es - a
        forget whose undo window has passed. Other owners' directories nested in it are not touched."""
        base, out = self.root / key, []
        nested = OWNERS_DIR if OWNERS_DIR not in key.split("/") else None
        for index in sorted(base.rglob("versions.jsonl")) if base.is_dir() else []:
            if nested and index.parent.relative_to(base).parts[0] == nested:
                continue
            records = self._records(index.parent)
            drop = [r for r in records
                    if (f := index.parent / f"{r.version:06d}.md").exists() and match(f.read_bytes())]
            if not drop:
                continue
            tmp = index.parent / "versions.jsonl.tmp"
            tmp.write_text("".join(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in records if r not in drop),
                           encoding="utf-8")
            os.replace(tmp, index)
            for r in drop:
                (index.parent / f"{r.version:06d}.md").unlink(missing_ok=True)
            out.extend(drop)
        return out
