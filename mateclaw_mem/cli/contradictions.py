"""`mateclaw-mem contradictions AGENT [resolve ID KEEP_A|KEEP_B|MERGE|IGNORE [--text T]]`: the inbox.

Without `resolve`: the open pairs side by side with their sources (exit 10 when there are none).
With it: the files change as decided (the losing claim forgotten, a merge written as the person's
words, IGNORE remembered) and the diff is printed. Exit codes: 3 unknown pair, 4 already resolved or
the file changed since, 2 a bad action or MERGE without --text.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext

ACTIONS = ("KEEP_A", "KEEP_B", "MERGE", "IGNORE")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "contradictions", parents=[common], help=HELP["contradictions"],
        description="List the open contradictions between facts, or resolve one: KEEP_A / KEEP_B forget the "
        "other claim, MERGE writes --text in place of both, IGNORE remembers the pair. Exit codes: 0 ok, "
        "10 none open, 3 unknown pair, 4 already resolved / file changed, 2 usage.",
    )
    p.add_argument("agent", nargs="?", help="agent (default: default)")
    p.add_argument("verb", nargs="?", choices=["resolve"], help="resolve one pair")
    p.add_argument("id", nargs="?", help="the pair's id (from the list)")
    p.add_argument("action", nargs="?", type=str.upper, choices=ACTIONS, help="KEEP_A | KEEP_B | MERGE | IGNORE")
    p.add_argument("--text", help="MERGE: the merged claim")
    p.add_argument("--all", action="store_true", help="list resolved, ignored and dismissed pairs too")
    p.add_argument("--owner", help="personal memory of this owner (owner isolation)")
    p.set_defaults(func=cmd_contradictions)


def cmd_contradictions(ctx: CliContext) -> int:
    from mateclaw_mem.cli.main import EXIT_NOTHING, EXIT_OK, EXIT_USAGE

    a = ctx.args
    agent = ctx.agent()
    services = ctx.services
    services.facts.require_enabled()
    inbox = services.contradictions
    services.facts.rebuild(agent)  # a fresh process: the projection (and so the inbox) as the disk is now
    if a.verb == "resolve":
        if not a.id or not a.action:
            ctx.fail("usage: mateclaw-mem contradictions AGENT resolve ID KEEP_A|KEEP_B|MERGE|IGNORE [--text T]",
                     code="usage")
            return EXIT_USAGE
        r = inbox.resolve(agent, a.owner, a.id, a.action, text=a.text, actor="person")
        lines = [f"{a.id}: {r.action} — {r.pair.status}"] + [f["diff"].rstrip("\n") for f in r.files if f["diff"]]
        ctx.emit(r.to_dict(), "\n".join(lines))
        return EXIT_OK
    pairs = inbox.list(agent, a.owner, status=None if a.all else "open")
    lines = [f"{len(pairs)} contradiction{'s' if len(pairs) != 1 else ''}" + ("" if a.all else " open")]
    for p in pairs:
        lines += [f"{p.id}  {p.kind} [{p.status}{', ' + p.verdict if p.verdict else ''}]: {p.reason}",
                  f"  A  {p.a.text}  ({p.a.file} ## {p.a.section}, {p.a.scope})",
                  f"  B  {p.b.text}  ({p.b.file} ## {p.b.section}, {p.b.scope})"]
    ctx.emit({"agent": agent, "contradictions": [p.to_dict() for p in pairs]}, "\n".join(lines))
    return EXIT_OK if pairs else EXIT_NOTHING
