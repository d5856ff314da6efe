"""Agents: created only here, always with their always-on files from the packaged seeds
(`workspace/seeds/`, never over a file someone already has), and the one check that an agent exists.

An agent is a folder directly under the workspace root. Only `ensure_agent` makes one (for `init`,
`POST /api/v1/agents` and the daemon's first start); every other writer refuses an agent that was
never created, so a typo in a name is an error that says how to create it, not a half-made agent."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from mateclaw_mem.errors import ConflictError, NotFoundError
from mateclaw_mem.workspace.listing import ALWAYS_ON
from mateclaw_mem.workspace.paths import GLOBAL_DIR, agent_folder, check_agent

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store_port import StorePort

SEED_ACTOR = "seed"


def unknown_agent(agent: str) -> NotFoundError:
    """The one answer every face gives for an agent that was never created (CLI exit 3, HTTP 404,
    MCP tool error): what is missing and the two ways to create it."""
    return NotFoundError(
        f"no agent {agent!r} in this workspace; create it with `mateclaw-mem init {agent}` "
        f'or POST /api/v1/agents {{"agentId": "{agent}"}}'
    )


def require_agent(root: Path, agent: str) -> str:
    """`agent` when its folder exists; InvalidPathError for a bad name, else `unknown_agent`.
    GLOBAL memory (`global/`) always exists: its folder is made by its first write."""
    if agent == GLOBAL_DIR:
        return agent
    if not (root / check_agent(agent)).is_dir():
        raise unknown_agent(agent)
    return agent


def ensure_agent(store: StorePort, agent: str, owner: str | None = None) -> list[str]:
    """Create the agent if needed and its missing always-on files (an owner's personal memory:
    PROFILE.md and MEMORY.md only, under an agent that must exist). Returns the files created."""
    if owner is None:
        # A link that leads out of the workspace is refused before anything is made.
        agent_folder(store.root, check_agent(agent)).mkdir(parents=True, exist_ok=True)
    created = []
    seeds = resources.files("mateclaw_mem.workspace") / "seeds"
    # PROFILE.md is TEAM, as in the seed: an owner gets only personal MEMORY.md of their own.
    names = ALWAYS_ON if not (owner and store.owner_isolation) else ("MEMORY.md",)
    for name in names:
        if not store.read(agent, name, owner=owner).exists:
            text = (seeds / name).read_text(encoding="utf-8")
            try:
                store.write(agent, name, text, expected_sha="", actor=SEED_ACTOR, owner=owner, reason="seeded")
                created.append(name)
            except ConflictError:
                pass  # someone created it between our check and our write: theirs wins
    return created
