"""What a machine write may put on disk, and where a ceiling's cut goes.

`guard` is the store's step before a machine write is committed: pins a machine added are dropped,
a person's lines are kept, the size ceiling is applied (the rules: workspace/machine_rules.py), and the
cut text is archived to `memory/archive/<NAME>-YYYY-MM-DD.md` BEFORE the cut is committed — a crash
in between leaves the text twice, never zero times. `preview` answers the same question without
writing anything (dreaming's loss gate judges what would really land on disk).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.workspace import oversized
from mateclaw_mem.workspace.machine_rules import plan_machine_write
from mateclaw_mem.workspace.provenance import Record
from mateclaw_mem.workspace.records import sha256

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store_port import StorePort

ARCHIVE_ACTOR = "archive"


def archive_rel(store: StorePort, rel: str) -> str:
    """Where a ceiling cut of `rel` goes today."""
    return f"memory/archive/{Path(rel).stem}-{store.clock.now():%Y-%m-%d}.md"


def preview(store: StorePort, agent: str, owner: str | None, rel: str, old_text: str, new_text: str, *,
            actor: str, erosion: bool = True) -> str:
    """The text a machine write of `new_text` over `old_text` would leave; RejectedError where the
    write would raise it."""
    oversized.refuse_machine_write(rel, old_text, store.file_max_bytes)
    record = store.provenance.load(store.agent_key(agent, owner), rel)
    if old_text:
        record.note_hand_edit(frontmatter.body(old_text), sha256(old_text))
    return plan_machine_write(rel, old_text, new_text, record, actor=actor, cap=store.ceiling_for(rel),
                              archive_rel=archive_rel(store, rel), erosion=erosion).text


def guard(
    store: StorePort, agent: str, owner: str | None, rel: str, old: str, new: str, record: Record, *,
    actor: str, batch: str | None,
) -> tuple[str, tuple[str, ...], int]:
    """(text to write, archives written, pin markers removed) for a machine write."""
    oversized.refuse_machine_write(rel, old, store.file_max_bytes)
    cap = store.ceiling_for(rel)
    target = archive_rel(store, rel)
    plan = plan_machine_write(rel, old, new, record, actor=actor, cap=cap, archive_rel=target)
    if plan.cut:
        _archive(store, agent, owner, target, rel, plan.cut, cap=cap, actor=actor, batch=batch)
    return plan.text, (target,) if plan.cut else (), plan.pins


def _archive(
    store: StorePort, agent: str, owner: str | None, target: str, source: str, cut: str, *, cap: int,
    actor: str, batch: str | None,
) -> None:
    now = store.clock.now()

    def add(current: str) -> str | None:
        if cut.strip() and cut.strip() in current:
            return None  # a write re-planned after a concurrent save: this text is archived already
        if not current:
            current = f"---\nenabled: false\n---\n# Archive of {source} — {now:%Y-%m-%d}\n\n"
        note = f"<!-- cut from {source} at {now:%H:%M} by {actor} (ceiling {cap} chars) -->\n"
        return current.rstrip("\n") + "\n\n" + note + cut.rstrip("\n") + "\n"

    store.update(agent, target, add, actor=ARCHIVE_ACTOR, owner=owner, reason=f"archive for {source}", batch=batch)
