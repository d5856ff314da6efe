"""`doctor`: the databases checked, damaged ones set aside; `--salvage FILE` copies rows back."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("doctor", parents=[common], help=HELP["doctor"])
    p.add_argument("--salvage", metavar="FILE",
                   help="copy every readable row of a set-aside database (NAME.db.damaged-TIME) back into NAME.db")
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(ctx: CliContext) -> int:
    from mateclaw_mem.runtime import doctor

    ctx.require_workspace()
    if ctx.args.salvage:
        return _salvage(ctx, doctor.salvage(ctx.services, ctx.args.salvage))
    data = doctor.check(ctx.services)
    lines = [f"databases in {data['state_dir']} (PRAGMA quick_check):"]
    for d in data["databases"]:
        state = "DAMAGED: " + d["problem"] if d["state"] == "damaged" else d["state"]
        lines.append(f"  {d['database']:<12} {d['kind']:<8} {_size(d['size_bytes']):>9}  {state}")
    for s in data["set_aside_now"]:
        lines.append(f"set aside {s['database']} as {s['file']}")
    for name, what in (data.get("rebuilt") or {}).items():
        lines.append(f"rebuilt {name}: " + ", ".join(f"{v} {k}" for k, v in what.items()))
    if data["daemon"]:
        lines.append(f"not set aside: {data['daemon']} has the databases open; restart it (it sets damaged "
                     "databases aside at start), or stop it and run `mateclaw-mem doctor` again")
    if data["set_aside"]:
        lines.append("set-aside databases on disk:")
        for s in data["set_aside"]:
            lines.append(f"  {s['file']}  ({s['kind']}, {s['set_aside_at']}: {s['problem']})")
            lines.append(f"    {s['recover']}")
    for e in data.get("finished_now") or []:
        lines.append(f"interrupted {e['operation']} (run {e['run']}): {e['outcome']} - {e['how']}")
        lines += [f"  left alone: {f['file']}: {f['why']}" for f in e.get("left_alone", [])]
    ctx.emit(data, "\n".join(lines))
    return 1 if data["daemon"] else 0


def _salvage(ctx: CliContext, report: dict) -> int:
    if report.get("derived"):
        ctx.emit(report, report["reason"])
        return 10
    lines = [f"salvage {report['source']} -> {report['into']}"]
    if report["header_rewritten"]:
        lines.append("  its header was unreadable: read with a standard one (the file itself is unchanged)")
    if report["schema_error"]:
        lines.append(f"  nothing readable: {report['schema_error']}")
    for name, t in report["tables"].items():
        extra = f", {t['unreadable_ranges']} unreadable run(s) skipped" if t["unreadable_ranges"] else ""
        extra += f", error: {t['error']}" if t["error"] else ""
        lines.append(f"  {name}: {t['read']} read, {t['copied']} copied, {t['already_there']} already there{extra}")
    if report["skipped"]:
        lines.append(f"  not copied (rebuilt from the memory files instead): {', '.join(report['skipped'])}")
    lines.append(f"{report['copied']} of {report['read']} readable rows copied back")
    if report.get("next"):
        lines.append(report["next"])
    ctx.emit(report, "\n".join(lines))
    return 0 if report["copied"] else 10


def _size(n: int) -> str:
    return f"{n / 1024:.0f} KB" if n < 10 * 1024 * 1024 else f"{n / 1024 / 1024:.0f} MB"
