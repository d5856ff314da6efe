"""Listing an agent's memory files with their frontmatter switches (enabled, sort_order) and size.

Prompts list files on every turn, so parsed frontmatter is cached per file while its inode, mtime
and size stay the same; the store drops an entry whenever it writes that file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mateclaw_mem.errors import InvalidInputError, InvalidPathError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.workspace.paths import check_relative
from mateclaw_mem.workspace.walk import OWNERS_DIR

log = logging.getLogger(__name__)
ALWAYS_ON: tuple[str, ...] = ("AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md")
DEFAULT_SORT_ORDER = 100


@dataclass(frozen=True)
class FileInfo:
    rel: str
    enabled: bool
    sort_order: int
    chars: int  # body characters (what a prompt would carry)
    size: int  # bytes on disk
    mtime: float
    ceiling: int = 0
    meta_error: str | None = None

    @property
    def over_budget(self) -> bool:
        return self.ceiling > 0 and self.chars > self.ceiling


class FileLister:
    def __init__(self, ceiling_for: Callable[[str], int], read_snapshot: Callable[[str, Path], Any]) -> None:
        self.ceiling_for = ceiling_for
        self._read = read_snapshot
        self._cache: dict[str, tuple[tuple[int, int, int], FileInfo]] = {}
        self._checked_rels: set[str] = set()
        self._memo = threading.local()  # this thread's listings while a `memo()` is open, else None
        self.unreadable: dict[str, str] = {}  # path -> why it cannot be read as text (last listing)

    def forget(self, path: str) -> None:
        self._cache.pop(path, None)

    @contextlib.contextmanager
    def memo(self) -> Iterator[None]:
        """Each folder listed once in this thread until the block ends (`status` lists every agent's
        files for its own table and again for the prompt budgets: one walk of 1,000 notes, not two,
        and both parts then describe the same moment). Nested blocks share the outer one's."""
        if getattr(self._memo, "lists", None) is not None:
            yield
            return
        self._memo.lists = {}
        try:
            yield
        finally:
            self._memo.lists = None

    def list(self, base: Path, *, prefix: str = "", include_owners: bool = False) -> list[FileInfo]:
        lists = getattr(self._memo, "lists", None)
        if lists is None:
            return self._list(base, prefix, include_owners)
        key = (str(base), prefix, include_owners)
        if key not in lists:
            lists[key] = self._list(base, prefix, include_owners)
        return list(lists[key])  # a copy: callers may sort or trim theirs

    def _list(self, base: Path, prefix: str, include_owners: bool) -> list[FileInfo]:
        if not base.exists():
            return []
        out = []
        # os.walk and plain strings rather than Path.rglob: prompts list files on every turn, and
        # pathlib's per-path overhead dominated prompt assembly with a year of daily notes.
        for dirpath, dirnames, filenames in os.walk(base):
            rel_dir = os.path.relpath(dirpath, base)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
            skip_owners = not rel_dir and not include_owners
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not (skip_owners and d == OWNERS_DIR))
            for name in filenames:
                if name.startswith(".") or not name.endswith(".md"):
                    continue
                rel = f"{rel_dir}/{name}" if rel_dir else name
                if prefix and not rel.startswith(prefix):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    if rel not in self._checked_rels:
                        check_relative(rel)
                        self._checked_rels.add(rel)
                    st = os.stat(path)
                except (InvalidPathError, OSError):
                    continue
                # Reuse the parsed frontmatter while the file is the same (inode, mtime, size);
                # our own writes drop their entry in _commit/delete.
                stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
                cached = self._cache.get(path)
                if cached is not None and cached[0] == stamp:
                    out.append(cached[1])
                    continue
                try:
                    snap = self._read(rel, Path(path))
                except InvalidPathError:
                    continue
                except InvalidInputError as exc:  # not UTF-8 (binary junk): named in the log and `status`
                    if self.unreadable.get(path) != str(exc):
                        log.warning("%s is left out of prompts, search and facts until it is fixed: %s", path, exc)
                    self.unreadable[path] = str(exc)
                    continue
                self.unreadable.pop(path, None)
                parsed = frontmatter.parse(snap.text)
                info = FileInfo(
                    rel=rel,
                    enabled=_as_bool(parsed.meta.get("enabled"), default=rel in ALWAYS_ON),
                    sort_order=_as_int(parsed.meta.get("sort_order"), default=_default_order(rel)),
                    chars=len(parsed.body),
                    size=st.st_size,
                    mtime=st.st_mtime,
                    ceiling=self.ceiling_for(rel),
                    meta_error=parsed.error,
                )
                self._cache[path] = (stamp, info)
                out.append(info)
        return sorted(out, key=lambda f: (f.sort_order, f.rel))


def _default_order(rel: str) -> int:
    return ALWAYS_ON.index(rel) if rel in ALWAYS_ON else DEFAULT_SORT_ORDER


def _as_bool(value: object, *, default: bool) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "false", "no", "off"):
        return value.strip().lower() in ("true", "yes", "on")
    return default


def _as_int(value: object, *, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return default
