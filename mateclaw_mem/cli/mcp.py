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
    p.set_defaults(func=cmd_mcp)


def cmd_mcp(ctx: CliContext) -> int:
    import logging
    import sys

    from mateclaw_mem.mcp.server import run_stdio

    # stdout carries the protocol: every log line goes to stderr.
    logging.basicConfig(level=ctx.args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_stdio(ctx.services, ctx.agent(), ctx.args.tools)  # an agent never created is exit 3 before the protocol starts
    return 0
