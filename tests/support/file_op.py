"""`python -m tests.support.file_op rename|delete AGENT PATH [NEW_PATH]`: the MCP memory tool's
`rename` / `delete` (workspace/file_commands.py, what `mcp/server.py` calls) in a process of its own,
so a test or the bench can kill it mid-way (no CLI command renames or deletes a folder). The
workspace comes from MATECLAW_CONFIG / MATECLAW_WORKSPACE, as for `mateclaw-mem`."""

from __future__ import annotations

import sys

from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings


def main(argv: list[str]) -> int:
    op, agent, path, *rest = argv
    services = Services(load_settings())
    try:
        commands = services.file_commands
        if op == "rename":
            result = commands.rename(agent, path, rest[0], actor="mcp")
        elif op == "delete":
            result = commands.delete(agent, path, actor="mcp")
        else:
            raise SystemExit(f"unknown operation {op!r}")
        print(result.text)
    finally:
        services.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
