"""Archive rotation: daily notes older than `dream.archive-keep-days` move into monthly archives
`memory/archive/daily-YYYY-MM.md`, which search still finds (with the archive weight).

Archive first, then delete the note (its previous content stays in history), all under one batch id
`rotate-<agent>-<timestamp>` so the rotation can be undone as a whole. Idempotent: a note already in
its archive (marker comment with the note's hash) is not appended twice after a crash.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import TYPE_CHECKING

from mateclaw_mem.errors import ConflictError, NotFoundError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.memory.dreaming.candidates import DAILY_RE

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store import WorkspaceStore


def rotate_daily_notes(
    store: WorkspaceStore, agent: str, *, owner: str | None, today: date, keep_days: int, actor: str
) -> list[str]:
    """Move daily notes dated before `today - keep_days` to their month's archive. Returns the notes moved."""
    cutoff = today - timedelta(days=keep_days)
    batch = f"rotate-{agent}-{store.clock.now():%Y%m%dT%H%M%S}"
    moved: list[str] = []
    for info in store.list_files(agent, owner=owner, prefix="memory/"):
        m = DAILY_RE.match(info.rel)
        if not m:
            continue
        try:
            day = date.fromisoformat(m.group(1))
        except ValueError:
            continue
        if day >= cutoff:
            continue
        snap = store.read(agent, info.rel, owner=owner)
        if not snap.exists:
            continue
        archive_rel = f"memory/archive/daily-{day:%Y-%m}.md"
        marker = f"<!-- {info.rel} sha256:{snap.sha[:16]} -->"
        body = frontmatter.body(snap.text).strip("\n")

        def add(current: str, marker: str = marker, body: str = body, day: date = day) -> str | None:
            if marker in current:
                return None
            if not current:
                current = f"---\nenabled: false\n---\n# Daily notes — {day:%Y-%m}\n"
            return current.rstrip("\n") + "\n\n" + marker + "\n" + body + "\n"

        store.update(agent, archive_rel, add, actor=actor, owner=owner, reason=f"rotated {info.rel}", batch=batch)
        try:
            store.delete(agent, info.rel, expected_sha=snap.sha, actor=actor, owner=owner,
                         reason=f"rotated into {archive_rel}", batch=batch)
        except (ConflictError, NotFoundError):
            continue  # written to meanwhile: keep it; the next rotation archives the new version
        moved.append(info.rel)
    return moved
