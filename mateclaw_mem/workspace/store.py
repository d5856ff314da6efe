"""WorkspaceStore: every read and write of a memory file goes through here.

Promises (DESIGN §1): writes are atomic (temp file, fsync, rename) under a per-file lock that also
holds across processes, and compare-and-swap on the hash the writer read; every change keeps the
previous version; machine writers keep pinned sections and obey size ceilings, with the cut text
archived, never dropped. A person's own write (`actor="person"`) is never cut.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from filelock import FileLock, Timeout

from mateclaw_mem.errors import BusyError, ConflictError, InvalidInputError, InvalidPathError, NotFoundError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.ceilings import apply_ceiling
from mateclaw_mem.markdown.sections import preserve_pinned
from mateclaw_mem.workspace.history import History, Version
from mateclaw_mem.workspace.paths import check_agent, check_relative, owner_dirname, resolve_inside

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.settings import Settings

log = logging.getLogger(__name__)

PERSON = "person"
ALWAYS_ON: tuple[str, ...] = ("AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md")
STATE_DIRNAME = ".mateclaw"
DEFAULT_SORT_ORDER = 100


def sha256(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Snapshot:
    rel: str
    path: Path
    text: str
    sha: str  # "" when the file does not exist
    exists: bool

    @property
    def body(self) -> str:
        return frontmatter.body(self.text)


@dataclass(frozen=True)
class WriteResult:
    rel: str
    path: Path
    sha: str
    previous_sha: str
    changed: bool
    archived: tuple[str, ...] = ()
    version: int | None = None  # history version that holds the previous content

    @property
    def truncated(self) -> bool:
        return bool(self.archived)


@dataclass(frozen=True)
class WriteEvent:
    agent: str
    owner: str | None
    rel: str
    path: Path
    sha: str  # "" after a delete
    actor: str


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


@dataclass
class _Locks:
    guard: threading.Lock = field(default_factory=threading.Lock)
    local: dict[str, threading.RLock] = field(default_factory=dict)
    files: dict[str, FileLock] = field(default_factory=dict)


class WorkspaceStore:
    def __init__(
        self,
        root: Path,
        *,
        clock: Clock,
        ceilings: dict[str, int] | None = None,
        history_keep: int = 50,
        owner_isolation: bool = False,
        lock_timeout: float = 30.0,
    ) -> None:
        self.root = Path(root)
        self.clock = clock
        self.ceilings = {"PROFILE.md": 4000, "MEMORY.md": 8000} if ceilings is None else dict(ceilings)
        self.owner_isolation = owner_isolation
        self.state_dir = self.root / STATE_DIRNAME
        self.history_store = History(self.state_dir / "history", keep=history_keep)
        self._locks = _Locks()
        self._lock_timeout = lock_timeout
        self._listeners: list[Callable[[WriteEvent], None]] = []
        self._info_cache: dict[str, tuple[tuple[int, int, int], FileInfo]] = {}
        self._checked_rels: set[str] = set()

    @classmethod
    def from_settings(cls, settings: Settings, clock: Clock) -> WorkspaceStore:
        memory = settings.mate.memory
        return cls(
            settings.workspace,
            clock=clock,
            ceilings={"PROFILE.md": memory.profile_max_chars, "MEMORY.md": memory.memory_md_max_chars},
            history_keep=settings.history.keep_versions,
            owner_isolation=settings.owner_isolation,
        )

    # -- paths ---------------------------------------------------------------------------------

    def agent_key(self, agent: str, owner: str | None = None) -> str:
        """The agent directory relative to the workspace root (owner folders when isolation is on)."""
        check_agent(agent)
        if owner and self.owner_isolation:
            return f"{agent}/owners/{owner_dirname(owner)}"
        return agent

    def agent_dir(self, agent: str, owner: str | None = None) -> Path:
        return self.root / self.agent_key(agent, owner)

    def path(self, agent: str, rel: str, owner: str | None = None) -> Path:
        base = self.agent_dir(agent, owner)
        return resolve_inside(base, rel)

    def agents(self) -> list[str]:
        if not self.root.exists():
            return []
        out = []
        for p in sorted(self.root.iterdir()):
            if p.is_dir() and not p.name.startswith("."):
                with contextlib.suppress(InvalidPathError):
                    out.append(check_agent(p.name))
        return out

    def owners(self, agent: str) -> list[str]:
        """Owner keys with personal memory under this agent (empty unless owner isolation is on)."""
        base = self.root / check_agent(agent) / "owners"
        if not self.owner_isolation or not base.is_dir():
            return []
        return sorted(unquote(p.name) for p in base.iterdir() if p.is_dir())

    def ceiling_for(self, rel: str) -> int:
        return self.ceilings.get(rel, 0)

    def subscribe(self, listener: Callable[[WriteEvent], None]) -> None:
        """Called after every write the store makes (index ingest, lineage bookkeeping)."""
        self._listeners.append(listener)

    # -- locking -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self, path: Path) -> Iterator[None]:
        """Per-file lock: a thread lock for this process plus a file lock for other processes."""
        key = str(path.absolute())
        with self._locks.guard:
            local = self._locks.local.setdefault(key, threading.RLock())
            if key not in self._locks.files:
                lock_dir = self.state_dir / "locks"
                lock_dir.mkdir(parents=True, exist_ok=True)
                self._locks.files[key] = FileLock(str(lock_dir / f"{sha256(key)[:24]}.lock"))
            flock = self._locks.files[key]
        if not local.acquire(timeout=self._lock_timeout):
            raise BusyError(f"{path.name} is locked by another writer; try again")
        try:
            try:
                flock.acquire(timeout=self._lock_timeout)
            except Timeout:
                raise BusyError(f"{path.name} is locked by another process; try again") from None
            try:
                yield
            finally:
                flock.release()
        finally:
            local.release()

    # -- reading -------------------------------------------------------------------------------

    def read(self, agent: str, rel: str, *, owner: str | None = None) -> Snapshot:
        path = self.path(agent, rel, owner)
        return self._snapshot(rel, path)

    @staticmethod
    def _snapshot(rel: str, path: Path) -> Snapshot:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return Snapshot(rel, path, "", "", False)
        except IsADirectoryError:
            raise InvalidPathError(f"{rel} is a folder, not a file") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInputError(f"{rel} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
        return Snapshot(rel, path, text, sha256(data), True)

    @staticmethod
    def body(text: str) -> str:
        return frontmatter.body(text)

    # -- writing -------------------------------------------------------------------------------

    def write(
        self,
        agent: str,
        rel: str,
        text: str,
        *,
        expected_sha: str | None,
        actor: str,
        owner: str | None = None,
        reason: str = "",
        batch: str | None = None,
    ) -> WriteResult:
        """Replace a file. `expected_sha` is the hash the writer read ("" = must not exist yet);
        None skips the check and is meant for a person's own explicit overwrite."""
        if not isinstance(text, str):
            raise InvalidInputError("content must be text")
        if "\x00" in text:
            raise InvalidInputError(f"{rel}: content contains NUL characters")
        path = self.path(agent, rel, owner)
        with self.lock(path):
            current = self._snapshot(rel, path)
            if expected_sha is not None and expected_sha != current.sha:
                raise ConflictError(
                    f"{rel} changed since it was read (expected {expected_sha[:12] or 'no file'}, "
                    f"found {current.sha[:12] or 'no file'}); re-read it and try again"
                )
            return self._commit(agent, owner, rel, path, current, text, actor=actor, reason=reason, batch=batch)

    def update(
        self,
        agent: str,
        rel: str,
        fn: Callable[[str], str | None],
        *,
        actor: str,
        owner: str | None = None,
        reason: str = "",
        batch: str | None = None,
    ) -> WriteResult | None:
        """Read-modify-write under the file lock. `fn` gets the current text ("" if missing) and
        returns the new text, or None for no change."""
        path = self.path(agent, rel, owner)
        with self.lock(path):
            current = self._snapshot(rel, path)
            new_text = fn(current.text)
            if new_text is None:
                return None
            return self._commit(agent, owner, rel, path, current, new_text, actor=actor, reason=reason, batch=batch)

    def delete(
        self,
        agent: str,
        rel: str,
        *,
        expected_sha: str | None,
        actor: str,
        owner: str | None = None,
        reason: str = "",
        batch: str | None = None,
    ) -> WriteResult:
        path = self.path(agent, rel, owner)
        with self.lock(path):
            current = self._snapshot(rel, path)
            if not current.exists:
                raise NotFoundError(f"{rel} does not exist")
            if expected_sha is not None and expected_sha != current.sha:
                raise ConflictError(f"{rel} changed since it was read; re-read it and try again")
            version = self._keep(agent, owner, rel, current, "", actor, reason or "deleted", batch)
            path.unlink()
            self._info_cache.pop(str(path), None)
            self._notify(WriteEvent(agent, owner, rel, path, "", actor))
            return WriteResult(rel, path, "", current.sha, True, version=version.version)

    def rename(self, agent: str, src: str, dst: str, *, actor: str, owner: str | None = None) -> WriteResult:
        source = self.read(agent, src, owner=owner)
        if not source.exists:
            raise NotFoundError(f"{src} does not exist")
        if self.read(agent, dst, owner=owner).exists:
            raise ConflictError(f"{dst} already exists; choose another name or delete it first")
        result = self.write(agent, dst, source.text, expected_sha="", actor=PERSON if actor == PERSON else "rename",
                            owner=owner, reason=f"renamed from {src}")
        self.delete(agent, src, expected_sha=source.sha, actor=actor, owner=owner, reason=f"renamed to {dst}")
        return result

    def _commit(
        self,
        agent: str,
        owner: str | None,
        rel: str,
        path: Path,
        current: Snapshot,
        text: str,
        *,
        actor: str,
        reason: str,
        batch: str | None,
    ) -> WriteResult:
        archived: tuple[str, ...] = ()
        if actor != PERSON:
            text, archived = self._guard(agent, owner, rel, current.text, text, actor=actor, batch=batch)
        data = text.encode("utf-8")
        new_sha = sha256(data)
        if current.exists and new_sha == current.sha:
            return WriteResult(rel, path, new_sha, current.sha, False, archived)
        version = self._keep(agent, owner, rel, current, new_sha, actor, reason, batch)
        atomic_write(path, data)
        self._info_cache.pop(str(path), None)
        self._notify(WriteEvent(agent, owner, rel, path, new_sha, actor))
        return WriteResult(rel, path, new_sha, current.sha, True, archived, version.version)

    def _keep(
        self, agent: str, owner: str | None, rel: str, current: Snapshot, new_sha: str, actor: str, reason: str,
        batch: str | None,
    ) -> Version:
        data = current.text.encode("utf-8")
        record = Version(
            version=0,
            sha=current.sha,
            replaced_by=new_sha,
            at=self.clock.now().isoformat(timespec="seconds"),
            actor=actor,
            reason=reason,
            size=len(data),
            batch=batch,
            existed=current.exists,
        )
        return self.history_store.save(self.agent_key(agent, owner), rel, data, record)

    def _guard(
        self, agent: str, owner: str | None, rel: str, old: str, new: str, *, actor: str, batch: str | None
    ) -> tuple[str, tuple[str, ...]]:
        """What a machine writer may not do: drop frontmatter, touch pins, exceed a ceiling."""
        old_block, old_body = frontmatter.split(old)
        new_block, new_body = frontmatter.split(new)
        if old_block and not new_block:
            new_block = old_block
        new_body = preserve_pinned(old_body, new_body)
        archived: tuple[str, ...] = ()
        cap = self.ceiling_for(rel)
        if cap:
            archive_rel = f"memory/archive/{Path(rel).stem}-{self.clock.now():%Y-%m-%d}.md"
            result = apply_ceiling(new_body, cap, archive_rel)
            if result.truncated and new_block + result.body == old:
                # The same over-ceiling text again (a re-import, a retried write): the file would not
                # change and its tail went to the archive the first time; archiving it twice duplicates it.
                return old, ()
            if result.truncated:
                self._archive(agent, owner, archive_rel, rel, result.cut, cap=cap, actor=actor, batch=batch)
                archived = (archive_rel,)
            new_body = result.body
        return new_block + new_body, archived

    def _archive(
        self, agent: str, owner: str | None, archive_rel: str, source: str, cut: str, *, cap: int, actor: str,
        batch: str | None,
    ) -> None:
        now = self.clock.now()

        def add(current: str) -> str:
            if not current:
                current = f"---\nenabled: false\n---\n# Archive of {source} — {now:%Y-%m-%d}\n\n"
            note = f"<!-- cut from {source} at {now:%H:%M} by {actor} (ceiling {cap} chars) -->\n"
            return current.rstrip("\n") + "\n\n" + note + cut.rstrip("\n") + "\n"

        # Archive before the cut is committed: if we crash in between, the text exists twice, not zero times.
        self.update(agent, archive_rel, add, actor=PERSON, owner=owner, reason=f"archive for {source}", batch=batch)

    def _notify(self, event: WriteEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a listener must never undo or block a committed write
                log.exception("write listener failed for %s", event.rel)

    # -- daily notes ---------------------------------------------------------------------------

    def daily_rel(self, when: datetime | None = None) -> str:
        when = (when or self.clock.now()).astimezone(self.clock.tz)
        return f"memory/{when:%Y-%m-%d}.md"

    def append_daily(
        self,
        agent: str,
        title: str,
        body: str,
        *,
        actor: str,
        owner: str | None = None,
        when: datetime | None = None,
        batch: str | None = None,
    ) -> WriteResult:
        """Append `## HH:MM title` to today's note (created with `# YYYY-MM-DD`). Append-only."""
        when = (when or self.clock.now()).astimezone(self.clock.tz)
        rel = self.daily_rel(when)
        title = " ".join(title.split()) or "Note"

        def add(current: str) -> str:
            if not current:
                current = f"---\nenabled: false\n---\n# {when:%Y-%m-%d}\n"
            entry = f"## {when:%H:%M} {title}\n\n{body.strip()}\n"
            return current.rstrip("\n") + "\n\n" + entry

        result = self.update(agent, rel, add, actor=actor, owner=owner, reason="daily note", batch=batch)
        assert result is not None
        return result

    # -- agents and listings ---------------------------------------------------------------------

    def ensure_agent(self, agent: str, owner: str | None = None) -> list[str]:
        """Create the always-on files from the seeds where missing. Returns the files created."""
        created = []
        seeds = resources.files("mateclaw_mem.workspace") / "seeds"
        names = ALWAYS_ON if not (owner and self.owner_isolation) else ("PROFILE.md", "MEMORY.md")
        for name in names:
            if not self.read(agent, name, owner=owner).exists:
                text = (seeds / name).read_text(encoding="utf-8")
                try:
                    self.write(agent, name, text, expected_sha="", actor="seed", owner=owner, reason="seeded")
                    created.append(name)
                except ConflictError:
                    pass  # someone created it between our check and our write: theirs wins
        return created

    def list_files(self, agent: str, *, owner: str | None = None, prefix: str = "") -> list[FileInfo]:
        base = self.agent_dir(agent, owner)
        if not base.exists():
            return []
        out = []
        # os.walk and plain strings rather than Path.rglob: prompts list files on every turn, and
        # pathlib's per-path overhead dominated prompt assembly with a year of daily notes.
        for dirpath, dirnames, filenames in os.walk(base):
            rel_dir = os.path.relpath(dirpath, base)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
            skip_owners = not rel_dir and not (owner and self.owner_isolation)  # owners/ is listed per owner
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not (skip_owners and d == "owners"))
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
                cached = self._info_cache.get(path)
                if cached is not None and cached[0] == stamp:
                    out.append(cached[1])
                    continue
                try:
                    snap = self._snapshot(rel, Path(path))
                except (InvalidPathError, InvalidInputError):
                    continue
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
                self._info_cache[path] = (stamp, info)
                out.append(info)
        return sorted(out, key=lambda f: (f.sort_order, f.rel))

    # -- history and undo ------------------------------------------------------------------------

    def history(self, agent: str, rel: str, *, owner: str | None = None) -> list[Version]:
        self.path(agent, rel, owner)
        return self.history_store.list(self.agent_key(agent, owner), rel)

    def undo(
        self, agent: str, rel: str, *, owner: str | None = None, version: int | None = None, actor: str = PERSON
    ) -> WriteResult:
        """Restore a kept version (default: the one before the latest change). Itself undoable."""
        versions = self.history(agent, rel, owner=owner)
        if not versions:
            raise NotFoundError(f"{rel} has no earlier versions to restore")
        chosen = versions[-1] if version is None else next((v for v in versions if v.version == version), None)
        if chosen is None:
            raise NotFoundError(f"{rel}: no kept version {version} (see `mateclaw-mem history`)")
        return self._restore(agent, owner, chosen, actor=actor, reason=f"undo to version {chosen.version}")

    def _restore(self, agent: str, owner: str | None, chosen: Version, *, actor: str, reason: str,
                 expected_sha: str | None = None, batch: str | None = None) -> WriteResult:
        rel = chosen.rel
        if not chosen.existed:
            return self.delete(agent, rel, expected_sha=expected_sha, actor=actor, owner=owner, reason=reason)
        content = self.history_store.content(self.agent_key(agent, owner), rel, chosen.version).decode("utf-8")
        # Undo is a person's decision: restore byte for byte, no ceiling or pin rewriting.
        return self.write(agent, rel, content, expected_sha=expected_sha, actor=PERSON, owner=owner,
                          reason=reason, batch=batch)

    def undo_batch(self, batch: str, *, actor: str = PERSON) -> list[WriteResult]:
        """Undo every change a batch (one dream run) made, newest first. Refused as a whole with a
        conflict if any of those files changed since the batch wrote it."""
        versions = self.history_store.batch(batch)
        if not versions:
            raise NotFoundError(f"no changes recorded for run {batch}")
        first_by_file: dict[tuple[str, str], Version] = {}
        last_by_file: dict[tuple[str, str], Version] = {}
        for v in versions:
            first_by_file.setdefault((v.key, v.rel), v)
            last_by_file[(v.key, v.rel)] = v
        plans = []
        for file_key, first in first_by_file.items():
            agent, owner = _split_key(file_key[0])
            current = self._snapshot(first.rel, self.root / file_key[0] / first.rel)
            if current.sha != last_by_file[file_key].replaced_by:
                raise ConflictError(f"{first.rel} changed after run {batch}; undo it file by file instead")
            plans.append((agent, owner, first, current.sha))
        undo_batch = f"undo-{batch}"
        return [
            self._restore(agent, owner, first, actor=actor, reason=f"undo run {batch}", expected_sha=sha,
                          batch=undo_batch)
            for agent, owner, first, sha in plans
        ]


def _split_key(key: str) -> tuple[str, str | None]:
    parts = key.split("/")
    if len(parts) == 3 and parts[1] == "owners":
        return parts[0], unquote(parts[2])
    return parts[0], None


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


def atomic_write(path: Path, data: bytes) -> None:
    """Temp file in the same folder, fsync, rename, fsync the folder: old or new, never torn."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if path.exists():
            with contextlib.suppress(OSError):
                os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def clean_temp_files(root: Path) -> int:
    """Remove temp files a killed writer left behind (`.NAME.xxxx.tmp`). Returns how many."""
    count = 0
    if root.exists():
        for tmp in root.rglob(".*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()
                count += 1
    return count
