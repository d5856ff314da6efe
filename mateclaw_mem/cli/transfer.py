"""export and import: an agent's memory files to and from a zip or a folder (workspace/transfer.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext

_ORDER = ("create", "overwrite", "merge", "unchanged", "conflict", "skip", "failed")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("export", parents=[common],
                       help=HELP["export"])
    p.add_argument("agent", nargs="?", help="agent (default: default)")
    p.add_argument("--out", metavar="FILE.zip|DIR",
                   help="a .zip file, or a new/empty folder (default: ./mateclaw-AGENT-TIME.zip)")
    p.add_argument("--owner", help="personal memory of this owner only (owner isolation)")
    p.add_argument("--include-history", action="store_true",
                   help="also put the agent's kept versions (.mateclaw/history) in the export")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("import", parents=[common],
                       help=HELP["import"])
    p.add_argument("path", help="a zip or folder from export, an agent folder, an Obsidian vault, or one .md file")
    p.add_argument("--agent", help="target agent (default: default; never the agent named in the manifest)")
    p.add_argument("--owner", help="import into this owner's personal memory (owner isolation)")
    p.add_argument("--strategy", choices=("skip", "overwrite", "merge"), default="skip",
                   help="when a file exists and differs: keep it (skip, default), replace it (overwrite; pinned "
                        "sections stay), or append the sections and lines it lacks (merge)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and write nothing")
    p.set_defaults(func=cmd_import)


def cmd_export(ctx: CliContext) -> int:
    a = ctx.args
    result = ctx.services.transfer.export(ctx.agent(), Path(a.out) if a.out else None, owner=a.owner,
                                          include_history=a.include_history)
    data = {
        "agent": result.agent,
        "owner": result.owner,
        "out": str(result.out),
        "files": [f.__dict__ for f in result.files],
        "skipped": [{"path": p, "reason": r} for p, r in result.skipped],
        "history_files": result.history_files,
    }
    lines = [f"exported {len(result.files)} file{'s' if len(result.files) != 1 else ''} of {result.agent}"
             + (f" (owner {result.owner})" if result.owner else "") + f" to {result.out}"]
    if result.history_files:
        lines.append(f"  with {result.history_files} history files")
    lines += [f"  skipped  {p}  ({r})" for p, r in result.skipped]
    ctx.emit(data, "\n".join(lines))
    return 0


def cmd_import(ctx: CliContext) -> int:
    from mateclaw_mem.cli.main import EXIT_ERROR, EXIT_NOTHING, EXIT_OK

    a = ctx.args
    report = ctx.services.transfer.import_(Path(a.path), agent=a.agent, default_agent=ctx.settings.default_agent,
                                           owner=a.owner, strategy=a.strategy, dry_run=a.dry_run)
    items = sorted(report.items, key=lambda i: (_ORDER.index(i.action), i.source))
    data = {
        "agent": report.agent,
        "strategy": report.strategy,
        "dry_run": report.dry_run,
        "run": report.batch,
        "counts": report.counts(),
        "notes": report.notes,
        "files": [{"source": i.source, "file": i.rel, "owner": i.owner, "action": i.action, "reason": i.reason,
                   "archived": list(i.archived)} for i in items],
    }
    head = f"import into {report.agent} (strategy {report.strategy})" + (" — dry run, nothing written"
                                                                         if report.dry_run else "")
    lines = [head]
    for i in items:
        target = f" -> {i.rel}" if i.rel and i.rel != i.source else ""
        owner = f" [owner {i.owner}]" if i.owner else ""
        why = f"  ({i.reason})" if i.reason else ""
        cut = f"  (over its ceiling: the tail moved to {', '.join(i.archived)})" if i.archived else ""
        lines.append(f"  {i.action:<9} {i.source}{target}{owner}{why}{cut}")
    lines += [f"  note: {n}" for n in report.notes]
    counts = sorted(report.counts().items(), key=lambda kv: _ORDER.index(kv[0]))
    lines.append(", ".join(f"{k}: {n}" for k, n in counts) or "nothing to import")
    if report.batch:
        lines.append(f"run {report.batch}; undo it with: mateclaw-mem undo {report.agent} --run {report.batch}")
    ctx.emit(data, "\n".join(lines))
    if report.failed:
        return EXIT_ERROR
    return EXIT_OK if report.written else EXIT_NOTHING
