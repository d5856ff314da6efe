"""`mateclaw-mem archive AGENT [list | restore YYYY-MM | roll]`: the compressed month archives.

`list` shows month by month what `memory/archive/YYYY-MM.md.gz` holds; `restore` puts one month's
files back byte for byte (one undoable run; refused, exit 4, when a file of the same name holds
something else); `roll` runs tonight's archive rotation now. Exit 10: nothing archived / rolled.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "archive", parents=[common], help=HELP["archive"],
        description="Month archives (memory/archive/YYYY-MM.md.gz): `list` (default), `restore YYYY-MM` "
        "(byte for byte, undoable), `roll` (run the archive rotation now). Exit codes: 0 done, "
        "10 nothing there, 4 a restore would overwrite a different file, 3 no such month.",
    )
    p.add_argument("agent", help="agent")
    p.add_argument("action", nargs="?", default="list", choices=("list", "restore", "roll"))
    p.add_argument("month", nargs="?", help="YYYY-MM (for restore)")
    p.add_argument("--owner", help="personal memory of this owner (owner isolation)")
    p.set_defaults(func=cmd_archive)


def cmd_archive(ctx: CliContext) -> int:
    from mateclaw_mem.cli.main import EXIT_NOTHING, EXIT_OK, EXIT_USAGE
    from mateclaw_mem.workspace import month_archive

    a = ctx.args
    agent = ctx.agent()
    store = ctx.services.store
    if a.action == "restore":
        if not a.month:
            ctx.fail("restore needs the month: mateclaw-mem archive AGENT restore YYYY-MM", code="usage")
            return EXIT_USAGE
        done = month_archive.restore_month(store, agent, a.month, owner=a.owner)
        lines = [f"restored {a.month}: {len(done.restored)} file(s) back from {done.archive}"]
        lines += [f"  {rel}" for rel in done.restored]
        lines += [f"  {rel} (already there, same bytes)" for rel in done.already]
        lines.append(f"undo with: mateclaw-mem undo {agent} --run {done.batch}")
        ctx.emit(done.as_dict(), "\n".join(lines))
        return EXIT_OK
    if a.month:
        ctx.fail(f"`{a.action}` takes no month (only `restore YYYY-MM` does)", code="usage")
        return EXIT_USAGE
    if a.action == "roll":
        result = ctx.services.dreaming.rotate(agent, owner=a.owner)
        moved, diary = result["daily_notes_archived"], result["diary_archives"]
        ctx.emit(result, f"rolled {len(moved)} item(s) into month archives"
                 + "".join(f"\n  {m}" for m in moved)
                 + (f"\nDREAMS.md held to its cap: old entries moved to {', '.join(diary)}" if diary else ""))
        return EXIT_OK if moved or diary else EXIT_NOTHING
    months = month_archive.months(store, agent, owner=a.owner)
    lines = []
    for m in months:
        if m["error"]:
            lines.append(f"{m['month']}  DAMAGED  {m['file']}: {m['error']}")
            continue
        dates = f"{m['notes'][0][8:]}..{m['notes'][-1][8:]}" if m["notes"] else "-"
        lines.append(f"{m['month']}  {len(m['notes'])} note(s) (days {dates}, {m['noteEntries']} entries)  "
                     f"{m['diaryEntries']} diary entries  {m['bytes']} bytes in {m['size']}  {m['file']}")
    ctx.emit({"agent": agent, "owner": a.owner, "months": months},
             "\n".join(lines) if lines else f"no month archives for {agent} yet")
    return EXIT_OK if months else EXIT_NOTHING
