"""Seeding: an agent's always-on files created from the packaged seeds (`workspace/seeds/`) where
missing — never over a file someone already has."""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from mateclaw_mem.errors import ConflictError
from mateclaw_mem.workspace.listing import ALWAYS_ON

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store import WorkspaceStore

SEED_ACTOR = "seed"


def ensure_agent(store: WorkspaceStore, agent: str, owner: str | None = None) -> list[str]:
    """Create the missing always-on files (an owner's personal memory: PROFILE.md and MEMORY.md
    only). Returns the files created."""
    created = []
    seeds = resources.files("mateclaw_mem.workspace") / "seeds"
    names = ALWAYS_ON if not (owner and store.owner_isolation) else ("PROFILE.md", "MEMORY.md")
    for name in names:
        if not store.read(agent, name, owner=owner).exists:
            text = (seeds / name).read_text(encoding="utf-8")
            try:
                store.write(agent, name, text, expected_sha="", actor=SEED_ACTOR, owner=owner, reason="seeded")
                created.append(name)
            except ConflictError:
                pass  # someone created it between our check and our write: theirs wins
    return created
