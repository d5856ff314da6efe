"""Binary memory files (the compressed month archives): read, written and deleted with the same
promises as the store's text files -- under the per-file lock, compare-and-swap on the hash read,
the previous bytes kept in history (so a batch undo reaches them), listeners told.

The store's own `write` takes text: a Markdown file must be UTF-8, and its ceilings, pins and
provenance are text rules. None of them applies to an archive, which only ever holds bytes that
were already in other files; so this is the whole binary path, kept apart from the text one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mateclaw_mem.errors import BusyError, ConflictError, InvalidPathError, NotFoundError
from mateclaw_mem.workspace.atomic import delete_verified, replace_verified
from mateclaw_mem.workspace.history import Version
from mateclaw_mem.workspace.paths import resolve_inside
from mateclaw_mem.workspace.records import WriteEvent, WriteResult, sha256

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store_port import StorePort

REPLAN_LIMIT = 8
BINARY_SUFFIXES = (".md.gz",)


def is_binary(rel: str) -> bool:
    return rel.endswith(BINARY_SUFFIXES)


@dataclass(frozen=True)
class Blob:
    rel: str
    path: Path
    data: bytes
    sha: str  # "" when the file does not exist
    exists: bool


def read_path(rel: str, path: Path) -> Blob:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Blob(rel, path, b"", "", False)
    except IsADirectoryError:
        raise InvalidPathError(f"{rel} is a folder, not a file") from None
    return Blob(rel, path, data, sha256(data), True)


def path(store: StorePort, agent: str, rel: str, owner: str | None = None) -> Path:
    """`store.path` for a binary file: the same checks, made on its Markdown name (`X.md.gz` -> `X.md`)."""
    if not is_binary(rel):
        raise InvalidPathError(f"path {rel!r} is not a compressed archive (.md.gz)")
    base = store.agent_dir(agent, owner)
    resolve_inside(base, rel[: -len(".gz")])
    where = base.joinpath(*rel.split("/"))
    if where.is_symlink():
        raise InvalidPathError(f"{rel} is a symbolic link; memory files are not read or written through links")
    return where


def read(store: StorePort, agent: str, rel: str, *, owner: str | None = None) -> Blob:
    return read_path(rel, path(store, agent, rel, owner))


def write(store: StorePort, agent: str, rel: str, data: bytes, *, expected_sha: str | None, actor: str,
          owner: str | None = None, reason: str = "", batch: str | None = None) -> WriteResult:
    """Replace (or create) a binary file; `expected_sha` as in `WorkspaceStore.write`. The same bytes
    again are no change (no history, no event): a re-run that computes the same archive is a no-op."""
    where = path(store, agent, rel, owner)
    with store.lock(where):
        for _ in range(REPLAN_LIMIT):
            current = read_path(rel, where)
            if expected_sha is not None and expected_sha != current.sha:
                raise ConflictError(f"{rel} changed since it was read; re-read it and try again")
            new_sha = sha256(data)
            if current.exists and new_sha == current.sha:
                return WriteResult(rel, where, new_sha, current.sha, False)
            store.journal.note(batch, store.agent_key(agent, owner), rel, current.sha, new_sha)
            outcome = replace_verified(store.root, *store._parts(agent, owner, rel), data, expected_sha=current.sha)
            store._keep_superseded(agent, owner, rel, outcome.superseded, actor)
            if not outcome.ok:
                if expected_sha is not None:
                    raise ConflictError(f"{rel} was replaced by someone else while it was being written")
                continue
            version = _keep(store, agent, owner, current, new_sha, actor, reason, batch)
            store._notify(WriteEvent(agent, owner, rel, where, new_sha, actor))
            return WriteResult(rel, where, new_sha, current.sha, True, version=version.version)
    raise BusyError(f"{rel} kept changing while it was being written; try again")


def delete(store: StorePort, agent: str, rel: str, *, expected_sha: str | None, actor: str,
           owner: str | None = None, reason: str = "", batch: str | None = None) -> WriteResult:
    where = path(store, agent, rel, owner)
    with store.lock(where):
        for _ in range(REPLAN_LIMIT):
            current = read_path(rel, where)
            if not current.exists:
                raise NotFoundError(f"{rel} does not exist")
            if expected_sha is not None and expected_sha != current.sha:
                raise ConflictError(f"{rel} changed since it was read; re-read it and try again")
            store.journal.note(batch, store.agent_key(agent, owner), rel, current.sha, "")
            outcome = delete_verified(store.root, *store._parts(agent, owner, rel), expected_sha=current.sha)
            store._keep_superseded(agent, owner, rel, outcome.superseded, actor)
            if not outcome.ok:
                if expected_sha is not None:
                    raise ConflictError(f"{rel} was replaced by someone else while it was being deleted")
                continue
            version = _keep(store, agent, owner, current, "", actor, reason or "deleted", batch)
            store._notify(WriteEvent(agent, owner, rel, where, "", actor))
            return WriteResult(rel, where, "", current.sha, True, version=version.version)
    raise BusyError(f"{rel} kept changing while it was being deleted; try again")


def _keep(store: StorePort, agent: str, owner: str | None, current: Blob, new_sha: str, actor: str,
          reason: str, batch: str | None) -> Version:
    record = Version(version=0, sha=current.sha, replaced_by=new_sha,
                     at=store.clock.now().isoformat(timespec="seconds"), actor=actor, reason=reason,
                     size=len(current.data), batch=batch, existed=current.exists)
    return store.history_store.save(store.agent_key(agent, owner), current.rel, current.data, record)
