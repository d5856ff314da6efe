"""The safety gates a dream's rewrite of MEMORY.md passes (memory/dreaming/service.py runs them):

- loss gate: a rewrite that drops more than 25% of the existing entries (`##` sections and list
  items, pinned ones excluded) is rejected; smaller drops are archived to
  `memory/archive/MEMORY-YYYY-MM-DD.md` before the rewrite;
- protection: pinned sections and sections a person edited since the last machine write (from the
  file's history) stay verbatim; an edit the history cannot explain (made outside the store)
  protects every existing section;
- the diff shown for what the store will really write (`WorkspaceStore.preview`: frontmatter kept,
  pins restored, a person's lines kept, ceiling applied), which is also what the gate judges.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.sections import Section, join, positions, reinsert, split_sections
from mateclaw_mem.memory.dreaming.shingles import containment, shingles
from mateclaw_mem.workspace.store import PERSON, WorkspaceStore

ACTOR = "dreaming"
MEMORY_REL = "MEMORY.md"
LOSS_LIMIT = 0.25  # share of existing entries a rewrite may drop (they are archived); more is rejected
KEPT_CONTAINMENT = 0.7  # an old list item whose shingles are this much inside a new line survived
PREAMBLE_KEY = "\x00preamble"  # protected-set key for the text before the first `##`


# -- the loss gate ---------------------------------------------------------------------------------


def _list_items(text: str) -> list[str]:
    out = []
    for raw in text.splitlines():
        m = re.match(r"^\s*(?:[-*+]|\d+[.)])\s+(.*\S)\s*$", raw)
        if m:
            out.append(raw.rstrip())
    return out


def count_entries(body: str) -> int:
    """Entries of MEMORY.md for the loss gate: `##` sections and list items, pinned ones excluded
    (the store restores those whatever a rewrite does)."""
    preamble, sections = split_sections(body)
    count = len(_list_items(preamble))
    for s in sections:
        if not s.pinned:
            count += 1 + len(_list_items(s.text))
    return count


def dropped_entries(old_body: str, new_body: str) -> list[tuple[str, str]]:
    """(label, text to archive) for each old entry the new body no longer carries. A list item
    survives when it is present verbatim or mostly contained in some new line (a merge or rewording)."""
    _, new_sections = split_sections(new_body)
    new_keys = {s.key for s in new_sections}
    new_plain = {" ".join(line.split()) for line in new_body.splitlines()}
    new_shingles = [shingles(line) for line in new_body.splitlines() if line.strip()]

    def survives(item: str) -> bool:
        text = " ".join(item.split())
        if text in new_plain or text.lstrip("-*+ ") in new_body:
            return True
        sh = shingles(text)
        return len(sh) >= 2 and any(containment(sh, line) >= KEPT_CONTAINMENT for line in new_shingles)

    preamble, sections = split_sections(old_body)
    dropped: list[tuple[str, str]] = []
    for item in _list_items(preamble):
        if not survives(item):
            dropped.append((item.strip(), item))
    for s in sections:
        if s.pinned:
            continue
        if s.key not in new_keys:
            dropped.append((f"## {s.title}", s.text))
            dropped.extend((i.strip(), "") for i in _list_items(s.text))  # archived with their section
            continue
        for item in _list_items(s.text):
            if not survives(item):
                dropped.append((item.strip(), f"{item}  <!-- from ## {s.title} -->"))
    return dropped


def archive_plan(dropped: list[tuple[str, str]], now: datetime, run_id: str) -> tuple[str, Callable[[str], str | None]]:
    """(the archive file, its update) for the entries a rewrite drops: the bytes the dream's journal
    stages (memory/dreaming/apply.py) and the ones `archive_dropped` writes are the same."""
    rel = f"memory/archive/MEMORY-{now:%Y-%m-%d}.md"
    text = "\n".join(t.rstrip("\n") for _, t in dropped if t) + "\n"

    def add(current: str) -> str | None:
        if text.strip() in current:
            return None  # a retry after a conflict: already archived
        if not current:
            current = f"---\nenabled: false\n---\n# Archive of MEMORY.md — {now:%Y-%m-%d}\n\n"
        note = f"<!-- dropped from MEMORY.md at {now:%H:%M} by dream run {run_id} -->\n"
        return current.rstrip("\n") + "\n\n" + note + text

    return rel, add


def archive_dropped(store: WorkspaceStore, agent: str, owner: str | None, dropped: list[tuple[str, str]],
                    now: datetime, run_id: str) -> str:
    rel, add = archive_plan(dropped, now, run_id)
    # Archive first: a crash before the rewrite leaves the text twice, never zero times.
    store.update(agent, rel, add, actor=ACTOR, owner=owner, reason=f"archive for {run_id}", batch=run_id)
    return rel


# -- protected sections ----------------------------------------------------------------------------


def protected_sections(store: WorkspaceStore, agent: str, owner: str | None, snap: Any,
                       rel: str = MEMORY_REL) -> set[str]:
    """Section keys of `rel` a machine may not change: pinned, and hand-edited since the last machine
    write (SOUL.md proposals use it too)."""
    _, sections = split_sections(snap.body)
    keys = {s.key for s in sections if s.pinned}
    if not snap.exists:
        return keys
    versions = store.history(agent, rel, owner=owner)
    if not versions or versions[-1].replaced_by != snap.sha:
        # Changed outside the store (or created by hand): we cannot tell which sections the
        # person touched, so every one of them is theirs.
        return keys | {s.key for s in sections} | {PREAMBLE_KEY}
    key = store.agent_key(agent, owner)
    after = snap.text
    for v in reversed(versions):
        if v.actor != PERSON:
            break
        before = store.history_store.content(key, rel, v.version).decode("utf-8") if v.existed else ""
        keys |= _changed_sections(before, after)
        after = before
    return keys


def _changed_sections(before: str, after: str) -> set[str]:
    b_pre, b_secs = split_sections(frontmatter.body(before))
    a_pre, a_secs = split_sections(frontmatter.body(after))
    old = {s.key: s.text.rstrip() for s in b_secs}
    keys = {s.key for s in a_secs if old.get(s.key) != s.text.rstrip()}
    if b_pre.rstrip() != a_pre.rstrip():
        keys.add(PREAMBLE_KEY)
    return keys


def preserve_sections(old_body: str, new_body: str, keys: set[str]) -> str:
    """Put the protected sections of `old_body` back verbatim (changed → restored in place, dropped →
    re-inserted after the section that preceded it), and the old preamble if it is protected."""
    if not keys:
        return new_body
    old_pre, old_secs = split_sections(old_body)
    pre, secs = split_sections(new_body)
    if PREAMBLE_KEY in keys:
        pre = old_pre
    at_of = positions(secs)
    for i, s in enumerate(old_secs):
        if s.key not in keys:
            continue
        at = at_of.get(s.key)
        if at is not None:
            secs[at] = s
            continue
        reinsert(secs, old_secs, i, at_of)
    # A restored section that ended without a blank line must not glue onto the next heading.
    fixed = [Section(s.title, s.text if s.text.endswith("\n") else s.text + "\n") for s in secs]
    return join(pre, fixed)


# -- what changed ----------------------------------------------------------------------------------


def diff(before: str, after: str) -> tuple[str, int, int]:
    lines = list(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                      fromfile="MEMORY.md (before)", tofile="MEMORY.md (after)"))
    added = sum(1 for ln in lines if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in lines if ln.startswith("-") and not ln.startswith("---"))
    text = "".join(ln if ln.endswith("\n") else ln + "\n" for ln in lines)
    return text, added, removed
