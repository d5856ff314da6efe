"""`mateclaw-mem soul`: the SOUL.md proposal, reviewed.

    mateclaw-mem soul AGENT [proposal]     # show the pending proposal and its diff (10: none waits)
    mateclaw-mem soul AGENT propose        # make one now (rules or model mode)
    mateclaw-mem soul AGENT apply|reject   # write it (undoable: `undo AGENT --run BATCH`) / drop it
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("soul", parents=[common], help=HELP["soul"],
                       description="SOUL.md is never rewritten silently: every soul-update-interval memory writes "
                       "a rewrite is proposed; apply writes it (pinned and person sections kept, undoable).")
    p.add_argument("agent", help="agent")
    p.add_argument("action", nargs="?", default="proposal", choices=("proposal", "propose", "apply", "reject"))
    p.add_argument("--id", type=int, help="proposal id (default: the pending one)")
    p.add_argument("--owner", help="personal memory of this owner (owner isolation)")
    p.set_defaults(func=cmd_soul)


def cmd_soul(ctx: CliContext) -> int:
    from mateclaw_mem.cli.main import EXIT_NOTHING, EXIT_OK

    a, soul = ctx.args, ctx.services.soul
    agent = ctx.agent()
    if a.action == "apply":
        done = soul.apply(agent, a.owner, a.id, actor="person")
        ctx.emit(done, f"applied SOUL.md proposal #{done['proposal']}; undo with: {done['undo']}")
        return EXIT_OK
    if a.action == "reject":
        done = soul.reject(agent, a.owner, a.id, actor="person")
        ctx.emit(done, f"rejected SOUL.md proposal #{done['proposal']}")
        return EXIT_OK
    proposal = soul.propose(agent, a.owner) if a.action == "propose" else soul.pending(agent, a.owner)
    if proposal is None:
        ctx.emit(None, f"no SOUL.md proposal for {agent}" + (" (nothing to propose)" if a.action == "propose" else ""))
        return EXIT_NOTHING
    ctx.emit(proposal.to_dict(), f"SOUL.md proposal #{proposal.id} ({proposal.mode}, {proposal.status}): "
             f"{proposal.reason}\n{proposal.diff.rstrip()}")
    return EXIT_OK
