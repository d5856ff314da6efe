"""`mateclaw-mem facts …`: facts with their trust, feedback, confirmations, edits, a rebuild.

    facts list [AGENT] [--query Q] [--file FILE] [--limit N]   in file order; with -q the relevant ones (exit 10: none)
    facts show AGENT ID                                        one fact and its event history
    facts feedback AGENT ID helpful|unhelpful [--note TEXT]
    facts confirm AGENT ID
    facts edit AGENT ID TEXT                                   rewords its line in the file (undoable)
    facts rebuild [AGENT]                                      reproject from the files

Verb first, as `learn` has it. Every subcommand takes `--owner` (personal facts under owner
isolation). With `mate.memory.fact.projection-enabled` off every one of them fails with exit 4
naming the key.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext
    from mateclaw_mem.memory.facts.service import FactService

PERSON = "person"  # a human at the command line


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    facts = sub.add_parser("facts", parents=[common], help=HELP["facts"])
    fsub = facts.add_subparsers(dest="facts_command", metavar="SUBCOMMAND", required=True)

    p = fsub.add_parser("list", parents=[common], help="facts in file order (or those relevant to --query)")
    p.add_argument("agent", nargs="?", help="agent (default: default)")
    p.add_argument("--query", "-q", help="only facts relevant to these words")
    p.add_argument("--file", help="only facts from this file, e.g. MEMORY.md")
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    p.add_argument("--owner", help="personal facts of this owner (owner isolation)")
    p.set_defaults(func=cmd_list)

    p = fsub.add_parser("show", parents=[common], help="one fact with its history")
    _fact_args(p)
    p.set_defaults(func=cmd_show)

    p = fsub.add_parser("feedback", parents=[common], help="helpful (+0.1 trust) or unhelpful (-0.2)")
    _fact_args(p)
    p.add_argument("verdict", type=str.lower, choices=["helpful", "unhelpful"])
    p.add_argument("--note", default="", help="why (kept with the feedback)")
    p.set_defaults(func=cmd_feedback)

    p = fsub.add_parser("confirm", parents=[common], help="still true: trust up, decay clock reset")
    _fact_args(p)
    p.set_defaults(func=cmd_confirm)

    p = fsub.add_parser("edit", parents=[common], help="reword a fact (its line in the file, as your edit)")
    _fact_args(p)
    p.add_argument("text", help="the new wording")
    p.set_defaults(func=cmd_edit)

    p = fsub.add_parser("rebuild", parents=[common], help="reproject the facts from the files (feedback kept)")
    p.add_argument("agent", nargs="?", help="only this agent (default: every agent)")
    p.set_defaults(func=cmd_rebuild)


def _fact_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent")
    p.add_argument("id", help="the fact id (from `facts list`)")
    p.add_argument("--owner", help="the owner the fact belongs to (owner isolation)")


def _facts(ctx: CliContext) -> FactService:
    facts = ctx.services.facts
    facts.require_enabled()
    return facts


def _line(f: Any) -> str:
    where = f"{f.file}" + (f" ## {f.section}" if f.section else "")
    return (f"{f.trust:.2f}  {f.id}  {f.text}\n      {where}:{f.line}  uses {f.uses}, "
            f"+{f.helpful}/-{f.unhelpful}" + (f", confirmed {f.last_confirmed}" if f.last_confirmed else ""))


def cmd_list(ctx: CliContext) -> int:
    a = ctx.args
    if a.limit < 1:
        from mateclaw_mem.errors import InvalidInputError

        raise InvalidInputError(f"--limit {a.limit}: give 1 or more")
    agent = ctx.agent()
    found = _facts(ctx).list(agent, a.owner, query=a.query, file=a.file, limit=a.limit)
    human = "\n".join(_line(f) for f in found) if found else "no facts" + (f" matching {a.query!r}" if a.query else "")
    ctx.emit({"agent": agent, "owner": a.owner, "count": len(found), "facts": [f.to_dict() for f in found]}, human)
    return 0 if found else 10


def cmd_show(ctx: CliContext) -> int:
    a = ctx.args
    facts = _facts(ctx)
    view = facts.get(a.agent, a.owner, a.id)
    history = facts.history(a.agent, a.owner, a.id)
    lines = [_line(view)] + [f"  {h['at']}  {h['kind']}" + (f" by {h['actor']}" if h["actor"] else "")
                             + (f"  {h['note']}" if h["note"] else "") for h in history]
    ctx.emit({**view.to_dict(), "history": history}, "\n".join(lines))
    return 0


def cmd_feedback(ctx: CliContext) -> int:
    a = ctx.args
    view = _facts(ctx).feedback(a.agent, a.owner, a.id, a.verdict, actor=PERSON, note=a.note)
    ctx.emit(view.to_dict(), f"{a.verdict} noted; trust now {view.trust:.2f}: {view.text}")
    return 0


def cmd_confirm(ctx: CliContext) -> int:
    a = ctx.args
    view = _facts(ctx).confirm(a.agent, a.owner, a.id, actor=PERSON)
    ctx.emit(view.to_dict(), f"confirmed; trust now {view.trust:.2f}: {view.text}")
    return 0


def cmd_edit(ctx: CliContext) -> int:
    a = ctx.args
    view = _facts(ctx).edit(a.agent, a.owner, a.id, a.text, actor=PERSON)
    ctx.emit(view.to_dict(), f"edited {view.file}: {view.text} (id {view.id})")
    return 0


def cmd_rebuild(ctx: CliContext) -> int:
    agent = ctx.agent() if ctx.args.agent else None
    report = _facts(ctx).rebuild(agent)
    ctx.emit(report, f"rebuilt {report['facts']} facts from {report['files']} files"
                     + (f" ({report['files_dropped']} files gone)" if report["files_dropped"] else ""))
    return 0
