"""File commands: ls, cat, write, write-memory, edit, enable, disable, sort, history, undo."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext

# The merge strategies (markdown.merge.STRATEGIES), spelled here so that building the parser imports nothing.
STRATEGIES = ("append", "replace_section", "upsert_kv", "overwrite")
PERSON = "person"  # a human at the command line: their writes are never cut by ceilings


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("ls", parents=[common], help=HELP["ls"])
    p.add_argument("agent", nargs="?", help="agent (default: default)")
    p.add_argument("--prefix", default="", help="only paths starting with this (e.g. memory/)")
    p.add_argument("--owner", help="personal memory of this owner (owner isolation)")
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser("cat", parents=[common], help=HELP["cat"])
    p.add_argument("agent")
    p.add_argument("file")
    p.add_argument("--owner")
    p.set_defaults(func=cmd_cat)

    p = sub.add_parser("write", parents=[common], help=HELP["write"])
    p.add_argument("agent")
    p.add_argument("file")
    p.add_argument("--text", help="the new content (default: read stdin)")
    p.add_argument("--expect", metavar="SHA", help="refuse unless the file still has this hash (from cat --json)")
    p.add_argument("--owner")
    p.set_defaults(func=cmd_write)

    p = sub.add_parser("write-memory", parents=[common],
                       help=HELP["write-memory"])
    p.add_argument("agent")
    p.add_argument("file")
    p.add_argument("--strategy", required=True, choices=STRATEGIES,
                   help="append: add at the end (of --section); replace_section: replace or add the ## section;"
                        " upsert_kv: set 'key: value' lines in place; overwrite: replace the body (frontmatter kept)")
    p.add_argument("--section", help="the ## section title to write in")
    p.add_argument("--key", help="upsert_kv only: set this one key to --text")
    p.add_argument("--text", help="the text (default: read stdin)")
    p.add_argument("--owner")
    p.set_defaults(func=cmd_write_memory)

    p = sub.add_parser("edit", parents=[common], help=HELP["edit"])
    p.add_argument("agent")
    p.add_argument("file")
    p.add_argument("--old", required=True, help="exact text to find")
    p.add_argument("--new", required=True, help="replacement")
    p.add_argument("--all", action="store_true", help="replace every occurrence")
    p.add_argument("--owner")
    p.set_defaults(func=cmd_edit)

    for name, enabled in (("enable", True), ("disable", False)):
        p = sub.add_parser(name, parents=[common], help=HELP[name])
        p.add_argument("agent")
        p.add_argument("file")
        p.add_argument("--owner")
        p.set_defaults(func=cmd_enable, enabled=enabled)

    p = sub.add_parser("sort", parents=[common], help=HELP["sort"])
    p.add_argument("agent")
    p.add_argument("file")
    p.add_argument("order", type=int)
    p.add_argument("--owner")
    p.set_defaults(func=cmd_sort)

    p = sub.add_parser("history", parents=[common], help=HELP["history"])
    p.add_argument("agent")
    p.add_argument("file")
    p.add_argument("--owner")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("undo", parents=[common], help=HELP["undo"])
    p.add_argument("agent")
    p.add_argument("file", nargs="?", help="the file to restore (omit with --run)")
    p.add_argument("--version", type=int, help="version number from `history`")
    p.add_argument("--run", metavar="RUN_ID", help="undo every change of one run (e.g. a dream) as a whole")
    p.add_argument("--owner")
    p.set_defaults(func=cmd_undo)


def cmd_ls(ctx: CliContext) -> int:
    a = ctx.args
    files = ctx.services.tools.list(a.agent or ctx.settings.default_agent, prefix=a.prefix, owner=a.owner)
    rows = [
        {
            "file": f.rel,
            "enabled": f.enabled,
            "sort_order": f.sort_order,
            "chars": f.chars,
            "ceiling": f.ceiling,
            "over_budget": f.over_budget,
            "frontmatter_error": f.meta_error,
        }
        for f in files
    ]
    lines = []
    for f in files:
        budget = f"{f.chars}/{f.ceiling}" if f.ceiling else f"{f.chars}"
        flag = "  OVER BUDGET" if f.over_budget else ""
        warn = f"  ({f.meta_error})" if f.meta_error else ""
        lines.append(f"{'on ' if f.enabled else 'off'}  {f.sort_order:>4}  {budget:>11} chars  {f.rel}{flag}{warn}")
    empty = f"no files under {a.prefix}" if a.prefix else "no memory files (run `mateclaw-mem init`)"
    ctx.emit(rows, "\n".join(lines) if lines else empty)
    return 0


def cmd_cat(ctx: CliContext) -> int:
    a = ctx.args
    snap = ctx.services.tools.read(a.agent, a.file, owner=a.owner)
    if ctx.json:
        ctx.emit({"file": snap.rel, "sha": snap.sha, "content": snap.text})
    else:
        sys.stdout.write(snap.text)
    return 0


def cmd_write(ctx: CliContext) -> int:
    a = ctx.args
    content = a.text if a.text is not None else sys.stdin.read()
    result = ctx.services.tools.write(a.agent, a.file, content, actor=PERSON, owner=a.owner, expected_sha=a.expect)
    ctx.emit(_result(result), f"wrote {result.rel}" if result.changed else f"{result.rel} unchanged")
    return 0


def cmd_write_memory(ctx: CliContext) -> int:
    a = ctx.args
    content = a.text if a.text is not None else sys.stdin.read()
    result = ctx.services.tools.write_memory(a.agent, a.file, content, strategy=a.strategy, section=a.section,
                                             key=a.key, actor=PERSON, owner=a.owner)
    done = f"{a.strategy} into {result.rel}" + (f" (## {a.section})" if a.section else "")
    ctx.emit({**_result(result), "strategy": a.strategy}, done if result.changed else f"{result.rel} unchanged")
    return 0


def cmd_edit(ctx: CliContext) -> int:
    a = ctx.args
    out = ctx.services.tools.edit(a.agent, a.file, a.old, a.new, actor=PERSON, owner=a.owner, replace_all=a.all,
                                   all_flag="--all")
    ctx.emit({**_result(out.write), "replacements": out.replacements},
             f"edited {out.write.rel} ({out.replacements} replacement{'s' if out.replacements != 1 else ''})")
    return 0


def cmd_enable(ctx: CliContext) -> int:
    a = ctx.args
    result = ctx.services.tools.set_enabled(a.agent, a.file, a.enabled, actor=PERSON, owner=a.owner)
    ctx.emit(_result(result), f"{a.file} {'enabled' if a.enabled else 'disabled'}")
    return 0


def cmd_sort(ctx: CliContext) -> int:
    a = ctx.args
    result = ctx.services.tools.set_sort_order(a.agent, a.file, a.order, actor=PERSON, owner=a.owner)
    ctx.emit(_result(result), f"{a.file} sort_order = {a.order}")
    return 0


def cmd_history(ctx: CliContext) -> int:
    a = ctx.args
    versions = ctx.services.store.history(a.agent, a.file, owner=a.owner)
    rows = [v.__dict__ for v in reversed(versions)]
    lines = [
        f"v{v.version:<4} {v.at}  {v.actor:<11} {v.size:>7} bytes  {v.reason}"
        + (f"  [run {v.batch}]" if v.batch else "")
        + ("" if v.existed else "  (file did not exist)")
        for v in reversed(versions)
    ]
    ctx.emit(rows, "\n".join(lines) if lines else f"{a.file}: no earlier versions")
    return 0


def cmd_undo(ctx: CliContext) -> int:
    a = ctx.args
    store = ctx.services.store
    if a.run:
        results = store.undo_batch(a.run)
        ctx.emit([_result(r) for r in results], f"undid run {a.run}: " + ", ".join(r.rel for r in results))
        return 0
    if not a.file:
        from mateclaw_mem.errors import InvalidInputError

        raise InvalidInputError("name the file to restore, or use --run RUN_ID")
    result = store.undo(a.agent, a.file, owner=a.owner, version=a.version)
    note = " (removed: it did not exist then)" if not result.sha else ""
    ctx.emit(_result(result), f"restored {result.rel}{note}")
    return 0


def _result(result: object) -> dict:
    r = result.__dict__
    return {
        "file": r["rel"],
        "sha": r["sha"],
        "previous_sha": r["previous_sha"],
        "changed": r["changed"],
        "archived": list(r["archived"]),
    }
