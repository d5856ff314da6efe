"""MCP face: the agent's memory as MCP tools (stdio and streamable HTTP)."""
