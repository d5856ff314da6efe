"""Where memory files live on disk: the one place that knows the `owners/` layout.

    <root>/<agent>/<rel>                      the agent's shared files (owner None)
    <root>/<agent>/owners/<quoted owner>/<rel> an owner's personal files, only with owner isolation on

Everything that walks or locates memory files (listing, index, reconcile, watcher, consolidation,
export) goes through `walk_files` and `locate`, so the layout is written down once.

"No owner" is None everywhere inside the services; `normalise_owner` is for the entry points that
still receive the SQL/wire spelling "" from a caller.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

OWNERS_DIR = "owners"


def normalise_owner(owner: str | None) -> str | None:
    """None for "no owner", however the caller spelled it ("" is the spelling of SQL columns and the wire)."""
    return owner or None


@dataclass(frozen=True)
class DiskFile:
    agent: str
    owner: str | None  # None = the agent's shared files
    rel: str
    path: Path
    mtime: float
    size: int


def locate(root: Path, path: Path, *, owner_isolation: bool) -> tuple[str, str | None, str] | None:
    """(agent, owner, rel) of a memory file path inside the workspace, or None if it is not one."""
    try:
        parts = Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).parts
    except ValueError:
        return None
    if len(parts) < 2 or any(p.startswith(".") for p in parts) or not parts[-1].endswith(".md"):
        return None
    return _split(parts, owner_isolation=owner_isolation)


def _split(parts: tuple[str, ...], *, owner_isolation: bool) -> tuple[str, str | None, str] | None:
    agent, rest = parts[0], parts[1:]
    owner: str | None = None
    if rest[0] == OWNERS_DIR:
        if not owner_isolation or len(rest) < 3:
            return None
        owner, rest = unquote(rest[1]), rest[2:]
    return agent, owner, "/".join(rest)


def owner_names(agent_dir: Path, *, owner_isolation: bool) -> list[str]:
    """Owner keys with personal memory under an agent folder (empty unless isolation is on)."""
    base = agent_dir / OWNERS_DIR
    if not owner_isolation or not base.is_dir():
        return []
    return sorted(unquote(p.name) for p in base.iterdir() if p.is_dir())


def walk_files(
    root: Path, agents: Iterable[str], *, owner_isolation: bool, left_out: Callable[[Path, str], None] | None = None,
    also: Callable[[str], bool] | None = None,
) -> Iterator[DiskFile]:
    """Every memory file of these agents on disk (stat only, nothing read). Hidden folders (.git,
    .obsidian, editor state) and hidden files hold no memory; `owners/` is skipped with isolation off.

    `left_out(path, reason)`, when given, hears of every other visible file passed over (an export
    reports what it did not take). `also(rel)` lets a caller that reads them take non-Markdown files
    too (the index reads inside the month archives)."""
    for name in agents:
        base = root / name
        if not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            skip_owners = not owner_isolation and os.path.normpath(dirpath) == os.path.normpath(base)
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not (skip_owners and d == OWNERS_DIR))
            for fn in sorted(filenames):
                if fn.startswith("."):
                    continue
                path = Path(dirpath) / fn
                where = locate(root, path, owner_isolation=owner_isolation)
                if not fn.endswith(".md"):
                    where = _extra(root, path, owner_isolation, also)
                    if where is None:
                        if left_out is not None:
                            left_out(path, "not a Markdown (.md) file")
                        continue
                if where is None or where[0] != name:
                    if left_out is not None:
                        left_out(path, "not inside an owner's folder")
                    continue
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                yield DiskFile(name, where[1], where[2], path, st.st_mtime, st.st_size)


def _extra(root: Path, path: Path, owner_isolation: bool,
           also: Callable[[str], bool] | None) -> tuple[str, str | None, str] | None:
    if also is None:
        return None
    parts = Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).parts
    where = _split(parts, owner_isolation=owner_isolation) if len(parts) >= 2 else None
    return where if where is not None and also(where[2]) else None
