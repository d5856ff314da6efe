"""`mateclaw-mem mcp [--agent NAME] [--tools core|memory-tool|learning|all]`: serve one agent's memory
to an MCP client over stdio (the server's name and instructions name the agent; over HTTP the same is
`/agents/NAME/mcp?tools=...`). `--tools` picks the tool profile (mcp/profiles.py), `core` by default."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("mcp", parents=[common], help=HELP["mcp"])
    p.add_argument("--agent", help="the agent whose memory to serve (default: default)")
    p.add_argument("--tools", default="core", choices=["core", "memory-tool", "learning", "all"],
                   help="which tools to serve: core (default: the 7 the seed's AGENTS.md teaches), memory-tool "
                        "(view/create/str_replace/insert/delete/rename), learning, or all")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    # checks_agent: the agent is checked in cmd_mcp, where a refusal also reaches the MCP client.
    p.set_defaults(func=cmd_mcp, checks_agent=True)


def cmd_mcp(ctx: CliContext) -> int:
    import logging
    import sys

    from mateclaw_mem.errors import MateclawError
    from mateclaw_mem.mcp.server import run_stdio

    # stdout carries the protocol: every log line goes to stderr.
    logging.basicConfig(level=ctx.args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        services, agent = ctx.services, ctx.agent()  # settings, workspace, agent: before the protocol starts
    except MateclawError as exc:
        # A client started by an app (Claude Desktop) shows only "Connection closed" when the server
        # exits: the reason is also the answer to the client's `initialize`, so the app can show it;
        # main() then prints it on stderr (the app's log) and exits with its code.
        _refuse_initialize(exc.message)
        raise
    run_stdio(services, agent, ctx.args.tools)
    return 0


def _refuse_initialize(reason: str, wait_s: float = 5.0) -> None:
    """Answer the first JSON-RPC request on stdin (a client's `initialize`) with an error naming the
    reason; nothing when no request arrives within `wait_s` or stdin is not a pipe a client writes."""
    import json
    import select
    import sys

    try:
        ready, _, _ = select.select([sys.stdin], [], [], wait_s)
        line = sys.stdin.readline() if ready else ""
        request = json.loads(line) if line.strip() else None
    except (OSError, ValueError):
        return
    if not isinstance(request, dict) or "id" not in request:
        return
    answer = {"jsonrpc": "2.0", "id": request["id"],
              "error": {"code": -32603, "message": f"mateclaw-mem cannot start: {reason}"}}
    try:
        sys.stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
        sys.stdout.flush()
        # Exiting at once closes stdout under the client's reader, which may then fail the request
        # with "Connection closed" before it reads the answer: wait (briefly) for the client to leave.
        while select.select([sys.stdin], [], [], wait_s)[0] and sys.stdin.readline():
            pass
    except (OSError, ValueError):
        pass
