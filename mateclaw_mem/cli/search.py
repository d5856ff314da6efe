"""Search commands: search, reindex."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("search", parents=[common], help=HELP["search"])
    p.add_argument("query", nargs="+", help="words to look for (any of them; more matched words rank higher)")
    p.add_argument("--agent", help="agent (default: default)")
    p.add_argument("--owner", help="also search this owner's personal memory (owner isolation)")
    p.add_argument("--scope", default="all", choices=["all", "memory", "profile", "persona", "conversations", "files"],
                   help="all (default), memory, profile, persona, conversations or files")
    p.add_argument("--limit", type=int, default=10, help="hits to show, 1-50 (default 10)")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("reindex", parents=[common], help=HELP["reindex"])
    p.add_argument("agent", nargs="?", help="only this agent's files (default: everything, built aside and swapped)")
    p.set_defaults(func=cmd_reindex)


def cmd_search(ctx: CliContext) -> int:
    a = ctx.args
    result = ctx.services.search.search(" ".join(a.query), agent=a.agent, owner=a.owner, scope=a.scope,
                                        limit=a.limit)
    lines = [f"warning: {w}" for w in result.warnings]
    for h in result.hits:
        where = f"{h.file}:{h.line}" if h.line else f"{h.file} #{h.message_id}"
        lines.append(f"{h.score:>9.3f}  {where}" + (f"  ({h.title})" if h.title else ""))
        lines.append(f"           {h.snippet}")
    if not result.hits:
        lines.append("no matches")
    ctx.emit(result.to_dict(), "\n".join(lines))
    return 0 if result.hits else 10


def cmd_reindex(ctx: CliContext) -> int:
    from mateclaw_mem.runtime.index_ops import reindex

    progress = _Progress() if sys.stderr.isatty() and not ctx.json else None
    report = reindex(ctx.services, agent=ctx.args.agent, progress=progress)
    if progress:
        progress.done()
    what = f"agent {report['agent']}: {report['files']} files" if "agent" in report else (
        f"{report['files']} files, {report['chunks']} chunks, {report['messages']} messages")
    if "aml_messages" in report:
        what += f"; Add/Search index: {report['aml_messages']} messages and facts"
    lines = [f"reindexed {what}"] + [f"skipped {s}" for s in report.get("skipped", [])]
    ctx.emit(report, "\n".join(lines))
    return 0


class _Progress:
    """A one-line bar on stderr (only on a terminal; plain output otherwise)."""

    def __call__(self, done: int, total: int) -> None:
        width = 30
        filled = width * done // total if total else width
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} files")
        sys.stderr.flush()

    def done(self) -> None:
        sys.stderr.write("\n")
