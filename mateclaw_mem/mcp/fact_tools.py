"""Facts as MCP tools: list or search them with their trust, give feedback, confirm one.

`register(server, services, agent)` adds them to one agent's server (`mcp/server.py`). Every rule
lives in `memory/facts/service.py`; with projection off each tool answers a readable error naming
`mate.memory.fact.projection-enabled`. Feedback and confirmations from a tool are the model's
(actor "mcp"), so they are told apart from a person's in the fact's history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, Field

from mateclaw_mem.mcp.common import ADD, READ, call
from mateclaw_mem.workspace.owners import wire_owner

if TYPE_CHECKING:
    from collections.abc import Callable

    from mateclaw_mem.mcp.arguments import ToolSet
    from mateclaw_mem.memory.facts.service import FactService
    from mateclaw_mem.runtime.services import Services

ACTOR = "mcp"
Owner = Annotated[str | None, Field(description="owner key for personal memory (owner isolation)"),
                  AfterValidator(wire_owner)]
FactId = Annotated[str, Field(description="a fact id from memory_facts", min_length=1, max_length=64)]


def register(server: ToolSet, services: Services, agent: Callable[[], str]) -> None:
    def facts() -> FactService:
        found = services.facts
        found.require_enabled()
        return found

    def memory_facts(
        query: Annotated[str | None, Field(description="only facts relevant to these words", min_length=1,
                                           max_length=2000)] = None,
        file: Annotated[str | None, Field(description="only facts from this file, e.g. MEMORY.md")] = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
        owner: Owner = None,
    ) -> dict[str, Any]:
        """Facts remembered about the user and the work, each with its source file and section, trust
        (0-1) and use count; with a query, the relevant ones."""
        found = call(lambda: facts().list(agent(), owner, query=query, file=file, limit=limit))
        return {"agent": agent(), "count": len(found), "facts": [f.to_dict() for f in found]}

    def memory_feedback(
        fact_id: FactId,
        feedback: Annotated[Literal["HELPFUL", "UNHELPFUL", "helpful", "unhelpful"],
                            Field(description="HELPFUL raises the fact's trust, UNHELPFUL lowers it")],
        note: Annotated[str, Field(description="why", max_length=300)] = "",
        owner: Owner = None,
    ) -> dict[str, Any]:
        """Say whether a fact was helpful or not; its trust moves and the feedback is kept with it."""
        return call(lambda: facts().feedback(agent(), owner, fact_id, feedback, actor=ACTOR, note=note)).to_dict()

    def memory_confirm(fact_id: FactId, owner: Owner = None) -> dict[str, Any]:
        """Confirm a fact is still true: its trust goes up and its decay starts again from now."""
        return call(lambda: facts().confirm(agent(), owner, fact_id, actor=ACTOR)).to_dict()

    server.add_tool(memory_facts, annotations=READ)
    server.add_tool(memory_feedback, annotations=ADD)  # each call adds an event: not idempotent
    server.add_tool(memory_confirm, annotations=ADD)
