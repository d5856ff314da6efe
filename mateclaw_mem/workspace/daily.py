"""Daily notes: `memory/YYYY-MM-DD.md`, append-only, one `## HH:MM title` section per entry, in the
clock's timezone (a note written just after midnight belongs to the new day where the person is)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.workspace.records import WriteResult
    from mateclaw_mem.workspace.store_port import StorePort


def daily_rel(clock: Clock, when: datetime | None = None) -> str:
    when = (when or clock.now()).astimezone(clock.tz)
    return f"memory/{when:%Y-%m-%d}.md"


def append_daily(
    store: StorePort, agent: str, title: str, body: str, *, actor: str, owner: str | None = None,
    when: datetime | None = None, batch: str | None = None,
) -> WriteResult:
    """Append `## HH:MM title` to the day's note (created with `# YYYY-MM-DD`)."""
    when = (when or store.clock.now()).astimezone(store.clock.tz)
    rel = daily_rel(store.clock, when)
    title = " ".join(title.split()) or "Note"

    def add(current: str) -> str:
        if not current:
            current = f"---\nenabled: false\n---\n# {when:%Y-%m-%d}\n"
        entry = f"## {when:%H:%M} {title}\n\n{body.strip()}\n"
        return current.rstrip("\n") + "\n\n" + entry

    result = store.update(agent, rel, add, actor=actor, owner=owner, reason="daily note", batch=batch)
    assert result is not None  # `add` always returns text
    return result
