"""Renaming files (one, or a folder's worth) and deleting a folder: several files changed as one
operation, journaled (workspace/journal.py) so that a kill -9 between two files is finished at the
next start - never a file both under its old name and its new one, or half a folder gone.

A rename of `src` to `dst` is two changes: `dst` written with `src`'s bytes (it must not exist),
then `src` removed by compare-and-swap on the bytes copied. Every pair is checked, and every new
file's bytes staged in the journal, before the first change. All of one call's changes carry one
batch id (`rename-…` / `delete-…`), so `mateclaw-mem undo AGENT --run ID` undoes it whole.

A person who saves `src` while it is being moved wins: their version stays where it is, the copy
just made under `dst` is taken back, and the error says so (the pairs moved before it stay moved,
each whole).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mateclaw_mem.errors import ConflictError, NotFoundError
from mateclaw_mem.workspace.records import Step, WriteResult

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store_port import StorePort

PERSON = "person"
RENAME_ACTOR = "rename"


def move_files(store: StorePort, agent: str, pairs: Sequence[tuple[str, str]], *, actor: str,
               owner: str | None = None) -> list[WriteResult]:
    """Rename each (src, dst); the new files' write results, in order."""
    sources = []
    targets = {dst for _, dst in pairs}
    for src, dst in pairs:
        source = store.read(agent, src, owner=owner)
        if not source.exists:
            raise NotFoundError(f"{src} does not exist")
        if dst in {s for s, _ in pairs} or store.read(agent, dst, owner=owner).exists:
            raise ConflictError(f"{dst} already exists; choose another name or delete it first")
        sources.append(source)
    if len(targets) != len(pairs):
        raise ConflictError("two files would be renamed to the same name")
    # A machine's copy is written as "rename" (the store's machine rules apply), a person's as theirs.
    dst_actor = PERSON if actor == PERSON else RENAME_ACTOR
    batch = f"rename-{uuid.uuid4().hex[:12]}"
    steps: list[Step] = []
    for (src, dst), source in zip(pairs, sources, strict=True):
        steps += [Step(agent, owner, dst, "", source.text.encode("utf-8"), dst_actor, f"renamed from {src}"),
                  Step(agent, owner, src, source.sha, None, actor, f"renamed to {dst}")]
    out: list[WriteResult] = []
    with store.journal.operation("rename", batch, steps):
        for (src, dst), source in zip(pairs, sources, strict=True):
            result = store.write(agent, dst, source.text, expected_sha="", actor=dst_actor, owner=owner,
                                 reason=f"renamed from {src}", batch=batch)
            try:
                store.delete(agent, src, expected_sha=source.sha, actor=actor, owner=owner,
                             reason=f"renamed to {dst}", batch=batch)
            except (ConflictError, NotFoundError):
                # Saved (or removed) by someone while being moved: theirs stands; the copy goes.
                store.delete(agent, dst, expected_sha=result.sha, actor=actor, owner=owner,
                             reason=f"rename of {src} given up: it changed meanwhile", batch=batch)
                moved = f" ({len(out)} file(s) before it were renamed)" if out else ""
                raise ConflictError(f"{src} changed while it was being renamed; it stays as it is{moved}; "
                                    "try again") from None
            out.append(result)
    return out


def delete_files(store: StorePort, agent: str, rels: Sequence[str], *, actor: str, owner: str | None = None,
                 reason: str = "delete folder") -> int:
    """Delete every file of `rels` (kept in history) as one operation; how many were deleted. A file
    gone meanwhile is skipped; one saved meanwhile is deleted in the version planned on, as any
    delete without an expected hash is."""
    snaps = [s for s in (store.read(agent, rel, owner=owner) for rel in rels) if s.exists]
    batch = f"delete-{uuid.uuid4().hex[:12]}"
    steps = [Step(agent, owner, s.rel, s.sha, None, actor, reason) for s in snaps]
    done = 0
    with store.journal.operation("delete", batch, steps):
        for snap in snaps:
            try:
                store.delete(agent, snap.rel, expected_sha=None, actor=actor, owner=owner, reason=reason, batch=batch)
            except NotFoundError:
                continue
            done += 1
    return done
