"""Prompt commands: context, remember, recall, forget, consolidate-structured."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext

PERSON = "person"  # a human at the command line: their entries count as hand-edited
TYPES = ("user", "feedback", "project", "reference")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("context", parents=[common], help=HELP["context"])
    p.add_argument("agent")
    p.add_argument("--query", default="", help="the current user message (also decides relevant entries)")
    p.add_argument("--owner", help="the person talking (owner isolation)")
    p.add_argument("--memoryless", action="store_true", help="no memory beyond the agent's identity")
    p.set_defaults(func=cmd_context)

    p = sub.add_parser("remember", parents=[common], help=HELP["remember"])
    p.add_argument("agent")
    p.add_argument("type", choices=TYPES)
    p.add_argument("key")
    p.add_argument("text")
    p.add_argument("--owner")
    p.set_defaults(func=cmd_remember)

    p = sub.add_parser("recall", parents=[common], help=HELP["recall"])
    p.add_argument("agent")
    p.add_argument("type", nargs="?", choices=TYPES)
    p.add_argument("key", nargs="?")
    p.add_argument("--owner")
    p.set_defaults(func=cmd_recall)

    # `forget` (a structured entry, or a claim everywhere) is cli/forget.py.

    p = sub.add_parser("consolidate-structured", parents=[common],
                       help=HELP["consolidate-structured"],
                       description="Merge near-duplicate structured entries now. Exit codes: 0 done, 10 nothing "
                       "to do, 5 busy, 7 the model failed (for every bucket, or for some: the others are "
                       "done and the output names the failed ones), 1 another failure.")
    p.add_argument("agent", nargs="?", help="only this agent (default: all, in fair rotation)")
    p.set_defaults(func=cmd_consolidate)


def cmd_context(ctx: CliContext) -> int:
    a = ctx.args
    built = ctx.services.context.build(a.agent, owner=a.owner, query=a.query, memoryless=a.memoryless)
    lines = []
    for m in built.messages:
        lines.append(f"===== {m['role']} =====")
        lines.append(str(m["content"]))
    lines.append(f"===== ~{built.tokens} tokens" + (" (memoryless)" if built.memoryless else "") + " =====")
    ctx.emit(built.as_dict(), "\n".join(lines))
    return 0


def cmd_remember(ctx: CliContext) -> int:
    a = ctx.args
    out = ctx.services.structured.remember(a.agent, a.type, a.key, a.text, actor=PERSON, source="cli",
                                           owner=a.owner)
    verb = "added" if out.created else ("updated" if out.changed else "unchanged")
    ctx.emit({"type": out.type, "key": out.entry.key, "created": out.created, "changed": out.changed},
             f"{verb} {out.type} entry {out.entry.key!r}")
    return 0


def cmd_recall(ctx: CliContext) -> int:
    a = ctx.args
    items = ctx.services.structured.recall(a.agent, a.type, a.key, owner=a.owner)
    lines = []
    for item in items:
        e = item.entry
        pin = " (pinned)" if e.pinned else ""
        lines.append(f"[{item.type}] {e.key}{pin}: {e.text}  ({e.source or '?'}, {e.updated or 'undated'})")
    ctx.emit([i.as_dict() for i in items], "\n".join(lines) if lines else "no structured entries")
    return 0


def cmd_consolidate(ctx: CliContext) -> int:
    from mateclaw_mem.cli.main import EXIT_ERROR, EXIT_MODEL, EXIT_NOTHING, EXIT_OK

    report = ctx.services.structured_consolidation.run(ctx.args.agent)
    data = report.as_dict()
    lines = [f"structured consolidation ({report.mode}, run {report.run_id}): "
             f"{report.owners_consolidated} owner(s), {report.updated} file(s) updated, "
             f"{report.entries_before} -> {report.entries_after} entries"]
    for b in report.buckets:
        who = b.agent + (f"/{b.owner}" if b.owner else "")
        lines.append(f"  {who} {b.type}: {b.status} {b.before} -> {b.after}" + (f" ({b.detail})" if b.detail else ""))
    failed, model_failed = report.failed, report.model_failed
    if failed:
        whole = len(failed) == len(report.buckets)
        scope = "every bucket" if whole else f"{len(failed)} of {len(report.buckets)} buckets"
        cause = "the model failed" if model_failed else "consolidation failed"
        lines.append(f"NOT DONE: {cause} for {scope}" + ("" if whole else " (the others are done)")
                     + "; failed buckets are retried at the next run; `mateclaw-mem status` shows the failures")
    ctx.emit(data, "\n".join(lines))
    if model_failed:
        return EXIT_MODEL
    if failed:
        return EXIT_ERROR
    return EXIT_OK if report.buckets else EXIT_NOTHING
