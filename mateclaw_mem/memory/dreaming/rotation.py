"""Archive rotation: what is older than `dream.archive-keep-days` rolls into ONE compressed file per
month, `memory/archive/YYYY-MM.md.gz` (format and restore in `workspace/month_archive.py`):

- daily notes `memory/YYYY-MM-DD.md` dated before the cut-off, byte for byte;
- the monthly text archives of months that ended before it: the diary's `memory/dreams/YYYY-MM.md`
  and the `memory/archive/daily-YYYY-MM.md` files earlier versions of this rotation wrote;
- DREAMS.md entries (`## YYYY-MM-DD HH:MM Dreaming`) dated before it, appended to that month's
  `memory/dreams/YYYY-MM.md` inside the archive, as the diary's own cap would have (so restoring a
  month gives the diary's archive file back). Pinned entries and the newest one stay.

Archive first, then remove the originals (each delete compare-and-swap on what was archived: a note
written to meanwhile stays, and the next rotation archives its new version), all under one batch id
`rotate-<agent>-<timestamp>`, so `mateclaw-mem undo AGENT --run ID` undoes a rotation as a whole.
Idempotent: the archive is a pure function of its members, so a re-run (after a crash, say) writes
the same bytes, which the store takes as no change. A damaged archive is reported and its month
left alone: rolling into it would lose what it still holds.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import TYPE_CHECKING

from mateclaw_mem.errors import ConflictError, InvalidInputError, NotFoundError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.sections import Section, join, split_sections
from mateclaw_mem.memory.dreaming.candidates import DAILY_RE
from mateclaw_mem.memory.dreaming.diary import ARCHIVE_DIR as DIARY_ARCHIVE_DIR
from mateclaw_mem.memory.dreaming.diary import DIARY_REL, SUMMARY_TITLE
from mateclaw_mem.workspace import month_archive
from mateclaw_mem.workspace.journal import Step

if TYPE_CHECKING:
    from mateclaw_mem.workspace.records import Snapshot
    from mateclaw_mem.workspace.store import WorkspaceStore

log = logging.getLogger(__name__)

_MONTHLY_RE = re.compile(r"^memory/(?:archive/daily-|dreams/)(\d{4}-\d{2})\.md$")
_ENTRY_RE = re.compile(r"^(\d{4}-\d{2}-\d{2}) \d{2}:\d{2} Dreaming\b")


@dataclass
class _Month:
    files: dict[str, Snapshot] = field(default_factory=dict)  # rel -> as read (deleted after archiving)
    entries: list[Section] = field(default_factory=list)  # DREAMS.md entries to move


@dataclass
class Rotation:
    moved: list[str] = field(default_factory=list)  # files rolled, then "DREAMS.md: <title>" entries
    archives: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)  # archives refused as damaged (message each)


def rotate_daily_notes(
    store: WorkspaceStore, agent: str, *, owner: str | None, today: date, keep_days: int, actor: str
) -> list[str]:
    """Roll what is dated before `today - keep_days` into its month's archive. Returns what moved."""
    return rotate(store, agent, owner=owner, today=today, keep_days=keep_days, actor=actor).moved


def rotate(
    store: WorkspaceStore, agent: str, *, owner: str | None, today: date, keep_days: int, actor: str
) -> Rotation:
    cutoff = today - timedelta(days=keep_days)
    batch = f"rotate-{agent}-{store.clock.now():%Y%m%dT%H%M%S}"
    plan = _plan(store, agent, owner, cutoff)
    out = Rotation()
    steps = _steps(store, agent, owner, plan, actor)
    if not steps:
        return out
    # Journaled (workspace/journal.py): a kill between the archive and the removal of what it now
    # holds is finished at the next start - never a note both archived and still on disk, or a
    # diary entry gone from DREAMS.md before its month holds it.
    with store.journal.operation("month-roll", batch, steps):
        _roll(store, agent, owner, plan, actor, batch, out)
    return out


def _steps(store: WorkspaceStore, agent: str, owner: str | None, plan: dict[str, _Month],
           actor: str) -> list[Step]:
    """The whole roll, computed before its first write: each month's archive bytes, each removal,
    DREAMS.md without the entries moved."""
    steps: list[Step] = []
    entries: list[Section] = []
    for month, pending in sorted(plan.items()):
        try:
            current = month_archive.read_month(store, agent, month, owner=owner)
        except InvalidInputError:
            continue  # damaged: `_roll` leaves the month alone and reports it
        members = _merge(dict(current.members) if current else {}, pending, month)
        rel = month_archive.archive_rel(month)
        if members is not None:
            steps.append(Step(agent, owner, rel, current.sha if current else "", month_archive.pack(month, members),
                              actor, "rotated"))
        steps += [Step(agent, owner, f, snap.sha, None, actor, f"rotated into {rel}")
                  for f, snap in sorted(pending.files.items())]
        entries += pending.entries
    if entries:
        diary = store.read(agent, DIARY_REL, owner=owner)
        dropped = _without_entries(diary.text, {s.text for s in entries})[0]
        if dropped is not None:
            steps.append(Step(agent, owner, DIARY_REL, diary.sha, dropped.encode("utf-8"), actor,
                              "rotated old entries into month archives"))
    return steps


def _roll(store: WorkspaceStore, agent: str, owner: str | None, plan: dict[str, _Month], actor: str, batch: str,
          out: Rotation) -> None:
    for month, pending in sorted(plan.items()):
        try:
            result = month_archive.update_month(
                store, agent, month, lambda members, p=pending, m=month: _merge(members, p, m),
                actor=actor, owner=owner, reason=f"rotated {len(pending.files) + len(pending.entries)} item(s)",
                batch=batch)
        except InvalidInputError as exc:
            log.warning("%s: archive rotation left %s alone: %s", agent, month, exc)
            out.damaged.append(exc.message)
            continue
        if result is not None:
            out.archives.append(result.rel)
        for rel, snap in sorted(pending.files.items()):
            try:
                store.delete(agent, rel, expected_sha=snap.sha, actor=actor, owner=owner,
                             reason=f"rotated into {month_archive.archive_rel(month)}", batch=batch)
            except (ConflictError, NotFoundError):
                continue  # written to meanwhile: kept; the next rotation archives the new version
            out.moved.append(rel)
        if pending.entries:
            out.moved += _drop_entries(store, agent, owner, pending.entries, actor=actor, batch=batch)


def _plan(store: WorkspaceStore, agent: str, owner: str | None, cutoff: date) -> dict[str, _Month]:
    plan: dict[str, _Month] = {}
    for info in store.list_files(agent, owner=owner, prefix="memory/"):
        month = _due_month(info.rel, cutoff)
        if month is None:
            continue
        snap = store.read(agent, info.rel, owner=owner)
        if snap.exists:
            plan.setdefault(month, _Month()).files[info.rel] = snap
    diary = store.read(agent, DIARY_REL, owner=owner)
    if diary.exists:
        entries = [s for s in split_sections(frontmatter.body(diary.text))[1]
                   if _ENTRY_RE.match(s.title) and s.title != SUMMARY_TITLE]
        for s in entries[:-1]:  # the newest entry stays, whatever its age (the card and `latest` read it)
            m = _ENTRY_RE.match(s.title)
            if m is None or s.pinned:
                continue
            try:
                day = date.fromisoformat(m.group(1))
            except ValueError:
                continue
            if day < cutoff:
                plan.setdefault(f"{day:%Y-%m}", _Month()).entries.append(s)
    return plan


def _due_month(rel: str, cutoff: date) -> str | None:
    """The month a file rolls into if it is old enough, else None."""
    m = DAILY_RE.match(rel)
    if m:
        try:
            day = date.fromisoformat(m.group(1))
        except ValueError:
            return None
        return f"{day:%Y-%m}" if day < cutoff else None
    m = _MONTHLY_RE.match(rel)
    if m:
        year, mon = (int(x) for x in m.group(1).split("-"))
        if not 1 <= mon <= 12:
            return None
        month_end = date(year + mon // 12, mon % 12 + 1, 1) - timedelta(days=1)
        return m.group(1) if month_end < cutoff else None
    return None


def _merge(members: dict[str, bytes], pending: _Month, month: str) -> dict[str, bytes] | None:
    before = dict(members)
    diary_rel = f"{DIARY_ARCHIVE_DIR}/{month}.md"
    for rel, snap in pending.files.items():
        data = snap.text.encode("utf-8")
        if rel == diary_rel and rel in members:
            members[rel] = _union(members[rel].decode("utf-8"), split_sections(frontmatter.body(snap.text))[1])
        else:
            # A note of the same name rolled before and back again (restored, edited): the version on
            # disk is the newer one; the archive's previous bytes stay in the store's history.
            members[rel] = data
    if pending.entries:
        base = members.get(diary_rel, b"").decode("utf-8") or f"---\nenabled: false\n---\n# Dreaming diary — {month}\n"
        members[diary_rel] = _union(base, pending.entries)
    return None if members == before else members


def _union(text: str, sections: list[Section]) -> bytes:
    """`text` with the sections it does not hold yet appended, in the diary archive's layout."""
    new = [s for s in sections if s.text.rstrip("\n") not in text]
    if new:
        text = text.rstrip("\n") + "\n\n" + "\n".join(s.text.rstrip("\n") + "\n" for s in new)
    return text.encode("utf-8")


def _drop_entries(store: WorkspaceStore, agent: str, owner: str | None, entries: list[Section], *, actor: str,
                  batch: str) -> list[str]:
    moved = {s.text for s in entries}
    gone: list[str] = []

    def drop(current: str) -> str | None:
        text, gone[:] = _without_entries(current, moved)
        return text

    store.update(agent, DIARY_REL, drop, actor=actor, owner=owner, reason="rotated old entries into month archives",
                 batch=batch)
    return gone


def _without_entries(current: str, moved: set[str]) -> tuple[str | None, list[str]]:
    """DREAMS.md without the moved entries (None: none of them is there) and what went."""
    block, body = frontmatter.split(current)
    preamble, sections = split_sections(body)
    kept = [s for s in sections if s.text not in moved]
    gone = [f"{DIARY_REL}: {s.title}" for s in sections if s.text in moved]
    return (None if len(kept) == len(sections) else block + join(preamble, kept)), gone
