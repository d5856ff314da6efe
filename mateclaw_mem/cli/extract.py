"""`mateclaw-mem extract AGENT CONVERSATION`: run post-chat extraction now (the seed's summarize)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("extract", parents=[common], help=HELP["extract"])
    p.add_argument("agent")
    p.add_argument("conversation", help="conversation id")
    p.add_argument("--owner", help="owner key of the conversation (owner isolation)")
    p.set_defaults(func=cmd_extract)


def cmd_extract(ctx: CliContext) -> int:
    from mateclaw_mem.cli.main import EXIT_MODEL, EXIT_NOTHING

    a = ctx.args
    outcome = ctx.services.extraction.extract_now(a.agent, a.conversation, a.owner)
    data = outcome.to_dict()
    changed = ", ".join(outcome.files_changed) or "nothing"
    human = f"{outcome.outcome}: {outcome.reason or '-'} (changed: {changed})"
    if outcome.error:
        human += f"\nerror ({outcome.error_kind}): {outcome.error}"
    ctx.emit(data, human)
    if outcome.outcome == "error":
        return EXIT_MODEL if outcome.mode == "model" else 1
    return 0 if outcome.files_changed else EXIT_NOTHING
