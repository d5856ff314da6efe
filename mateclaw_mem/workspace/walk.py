"""Where memory files live on disk: the one place that knows the `owners/` layout.

    <root>/<agent>/<rel>                      the agent's shared files (owner None)
    <root>/<agent>/owners/<quoted owner>/<rel> an owner's personal files, only with owner isolation on
    <root>/global/<rel>                       GLOBAL memory: every agent of the workspace sees it
                                              (no agent may be named `global`: workspace/paths.py)

Everything that walks or locates memory files (listing, index, reconcile, watcher, consolidation,
export) goes through `walk_files` and `locate`, so the layout is written down once.

"No owner" is None everywhere inside the services; `normalise_owner` is for the entry points that
still receive the SQL/wire spelling "" or the seed's shared key "system" from a caller.

Scopes (the seed's): PERSONAL = an owner's folder; TEAM = the agent's own files (owner None: every
user of the agent, and everything written before isolation was turned on); GLOBAL = `global/`,
addressed through the store as the reserved agent name `GLOBAL` with owner None.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from mateclaw_mem.workspace.owners import SYSTEM
from mateclaw_mem.workspace.paths import GLOBAL_DIR, check_agent, escapes, owner_dirname

log = logging.getLogger(__name__)

OWNERS_DIR = "owners"
GLOBAL = GLOBAL_DIR  # the scope's name is its folder's
PERSONAL, TEAM = "personal", "team"
SCOPES = (PERSONAL, TEAM, GLOBAL)


def normalise_owner(owner: str | None) -> str | None:
    """None for "no owner", however the caller spelled it ("" is the spelling of SQL columns and the
    wire, "system" the seed's key for cron and unknown callers: shared memory)."""
    return None if not owner or owner == SYSTEM else owner


def agent_key(agent: str, owner: str | None, *, owner_isolation: bool) -> str:
    """The folder of an agent's files relative to the root: `global`, `<agent>` or its owner's folder.
    GLOBAL memory has no owners (it is what everyone sees)."""
    if agent == GLOBAL_DIR:
        return GLOBAL_DIR
    check_agent(agent)
    if owner and owner_isolation:
        return f"{agent}/{OWNERS_DIR}/{owner_dirname(owner)}"
    return agent


def global_folder(root: Path) -> list[str]:
    """[GLOBAL] when `global/` is a folder of this workspace, else [] — a link that leads out of the
    root is never walked (it would put files from elsewhere into every agent's index)."""
    if not (root / GLOBAL_DIR).is_dir():
        return []
    if escapes(root, GLOBAL_DIR):
        log.warning("ignoring %s/: it links outside the workspace", GLOBAL_DIR)
        return []
    return [GLOBAL_DIR]


def scope_of(agent: str, owner: str | None) -> str:
    """The scope of files kept under (agent, owner) as `walk_files` / `locate` name them."""
    return GLOBAL if agent == GLOBAL_DIR else PERSONAL if owner else TEAM


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
    if rest[0] == OWNERS_DIR and agent != GLOBAL_DIR:
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
    for name, where, path in _memory_paths(root, agents, owner_isolation, left_out, also):
        try:
            st = os.stat(path)
        except OSError:
            continue
        yield DiskFile(name, where[1], where[2], Path(path), st.st_mtime, st.st_size)


def count_files(root: Path, agents: Iterable[str], *, owner_isolation: bool,
                also: Callable[[str], bool] | None = None) -> int:
    """How many files `walk_files` would yield, without a stat of each (`status` counts the files on
    disk against the index's: on 1,000 daily notes the stats were most of that count)."""
    return sum(1 for _ in _memory_paths(root, agents, owner_isolation, None, also))


def _memory_paths(
    root: Path, agents: Iterable[str], owner_isolation: bool, left_out: Callable[[Path, str], None] | None,
    also: Callable[[str], bool] | None,
) -> Iterator[tuple[str, tuple[str, str | None, str], str]]:
    """(agent, (agent, owner, rel), path) of `walk_files`' files, in its order, nothing stat'ed."""
    for name in agents:
        base = root / name
        if not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            skip_owners = not owner_isolation and os.path.normpath(dirpath) == os.path.normpath(base)
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not (skip_owners and d == OWNERS_DIR))
            # `locate` of each file, its folder's half done once per folder: per file it cost ~40 us,
            # and `status` and every reconcile walk all of a big workspace's daily notes.
            folder = _parts(root, dirpath)
            for fn in sorted(filenames):
                if fn.startswith("."):
                    continue
                path = os.path.join(dirpath, fn)
                where = _split((*folder, fn), owner_isolation=owner_isolation) if folder else None
                if not fn.endswith(".md"):
                    where = _extra(root, path, owner_isolation, also)
                    if where is None:
                        if left_out is not None:
                            left_out(Path(path), "not a Markdown (.md) file")
                        continue
                if where is None or where[0] != name:
                    if left_out is not None:
                        left_out(Path(path), "not inside an owner's folder")
                    continue
                yield name, where, path


def _parts(root: Path, dirpath: str) -> tuple[str, ...] | None:
    """`locate`'s path parts of a folder (its files add their name), or None when no file in it can be
    a memory file: outside the root, or in a hidden folder."""
    try:
        parts = Path(os.path.abspath(dirpath)).relative_to(os.path.abspath(root)).parts
    except ValueError:
        return None
    return None if not parts or any(p.startswith(".") for p in parts) else parts


def _extra(root: Path, path: str, owner_isolation: bool,
           also: Callable[[str], bool] | None) -> tuple[str, str | None, str] | None:
    if also is None:
        return None
    parts = Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).parts
    where = _split(parts, owner_isolation=owner_isolation) if len(parts) >= 2 else None
    return where if where is not None and also(where[2]) else None
