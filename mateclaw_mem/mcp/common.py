"""What every MCP tool module shares: the honest annotations and the error mapping (see `server`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from mateclaw_mem.errors import MateclawError

T = TypeVar("T")

READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
ADD = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
SET = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
REPLACE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
CHANGE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)


def call(fn: Callable[[], T]) -> T:
    """Run a service call; its own errors reach the model as readable tool errors."""
    try:
        return fn()
    except MateclawError as exc:
        raise ToolError(exc.message) from None
