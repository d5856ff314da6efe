"""MCP tool profiles: which of the server's tools a client sees (issue 38.7).

Every tool's name, description and JSON schema go to the model with every request; all 36 are about
28.7 KB (~7k tokens), a large share of a local 7B model's context for tools it mostly never calls.
`core`, the default, is what the seed's AGENTS.md teaches: the four workspace tools plus remember,
search_memory and memory_forget. `memory-tool` is the standard file-memory command set, `learning`
the learning-memory tools, `all` everything. Chosen per client, where the client is configured:
`mateclaw-mem mcp --tools NAME` over stdio, `?tools=NAME` on the HTTP endpoint (no setting: one
daemon serves clients that need different sets).

A tool outside the profile is not served: a call to it is refused with a message naming the profile
that has it, so a model (or a person reading the log) knows what to change. `scripts/bench/mcp_profiles.py`
prints each profile's size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import InvalidInputError

if TYPE_CHECKING:
    from mcp_types import Tool as MCPTool

CORE = ("list_workspace_memory_files", "read_workspace_memory_file", "write_workspace_memory_file",
        "edit_workspace_memory_file", "remember", "search_memory", "memory_forget")
MEMORY_TOOL = ("view", "create", "str_replace", "insert", "delete", "rename")
LEARNING = ("learning_memory", "update_learning_memory", "list_task_memories", "task_memory", "update_task_memory",
            "record_task_result", "task_runs", "reflect", "enter_task", "harness_lineage", "label_harness_version")

# None: every tool the server has.
PROFILES: dict[str, tuple[str, ...] | None] = {"core": CORE, "memory-tool": MEMORY_TOOL, "learning": LEARNING,
                                               "all": None}
DEFAULT = "core"


def check(profile: str) -> str:
    """The profile's name, or an error listing the names there are."""
    if profile not in PROFILES:
        raise InvalidInputError(f"unknown MCP tool profile {profile!r}: use one of {', '.join(PROFILES)}")
    return profile


def includes(profile: str, tool: str) -> bool:
    names = PROFILES[profile]
    return names is None or tool in names


def refusal(profile: str, tool: str) -> str:
    """What a call to a tool outside the profile answers."""
    having = [p for p, names in PROFILES.items() if names is not None and tool in names] or ["all"]
    return (f"tool {tool!r} is not in this server's MCP tool profile {profile!r}: serve it with --tools "
            f"{having[0]} (or ?tools={having[0]} on the HTTP endpoint)")


def slim(tool: MCPTool) -> MCPTool:
    """The tool as listed, without what tells the model nothing: pydantic's generated titles
    ("Filenameprefix"), `anyOf [T, null]` on an optional argument whose default is null (the argument
    is optional already; null is still accepted), and an output schema that says only "an object".
    A quarter of the listing's bytes; calls are validated against the full schemas as before."""
    output = tool.output_schema
    if output is not None and output.get("additionalProperties") is True and set(output) <= {
            "additionalProperties", "title", "type"}:
        output = None
    return tool.model_copy(update={"input_schema": _slim_schema(tool.input_schema), "output_schema": output})


def _slim_schema(node: Any, names: bool = False) -> Any:
    """`names`: node maps argument names to schemas (`properties`, `$defs`), where "title" is a name."""
    if isinstance(node, list):
        return [_slim_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    if names:
        return {k: _slim_schema(v) for k, v in node.items()}
    out = {k: _slim_schema(v, k in ("properties", "$defs")) for k, v in node.items() if k != "title"}
    choices = out.get("anyOf")
    if "default" in out and out["default"] is None and isinstance(choices, list) and len(choices) == 2 \
            and {"type": "null"} in choices:
        del out["anyOf"], out["default"]
        out.update(next(c for c in choices if c != {"type": "null"}))
    return out
