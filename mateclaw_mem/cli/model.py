"""`mateclaw-mem model check`: does the configured model answer now, and how fast?

Exit codes: 0 answering · 7 not answering (the reason is printed) · 6 no model configured (rules mode).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("model", parents=[common], help=HELP["model"])
    actions = p.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check", parents=[common], help="send the model one tiny request now; exit 7 if it does not answer",
        description="Send the configured model one tiny chat request (a few tokens, short timeout, no retry) "
        "and say whether it answered and how fast. The result is what `status` shows as the last probe. "
        "Exit codes: 0 answering, 7 not answering, 6 no model configured.",
    )
    check.set_defaults(func=cmd_check)


def cmd_check(ctx: CliContext) -> int:
    from mateclaw_mem.cli.main import EXIT_MODEL, EXIT_OK
    from mateclaw_mem.errors import ConfigError

    probe = ctx.services.model_probe
    if probe is None:
        raise ConfigError("no model configured (model.base-url and model.model are empty): rules mode, "
                          "nothing to check")
    result = probe.run()
    ctx.emit({"answering": result.answering, "model": result.model, "latency_ms": result.latency_ms,
              "error_kind": result.error_kind, "error": result.error}, result.line())
    return EXIT_OK if result.answering else EXIT_MODEL
