"""`memory_forget` as an MCP tool: forget a claim in every file, index and the conversation log.

`register(server, services, agent)` adds it to one agent's server (`mcp/server.py`). Every rule
lives in `memory/forget/service.py`; with `mate.memory.fact.forget-enabled` off the tool answers a
readable error naming the key. The call is recorded as the model's (actor "mcp").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, Field

from mateclaw_mem.mcp.common import CHANGE, call
from mateclaw_mem.workspace.owners import wire_owner

if TYPE_CHECKING:
    from collections.abc import Callable

    from mateclaw_mem.mcp.arguments import ToolSet
    from mateclaw_mem.runtime.services import Services

ACTOR = "mcp"
Owner = Annotated[str | None, Field(description="owner key for personal memory (owner isolation)"),
                  AfterValidator(wire_owner)]


def register(server: ToolSet, services: Services, agent: Callable[[], str]) -> None:
    def memory_forget(
        text: Annotated[str, Field(description="the claim to forget, e.g. 'I take my tea without sugar'",
                                   min_length=1, max_length=2000)],
        now: Annotated[bool, Field(description="purge history copies at once (no undo afterwards)")] = False,
        owner: Owner = None,
        receipt: Annotated[bool, Field(description="scan every byte of the workspace for the claim afterwards")]
        = False,
    ) -> dict[str, Any]:
        """Forget a claim everywhere: memory files, daily notes, archives, search and message indexes,
        the conversation log, run records, dream reports, providers; it is tombstoned so it is never
        extracted again. Returns what every store removed (and with `receipt` the byte scan)."""
        return call(lambda: services.forget.forget(agent(), owner, text, actor=ACTOR, now=now,
                                                   receipt=receipt)).to_dict()

    server.add_tool(memory_forget, annotations=CHANGE)
