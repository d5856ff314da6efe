"""Undo: restore a kept version of one file, or every change one run (a dream, an import) made.

An undo is the person's decision, so it writes as the person: byte for byte, no ceiling or pin
rewriting, and itself undoable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import unquote

from mateclaw_mem.errors import ConflictError, NotFoundError
from mateclaw_mem.workspace import blobs
from mateclaw_mem.workspace.history import Version
from mateclaw_mem.workspace.journal import Step
from mateclaw_mem.workspace.walk import OWNERS_DIR

if TYPE_CHECKING:
    from mateclaw_mem.workspace.records import WriteResult
    from mateclaw_mem.workspace.store_port import StorePort

PERSON = "person"


def undo_file(
    store: StorePort, agent: str, rel: str, *, owner: str | None = None, version: int | None = None,
    actor: str = PERSON,
) -> WriteResult:
    """Restore a kept version (default: the one before the latest change). Itself undoable."""
    versions = store.history(agent, rel, owner=owner)
    if not versions:
        raise NotFoundError(f"{rel} has no earlier versions to restore")
    chosen = versions[-1] if version is None else next((v for v in versions if v.version == version), None)
    if chosen is None:
        raise NotFoundError(f"{rel}: no kept version {version} (see `mateclaw-mem history`)")
    return _restore(store, agent, owner, chosen, actor=actor, reason=f"undo to version {chosen.version}")


def _restore(store: StorePort, agent: str, owner: str | None, chosen: Version, *, actor: str, reason: str,
             expected_sha: str | None = None, batch: str | None = None) -> WriteResult:
    rel = chosen.rel
    if blobs.is_binary(rel):  # a month archive: its bytes back, through the binary path
        if not chosen.existed:
            return blobs.delete(store, agent, rel, expected_sha=expected_sha, actor=PERSON, owner=owner,
                                reason=reason, batch=batch)
        data = store.history_store.content(store.agent_key(agent, owner), rel, chosen.version)
        return blobs.write(store, agent, rel, data, expected_sha=expected_sha, actor=PERSON, owner=owner,
                           reason=reason, batch=batch)
    if not chosen.existed:
        return store.delete(agent, rel, expected_sha=expected_sha, actor=actor, owner=owner, reason=reason,
                            batch=batch)
    content = store.history_store.content(store.agent_key(agent, owner), rel, chosen.version).decode("utf-8")
    # Undo is a person's decision: restore byte for byte, no ceiling or pin rewriting.
    return store.write(agent, rel, content, expected_sha=expected_sha, actor=PERSON, owner=owner,
                       reason=reason, batch=batch)


def undo_batch(store: StorePort, batch: str, *, actor: str = PERSON) -> list[WriteResult]:
    """Undo every change a batch (one dream run) made, newest first. Refused as a whole with a
    conflict if any of those files changed since the batch wrote it."""
    versions = store.history_store.batch(batch)
    if not versions:
        raise NotFoundError(f"no changes recorded for run {batch}")
    first_by_file: dict[tuple[str, str], Version] = {}
    last_by_file: dict[tuple[str, str], Version] = {}
    for v in versions:
        first_by_file.setdefault((v.key, v.rel), v)
        last_by_file[(v.key, v.rel)] = v
    undo_id = f"undo-{batch}"
    plans = []
    for file_key, first in first_by_file.items():
        agent, owner = _split_key(file_key[0])
        path = store.root / file_key[0] / first.rel
        current = blobs.read_path(first.rel, path) if blobs.is_binary(first.rel) else store._snapshot(first.rel, path)
        if current.sha != last_by_file[file_key].replaced_by:
            undone = store.history_store.batch(undo_id)
            if undone:
                # The usual reason the files moved on: this very undo, run before.
                raise ConflictError(f"run {batch} was already undone (run {undo_id} at {undone[-1].at}); "
                                    f"`mateclaw-mem undo AGENT --run {undo_id}` redoes it")
            raise ConflictError(f"{first.rel} changed after run {batch}; undo it file by file instead")
        plans.append((agent, owner, first, current.sha))
    # Every restored version staged in the journal first: an undo killed half-way is finished at
    # the next start (workspace/journal.py) rather than leaving the run half undone.
    steps = [Step(agent, owner, first.rel, sha, _kept(store, agent, owner, first), _undo_actor(first, actor),
                  f"undo run {batch}") for agent, owner, first, sha in plans]
    with store.journal.operation("undo", undo_id, steps):
        return [
            _restore(store, agent, owner, first, actor=actor, reason=f"undo run {batch}", expected_sha=sha,
                     batch=undo_id)
            for agent, owner, first, sha in plans
        ]


def _kept(store: StorePort, agent: str, owner: str | None, chosen: Version) -> bytes | None:
    """The bytes `_restore` puts back (None: it removes the file)."""
    if not chosen.existed:
        return None
    return store.history_store.content(store.agent_key(agent, owner), chosen.rel, chosen.version)


def _undo_actor(chosen: Version, actor: str) -> str:
    # As `_restore` writes: a month archive and a restored text as the person; a removal as asked.
    return PERSON if blobs.is_binary(chosen.rel) or chosen.existed else actor


def _split_key(key: str) -> tuple[str, str | None]:
    parts = key.split("/")
    if len(parts) == 3 and parts[1] == OWNERS_DIR:
        return parts[0], unquote(parts[2])
    return parts[0], None
