"""The morning card and the SOUL.md proposal as MCP tools, bound to one agent (`mcp/server.py`
calls `register`). Every rule lives in memory/dreaming/card.py and memory/soul/service.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, Field

from mateclaw_mem.mcp.common import CHANGE, READ, SET, call
from mateclaw_mem.workspace.owners import wire_owner
from mateclaw_mem.workspace.walk import normalise_owner

if TYPE_CHECKING:
    from collections.abc import Callable

    from mateclaw_mem.mcp.arguments import ToolSet
    from mateclaw_mem.runtime.services import Services

# Checked like every other tool's owner (workspace.owners.wire_owner): a bad key is a tool error naming it.
Owner = Annotated[str | None, Field(description="owner key (personal memory); omit for the shared files"),
                  AfterValidator(wire_owner)]
FactId = Annotated[str, Field(min_length=1, max_length=64, description="a fact id from the morning card")]


def register(server: ToolSet, services: Services, agent: Callable[[], str]) -> None:
    def morning_card(owner: Owner = None) -> dict[str, Any]:
        """Last night's dream report (if not seen yet) with its facts, and the pending SOUL.md proposal."""
        card = call(lambda: services.morning_card.card(agent(), normalise_owner(owner)))
        return card or {"card": None, "note": "nothing waits: every dream report has been seen"}

    def morning_card_seen(owner: Owner = None) -> dict[str, Any]:
        """Mark the morning card seen."""
        return call(lambda: services.morning_card.seen(agent(), normalise_owner(owner)))

    def morning_card_fact(
        action: Annotated[Literal["confirm", "edit", "forget"], Field(description="what to do with the fact")],
        fact_id: FactId,
        text: Annotated[str | None, Field(max_length=2000, description="edit: the new text")] = None,
        owner: Owner = None,
    ) -> dict[str, Any]:
        """Confirm (trust up), edit (the person's text) or forget a fact from the morning card."""
        card, who = services.morning_card, normalise_owner(owner)
        if action == "edit":
            return call(lambda: card.edit(agent(), who, fact_id, text or ""))
        return call(lambda: getattr(card, action)(agent(), who, fact_id))

    def soul_proposal(
        action: Annotated[Literal["show", "apply", "reject"], Field(description="show, apply or reject")] = "show",
        owner: Owner = None,
    ) -> dict[str, Any]:
        """The pending SOUL.md proposal and its diff; apply writes it (undoable), reject drops it."""
        soul, who = services.soul, normalise_owner(owner)
        if action == "apply":
            return call(lambda: soul.apply(agent(), who, actor="person"))
        if action == "reject":
            return call(lambda: soul.reject(agent(), who, actor="person"))
        return soul.card(agent(), who) or {"proposal": None}

    server.add_tool(morning_card, annotations=READ)
    server.add_tool(morning_card_seen, annotations=SET)
    server.add_tool(morning_card_fact, annotations=CHANGE)
    server.add_tool(soul_proposal, annotations=CHANGE)
