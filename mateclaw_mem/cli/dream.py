"""`mateclaw-mem dream`: run (or preview) a consolidation now, with or without the daemon.

Exit codes: 0 done (or a preview that would change MEMORY.md) · 10 nothing to do / skipped ·
5 busy (a scheduled or manual run holds the agent's lock) · 7 the model failed · 1 failed or
rejected by a safety gate (MEMORY.md untouched either way).
"""

from __future__ import annotations

import argparse
from datetime import date
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "dream", parents=[common], help=HELP["dream"],
        description="Run a dream (consolidation) now. Exit codes: 0 done, 10 nothing to do, 5 busy, "
        "7 model failed, 1 failed or rejected.",
    )
    p.add_argument("agent", nargs="?", help="agent (default: default)")
    p.add_argument("--topic", help="focused dream: weight candidates about this topic")
    p.add_argument("--preview", action="store_true", help="print the diff it would apply; write nothing")
    p.add_argument("--owner", help="personal memory of this owner (owner isolation)")
    p.add_argument("--as-of", metavar="DATE", type=_day,
                   help="consolidate the night of this date (YYYY-MM-DD), e.g. for a history imported with its dates")
    p.set_defaults(func=cmd_dream)


def _day(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date (YYYY-MM-DD)") from None


def cmd_dream(ctx: CliContext) -> int:
    from mateclaw_mem.cli.main import EXIT_ERROR, EXIT_MODEL, EXIT_NOTHING, EXIT_OK

    a = ctx.args
    out = ctx.services.dreaming.dream(ctx.agent(), topic=a.topic, preview=a.preview, owner=a.owner, as_of=a.as_of)
    lines = [f"{out.run_id}: {out.status.replace('_', ' ')} — {out.reason}"]
    if out.candidates:
        lines.append(f"candidates: {len(out.candidates)} (best: {out.candidates[0]['score']:.2f} "
                     f"{out.candidates[0]['source']})")
    lines += [f"promoted: {p}" for p in out.promoted]
    if out.dropped:
        lines.append(f"dropped entries: {len(out.dropped)}")
    if out.diff:
        lines.append(out.diff.rstrip("\n"))
    if out.status == "done":
        lines.append(f"undo with: mateclaw-mem undo {out.agent} --run {out.run_id}")
    ctx.emit(out.to_dict(), "\n".join(lines))
    if out.status == "preview":
        return EXIT_OK if out.would_change else EXIT_NOTHING
    if out.status == "done":
        return EXIT_OK
    if out.status in ("nothing_to_do", "skipped"):
        return EXIT_NOTHING
    if out.status == "failed" and out.error_kind:  # set only when the model failed
        return EXIT_MODEL
    return EXIT_ERROR
