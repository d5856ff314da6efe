"""Every MCP tool refuses an argument it does not know.

The SDK builds each tool's argument model from the function's signature and ignores extra keys, so a
client that spelled an argument the seed's way (`filenamePrefix`) got an answer as if it had not been
given: every file instead of the filtered few, and no hint why. `ToolSet` collects the tools the way
`MCPServer.add_tool` would and swaps each argument model for one that refuses unknown names with a
message listing what the tool takes (`workspace.tool_args.check_names`), and publishes
`additionalProperties: false` so a client can see it before calling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import ConfigDict, model_validator

from mateclaw_mem.workspace.tool_args import check_names


class ToolSet:
    """The tools of one server, each with a strict argument model; `tools` goes to `MCPServer(tools=)`."""

    def __init__(self) -> None:
        self.tools: list[Tool] = []

    def add_tool(self, fn: Callable[..., Any], *, annotations: ToolAnnotations) -> None:
        if any(t.name == fn.__name__ for t in self.tools):
            raise ValueError(f"MCP tool {fn.__name__!r} registered twice")
        self.tools.append(strict(Tool.from_function(fn, annotations=annotations)))


def strict(tool: Tool) -> Tool:
    base = tool.fn_metadata.arg_model
    name = tool.name

    class Strict(base):  # type: ignore[misc, valid-type]
        # extra="forbid" as a backstop; the validator below says which names the tool takes.
        model_config = ConfigDict(extra="forbid", title=base.__name__)

        @model_validator(mode="before")
        @classmethod
        def mateclaw_known_arguments(cls, data: Any) -> Any:
            return check_names(cls, data, name)

    metadata = tool.fn_metadata.model_copy(update={"arg_model": Strict})
    return tool.model_copy(update={"fn_metadata": metadata,
                                   "parameters": {**tool.parameters, "additionalProperties": False}})
