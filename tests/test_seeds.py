"""The seed files: what a new agent is told about its memory and itself, and that seeding never
rewrites a workspace that already has them."""

from __future__ import annotations

import re
from importlib import resources

import anyio

from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.sections import split_sections
from mateclaw_mem.mcp.server import build_server
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from mateclaw_mem.workspace.store import WorkspaceStore

SEEDS = resources.files("mateclaw_mem.workspace") / "seeds"


def seed(name: str) -> str:
    return (SEEDS / name).read_text(encoding="utf-8")


# AGENTS.md is in every prompt: it teaches the core tools and leaves the rest to the MCP listing,
# which describes every tool anyway (naming all 36 here cost ~800 tokens on every turn).
CORE_TOOLS = {"list_workspace_memory_files", "read_workspace_memory_file", "write_workspace_memory_file",
              "edit_workspace_memory_file", "search_memory", "remember", "memory_forget"}


def test_agents_md_teaches_the_core_tools_and_names_no_tool_that_does_not_exist(tmp_path, clock) -> None:
    # Every feature on (memory_forget is listed only when forget is): what the shipped config serves.
    settings = load_settings(workspace=tmp_path / "ws", overrides={"mate": {"memory": {"fact": {
        "projection-enabled": True, "forget-enabled": True}}}})
    services = Services(settings, clock)
    services.store.ensure_agent("default")
    tools = {t.name for t in anyio.run(build_server(services).list_tools)}
    body = frontmatter.body(seed("AGENTS.md"))
    named = {n for n in re.findall(r"`([a-z_]+)`", body) if "_" in n or n in tools}
    assert tools >= CORE_TOOLS  # the core tools exist ...
    assert sorted(CORE_TOOLS - named) == []  # ... and the agent is taught each one
    assert sorted(named - tools) == []  # no stale name
    assert len(body) <= 2000  # it is in every prompt


def test_soul_md_carries_self_awareness_evolution_and_boundaries() -> None:
    _, sections = split_sections(frontmatter.body(seed("SOUL.md")))
    titles = [s.title for s in sections]
    assert titles == ["Voice", "Values", "Self-awareness", "Boundaries", "How I evolve"]
    by_title = {s.title: s.text for s in sections}
    assert "never store secrets" in by_title["Boundaries"] and "private" in by_title["Boundaries"]
    assert "tell the person what I changed" in by_title["How I evolve"]
    assert "PROFILE.md" in by_title["How I evolve"]  # facts about the person do not go into the soul


def test_seeds_keep_the_seed_look_and_stay_short() -> None:
    orders = {"AGENTS.md": 0, "SOUL.md": 1, "PROFILE.md": 2, "MEMORY.md": 3}
    for name, order in orders.items():
        parsed = frontmatter.parse(seed(name))
        assert parsed.error is None and parsed.meta == {"enabled": True, "sort_order": order}, name
        assert parsed.body.startswith(f"# {name} — "), name
    # AGENTS.md and SOUL.md are in every prompt, memoryless ones included: about 1,100 tokens at most.
    assert len(frontmatter.body(seed("AGENTS.md"))) + len(frontmatter.body(seed("SOUL.md"))) <= 4500


def test_seeding_creates_only_missing_files_and_never_rewrites_existing_ones(store: WorkspaceStore) -> None:
    # A workspace from before these seeds changed: the person's own AGENTS.md and SOUL.md.
    own_agents = "---\nenabled: true\nsort_order: 0\n---\n# AGENTS.md\n\nMy own rules.\n"
    own_soul = "# SOUL.md\n\nTerse.\n"
    folder = store.root / "mine"  # saved in an editor, before any seeding
    folder.mkdir()
    (folder / "AGENTS.md").write_text(own_agents, encoding="utf-8")
    (folder / "SOUL.md").write_text(own_soul, encoding="utf-8")
    created = store.ensure_agent("mine")
    assert created == ["PROFILE.md", "MEMORY.md"]
    assert store.read("mine", "AGENTS.md").text == own_agents
    assert store.read("mine", "SOUL.md").text == own_soul
    assert store.ensure_agent("mine") == []  # a second run changes nothing
    assert store.history("mine", "SOUL.md") == []  # no seed write ever happened
    assert store.read("mine", "MEMORY.md").text == seed("MEMORY.md")
