"""WorkspaceStore: every read and write of a memory file goes through here.

Promises (DESIGN §1): writes are atomic (temp file, fsync, rename) under a per-file lock that also
holds across processes, and compare-and-swap on the hash the writer read; every change keeps the
previous version; machine writers keep pinned sections and obey size ceilings, with the cut text
archived, never dropped. A person's own write (`actor="person"`) is never cut.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mateclaw_mem.errors import (
    BusyError,
    ConflictError,
    InvalidInputError,
    InvalidPathError,
    NotFoundError,
)
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.workspace import blobs, ceilings, daily, month_archive, moves, oversized, reading, seeding, undo, walk
from mateclaw_mem.workspace.atomic import delete_verified, replace_verified, write_plain
from mateclaw_mem.workspace.conflicts import ConflictLog, FileLocks
from mateclaw_mem.workspace.history import History, Version
from mateclaw_mem.workspace.journal import Journal
from mateclaw_mem.workspace.listing import FileInfo, FileLister
from mateclaw_mem.workspace.machine_rules import changed_keys
from mateclaw_mem.workspace.paths import (
    agent_file,
    agent_folder,
    check_agent,
    escapes,
)
from mateclaw_mem.workspace.provenance import ProvenanceStore
from mateclaw_mem.workspace.records import Snapshot, WriteEvent, WriteResult, sha256

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.settings import Settings

log = logging.getLogger(__name__)

PERSON = "person"
REPLAN_LIMIT = 8  # re-plans of one write on concurrent saves before giving up as busy
STATE_DIRNAME = ".mateclaw"


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
        file_max_bytes: int = 0,
    ) -> None:
        self.root = Path(root)
        self.file_max_bytes = file_max_bytes  # workspace/oversized.py: bigger files are read in parts
        self.clock = clock
        self.ceilings = {"PROFILE.md": 4000, "MEMORY.md": 8000} if ceilings is None else dict(ceilings)
        self.owner_isolation = owner_isolation
        self.state_dir = self.root / STATE_DIRNAME
        self.history_store = History(self.state_dir / "history", keep=history_keep)
        self.provenance = ProvenanceStore(self.state_dir / "provenance")
        # Multi-file operations' intents (journal.py), keyed by agent folder as the store's notes are.
        self.journal = Journal(self.state_dir / "journal", key=self.agent_key)
        self._written: dict[str, str] = {}  # path -> sha this process last wrote (its own fresh mtime)
        # Called with the path right before the final exchange: the race tests put a person's save
        # at exactly that instant (a real write to the real file, from outside the store).
        self.before_replace: Callable[[Path], None] | None = None
        self._locks = FileLocks(self.state_dir / "locks", timeout=lock_timeout)
        self._conflicts = ConflictLog(self.state_dir / "conflicts.jsonl")
        self._listeners: list[Callable[[WriteEvent], None]] = []
        self._lister = FileLister(self.ceiling_for, self._snapshot)

    @classmethod
    def from_settings(cls, settings: Settings, clock: Clock) -> WorkspaceStore:
        memory = settings.mate.memory
        return cls(
            settings.workspace,
            clock=clock,
            ceilings={"PROFILE.md": memory.profile_max_chars, "MEMORY.md": memory.memory_md_max_chars},
            history_keep=settings.history.keep_versions,
            owner_isolation=settings.owner_isolation,
            file_max_bytes=memory.memory_file_max_bytes,
        )

    # -- paths ---------------------------------------------------------------------------------

    def agent_key(self, agent: str, owner: str | None = None) -> str:
        """The agent directory relative to the workspace root (owner folders when isolation is on;
        `walk.GLOBAL` for GLOBAL memory)."""
        return walk.agent_key(agent, owner, owner_isolation=self.owner_isolation)

    def agent_dir(self, agent: str, owner: str | None = None) -> Path:
        """The agent's (or owner's) folder; NotFoundError for an agent never created (so no write
        makes one), InvalidPathError when a link takes it out of the root."""
        return agent_folder(self.root, self.agent_key(self.require_agent(agent), owner))

    def require_agent(self, agent: str) -> str:
        """The one check that `agent` exists, for every face and writer (`seeding.require_agent`)."""
        return seeding.require_agent(self.root, agent)

    def path(self, agent: str, rel: str, owner: str | None = None) -> Path:
        return agent_file(self.root, self.agent_key(self.require_agent(agent), owner), rel)

    def agents(self) -> list[str]:
        if not self.root.exists():
            return []
        out = []
        for p in sorted(self.root.iterdir()):
            if p.is_dir() and not p.name.startswith("."):
                with contextlib.suppress(InvalidPathError):
                    name = check_agent(p.name)
                    if escapes(self.root, name):  # a link out of the workspace or to another agent
                        log.warning("ignoring agent folder %s: it is a symbolic link elsewhere", name)
                        continue
                    out.append(name)
        return out

    def owners(self, agent: str) -> list[str]:
        """Owner keys with personal memory under this agent (empty unless owner isolation is on)."""
        return walk.owner_names(self.root / self.require_agent(agent), owner_isolation=self.owner_isolation)

    def walk_files(self, agent: str | None = None, *, archives: bool = False) -> Iterator[walk.DiskFile]:
        """Every memory file on disk (of one agent, or all), stat only; owner None = shared files;
        `archives` adds the compressed month archives (for readers that unpack them: the index)."""
        agents, also = self._walked(agent, archives)
        return walk.walk_files(self.root, agents, owner_isolation=self.owner_isolation, also=also)

    def count_files(self, *, archives: bool = False) -> int:
        """How many files `walk_files()` would yield, none of them stat'ed."""
        agents, also = self._walked(None, archives)
        return walk.count_files(self.root, agents, owner_isolation=self.owner_isolation, also=also)

    def _walked(self, agent: str | None, archives: bool) -> tuple[list[str], Callable[[str], bool] | None]:
        agents = [self.require_agent(agent)] if agent else [*self.agents(), *walk.global_folder(self.root)]
        return agents, month_archive.is_archive if archives else None

    def locate(self, path: Path) -> tuple[str, str | None, str] | None:
        """(agent, owner, rel) of a memory file path, or None if it is not one."""
        return walk.locate(self.root, path, owner_isolation=self.owner_isolation)

    def ceiling_for(self, rel: str) -> int:
        return self.ceilings.get(rel, 0)

    def subscribe(self, listener: Callable[[WriteEvent], None]) -> None:
        """Called after every write the store makes (index ingest, lineage bookkeeping)."""
        self._listeners.append(listener)

    # -- locking -------------------------------------------------------------------------------

    def lock(self, path: Path) -> contextlib.AbstractContextManager[None]:
        """Per-file lock for machine writers (threads of this process and other processes). A person
        never takes it: the final exchange, not this lock, is what keeps their saves."""
        return self._locks.hold(path)

    # -- reading -------------------------------------------------------------------------------

    def read(self, agent: str, rel: str, *, owner: str | None = None) -> Snapshot:
        path = self.path(agent, rel, owner)
        return self._settled(rel, path)

    _snapshot = staticmethod(reading.snapshot)  # one read, no waiting (history, listings, undo)

    def _settled(self, rel: str, path: Path) -> Snapshot:
        return reading.settled(rel, path, written_sha=self._written.get(str(path)))

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
        None skips the check and is meant for a person's own explicit overwrite (whatever it
        displaces is kept in history)."""
        if not isinstance(text, str):
            raise InvalidInputError("content must be text")
        if "\x00" in text:
            raise InvalidInputError(f"{rel}: content contains NUL characters")
        path = self.path(agent, rel, owner)
        with self.lock(path):
            for replans in range(REPLAN_LIMIT):
                current = self._settled(rel, path)
                if actor != PERSON:  # before any parsing of it: workspace/oversized.py
                    oversized.refuse_machine_write(rel, current.text, self.file_max_bytes)
                if expected_sha is not None and expected_sha != current.sha:
                    raise ConflictError(
                        f"{rel} changed since it was read (expected {expected_sha[:12] or 'no file'}, "
                        f"found {current.sha[:12] or 'no file'}); re-read it and try again"
                    )
                result = self._commit(agent, owner, rel, path, current, text, actor=actor, reason=reason,
                                      batch=batch, replans=replans)
                if result is not None:
                    return result
                if expected_sha is not None:
                    raise ConflictError(f"{rel} was saved by someone else while this write was being made; "
                                        "their version was kept - re-read it and try again")
            raise BusyError(f"{rel} kept changing while it was being written; try again")

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
        returns the new text, or None for no change. A save that lands meanwhile is kept and `fn`
        runs again on it."""
        path = self.path(agent, rel, owner)
        with self.lock(path):
            for replans in range(REPLAN_LIMIT):
                current = self._settled(rel, path)
                if actor != PERSON:  # before `fn` parses it: workspace/oversized.py
                    oversized.refuse_machine_write(rel, current.text, self.file_max_bytes)
                new_text = fn(current.text)
                if new_text is None:
                    return None
                result = self._commit(agent, owner, rel, path, current, new_text, actor=actor, reason=reason,
                                      batch=batch, replans=replans)
                if result is not None:
                    return result
            raise BusyError(f"{rel} kept changing while it was being written; try again")

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
            for _ in range(REPLAN_LIMIT):
                current = self._settled(rel, path)
                if not current.exists:
                    raise NotFoundError(f"{rel} does not exist")
                if expected_sha is not None and expected_sha != current.sha:
                    raise ConflictError(f"{rel} changed since it was read; re-read it and try again")
                if self.before_replace is not None:
                    self.before_replace(path)
                self.journal.note(batch, self.agent_key(agent, owner), rel, current.sha, "")
                outcome = delete_verified(self.root, *self._parts(agent, owner, rel), expected_sha=current.sha)
                self._keep_superseded(agent, owner, rel, outcome.superseded, actor)
                if not outcome.ok:
                    self._record_conflict(agent, owner, rel, actor, "delete")
                    if expected_sha is not None:
                        raise ConflictError(f"{rel} was saved by someone else while it was being deleted; "
                                            "their version was kept")
                    continue
                version = self._keep(agent, owner, rel, current, "", actor, reason or "deleted", batch)
                self._lister.forget(str(path))
                self._written.pop(str(path), None)
                self.provenance.drop(self.agent_key(agent, owner), rel)
                self._notify(WriteEvent(agent, owner, rel, path, "", actor))
                return WriteResult(rel, path, "", current.sha, True, version=version.version)
            raise BusyError(f"{rel} kept changing while it was being deleted; try again")

    def rename(self, agent: str, src: str, dst: str, *, actor: str, owner: str | None = None) -> WriteResult:
        """`src` moved to `dst` (which must not exist), journaled: workspace/moves.py."""
        return moves.move_files(self, agent, [(src, dst)], actor=actor, owner=owner)[0]

    def _parts(self, agent: str, owner: str | None, rel: str) -> tuple[list[str], str]:
        parts = [*self.agent_key(agent, owner).split("/"), *rel.split("/")]
        return parts[:-1], parts[-1]

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
        replans: int = 0,
    ) -> WriteResult | None:
        """Plan and put in place; None when someone saved the file meanwhile (their version is back
        in place and the caller re-plans on it)."""
        key = self.agent_key(agent, owner)
        record = self.provenance.load(key, rel)
        old_body = frontmatter.body(current.text)
        if current.exists:
            record.note_hand_edit(old_body, current.sha)
        archived: tuple[str, ...] = ()
        pins = 0
        if actor != PERSON:
            text, archived, pins = ceilings.guard(self, agent, owner, rel, current.text, text, record, actor=actor,
                                                  batch=batch)
        data = text.encode("utf-8")
        new_sha = sha256(data)
        new_body = frontmatter.body(text)
        if current.exists and new_sha == current.sha:
            if record.last_sha != current.sha:
                record.after_write(new_body, new_sha, by_person=False)
                self.provenance.save(key, rel, record)
            return WriteResult(rel, path, new_sha, current.sha, False, archived, pins_stripped=pins)
        mode = None
        if current.exists:
            with contextlib.suppress(OSError):
                mode = os.stat(path).st_mode & 0o777
        if self.before_replace is not None:
            self.before_replace(path)
        self.journal.note(batch, key, rel, current.sha, new_sha)
        outcome = replace_verified(self.root, *self._parts(agent, owner, rel), data,
                                   expected_sha=current.sha, mode=mode)
        self._keep_superseded(agent, owner, rel, outcome.superseded, actor)
        if not outcome.ok:
            self._record_conflict(agent, owner, rel, actor, "re-planned on the person's version")
            return None
        if pins:
            reason = f"{reason} ({pins} pin marker(s) from a machine removed)".strip()
            log.warning("%s/%s: removed %d pin marker(s) from a %s write (only a person pins)", key, rel, pins, actor)
        version = self._keep(agent, owner, rel, current, new_sha, actor, reason, batch)
        if actor == PERSON:
            changed = changed_keys(old_body, new_body)
            record.mark_person(new_body, changed)
        record.after_write(new_body, new_sha, by_person=actor == PERSON)
        self.provenance.save(key, rel, record)
        self._written[str(path)] = new_sha
        self._lister.forget(str(path))
        self._notify(WriteEvent(agent, owner, rel, path, new_sha, actor))
        return WriteResult(rel, path, new_sha, current.sha, True, archived, version.version, pins, replans)

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

    def _keep_superseded(self, agent: str, owner: str | None, rel: str, versions: list[bytes], actor: str) -> None:
        """A person's save pushed aside during the final step (they saved twice in an instant, or no
        atomic exchange exists here): kept in history so undo can bring it back."""
        for data in versions:
            sha = sha256(data)
            record = Version(version=0, sha=sha, replaced_by="", at=self.clock.now().isoformat(timespec="seconds"),
                             actor=PERSON, reason=f"hand save displaced during a {actor} write (kept)",
                             size=len(data), existed=True)
            self.history_store.save(self.agent_key(agent, owner), rel, data, record)
            self._record_conflict(agent, owner, rel, actor, "a hand save was displaced; kept in history")

    def _record_conflict(self, agent: str, owner: str | None, rel: str, actor: str, outcome: str) -> None:
        self._conflicts.record(self.clock.now(), f"{self.agent_key(agent, owner)}/{rel}", actor, outcome)

    def conflict_report(self, last: int = 5) -> dict[str, object]:
        """Hand saves that met a machine write at its final step (all kept): count and the latest."""
        return self._conflicts.report(last)

    def preview(self, agent: str, rel: str, old_text: str, new_text: str, *, actor: str,
                owner: str | None = None, erosion: bool = True) -> str:
        """What a machine write of `new_text` over `old_text` would put on disk (pins, a person's
        lines, the ceiling), without writing anything. Raises RejectedError where the write would."""
        return ceilings.preview(self, agent, owner, rel, old_text, new_text, actor=actor, erosion=erosion)

    def _notify(self, event: WriteEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a listener must never undo or block a committed write
                log.exception("write listener failed for %s", event.rel)

    # -- daily notes ---------------------------------------------------------------------------

    def daily_rel(self, when: datetime | None = None) -> str:
        return daily.daily_rel(self.clock, when)

    def append_daily(self, agent: str, title: str, body: str, *, actor: str, owner: str | None = None,
                     when: datetime | None = None, batch: str | None = None) -> WriteResult:
        """Append `## HH:MM title` to today's note (created with `# YYYY-MM-DD`). Append-only."""
        return daily.append_daily(self, agent, title, body, actor=actor, owner=owner, when=when, batch=batch)

    # -- agents and listings ---------------------------------------------------------------------

    def ensure_agent(self, agent: str, owner: str | None = None) -> list[str]:
        """Create the agent (the only way one is made) and its missing always-on files."""
        return seeding.ensure_agent(self, agent, owner)

    def list_files(self, agent: str, *, owner: str | None = None, prefix: str = "") -> list[FileInfo]:
        include_owners = bool(owner and self.owner_isolation)  # owners/ is listed per owner
        return self._lister.list(self.agent_dir(agent, owner), prefix=prefix, include_owners=include_owners)

    def unreadable_files(self) -> dict[str, str]:
        """Memory files a listing could not read as text (not UTF-8), relative to the root -> why."""
        return {os.path.relpath(p, self.root): why for p, why in sorted(self._lister.unreadable.items())}

    def one_listing(self) -> contextlib.AbstractContextManager[None]:
        """Within it, this thread lists each folder once: a report that lists the same files twice."""
        return self._lister.memo()

    # -- history and undo ------------------------------------------------------------------------

    def history(self, agent: str, rel: str, *, owner: str | None = None) -> list[Version]:
        blobs.path(self, agent, rel, owner) if blobs.is_binary(rel) else self.path(agent, rel, owner)
        return self.history_store.list(self.agent_key(agent, owner), rel)

    def undo(
        self, agent: str, rel: str, *, owner: str | None = None, version: int | None = None, actor: str = PERSON
    ) -> WriteResult:
        """Restore a kept version (default: the one before the latest change). Itself undoable."""
        return undo.undo_file(self, agent, rel, owner=owner, version=version, actor=actor)

    def undo_batch(self, batch: str, *, actor: str = PERSON) -> list[WriteResult]:
        """Undo every change a batch (one run) made; refused as a whole if any file changed since."""
        return undo.undo_batch(self, batch, actor=actor)


def atomic_write(path: Path, data: bytes) -> None:
    """Temp file, fsync, rename: for files that are ours alone (an export folder)."""
    write_plain(path, data)

