"""The contradiction inbox as MCP tools: `memory_contradictions` (the open pairs, side by side) and
`memory_resolve_contradiction` (KEEP_A | KEEP_B | MERGE | IGNORE, which changes the files).

`register(server, services, agent)` adds them to one agent's server (`mcp/server.py`). Every rule
lives in `memory/contradictions/service.py`; a resolution through MCP is recorded as the model's
(actor "mcp"), never as the person's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, Field

from mateclaw_mem.mcp.common import CHANGE, READ, call
from mateclaw_mem.workspace.owners import wire_owner

if TYPE_CHECKING:
    from collections.abc import Callable

    from mateclaw_mem.mcp.arguments import ToolSet
    from mateclaw_mem.runtime.services import Services

ACTOR = "mcp"
Owner = Annotated[str | None, Field(description="owner key for personal memory (owner isolation)"),
                  AfterValidator(wire_owner)]
Action = Annotated[Literal["KEEP_A", "KEEP_B", "MERGE", "IGNORE"],
                   Field(description="KEEP_A / KEEP_B forget the other claim; MERGE writes `text` in place of "
                         "both; IGNORE remembers the pair as no contradiction")]


def register(server: ToolSet, services: Services, agent: Callable[[], str]) -> None:
    def memory_contradictions(owner: Owner = None) -> dict[str, Any]:
        """Open contradictions between the agent's facts: each pair's two claims with file, section and
        scope, why they disagree, and the model's verdict when one judged them."""
        def run() -> dict[str, Any]:
            services.facts.require_enabled()
            return {"contradictions": [p.to_dict() for p in services.contradictions.list(agent(), owner)]}
        return call(run)

    def memory_resolve_contradiction(
        id: Annotated[str, Field(description="the pair's id, from memory_contradictions", pattern=r"^[0-9a-f]{20}$")],
        action: Action,
        text: Annotated[str | None, Field(description="MERGE: the merged claim", max_length=2000)] = None,
        owner: Owner = None,
    ) -> dict[str, Any]:
        """Resolve a contradiction; the memory files change and the answer carries the diff."""
        def run() -> dict[str, Any]:
            services.facts.require_enabled()
            return services.contradictions.resolve(agent(), owner, id, action, text=text, actor=ACTOR).to_dict()
        return call(run)

    server.add_tool(memory_contradictions, annotations=READ)
    server.add_tool(memory_resolve_contradiction, annotations=CHANGE)
