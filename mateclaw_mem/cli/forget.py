"""`mateclaw-mem forget`: a structured entry, or a claim everywhere.

    forget AGENT TYPE KEY                      remove one structured entry (exact key; undoable)
    forget AGENT TEXT [--now] [--receipt] | --fact ID   forget a claim everywhere (`fact.forget-enabled`)

One quoted TEXT is a claim; TYPE KEY (two words, TYPE one of user/feedback/project/reference) is an
entry - the two forms differ by their argument count, so neither can be read as the other.

A claim: removed from every memory file of that owner (or the shared ones), the conversation log and both
indexes, and tombstones it so extraction and dreaming never bring it back; prints every place.
History copies holding it go after `fact.forget-undo-hours` (`--now`: at once; then the run can no
longer be undone). `--receipt`: one line per store (runtime/holders.py) with what it removed, and a
scan of every byte under the workspace root for the claim, with a planted control the scan must find.
With `mate.memory.fact.forget-enabled` off: exit 6 naming the key.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext

PERSON = "person"  # a human at the command line


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("forget", parents=[common],
                       help=HELP["forget"])
    p.add_argument("agent")
    p.add_argument("what", nargs="*", metavar="TEXT | TYPE KEY",
                   help="the claim, e.g. 'I take my tea without sugar'; or an entry's type and key")
    p.add_argument("--fact", metavar="ID", help="forget the fact with this id (its text) instead of TEXT")
    p.add_argument("--now", action="store_true", help="purge history copies at once (no undo afterwards)")
    p.add_argument("--receipt", action="store_true",
                   help="list every store and scan every byte of the workspace for the claim afterwards")
    p.add_argument("--owner", help="owner key of personal memory (owner isolation)")
    p.set_defaults(func=cmd_forget)


def cmd_forget(ctx: CliContext) -> int:
    from mateclaw_mem.cli.main import EXIT_ERROR, EXIT_NOTHING, EXIT_USAGE
    from mateclaw_mem.cli.prompt import TYPES

    a = ctx.args
    if len(a.what) == 2 and a.what[0] in TYPES and not a.fact and not a.now:
        item = ctx.services.structured.forget(a.agent, a.what[0], a.what[1], actor=PERSON, owner=a.owner)
        ctx.emit(item.as_dict(), f"forgot {item.type} entry {item.entry.key!r} (undo restores it)")
        return 0
    if (len(a.what) == 1) == bool(a.fact) or len(a.what) > 1:
        ctx.fail("name the claim as one TEXT (quoted), or --fact ID, or an entry as TYPE KEY "
                 f"(TYPE one of {', '.join(TYPES)})", code="invalid_input")
        return EXIT_USAGE
    svc = ctx.services.forget
    if a.fact:
        report = svc.forget_fact(a.agent, a.owner, a.fact, actor=PERSON, now=a.now, receipt=a.receipt)
    else:
        report = svc.forget(a.agent, a.owner, a.what[0], actor=PERSON, now=a.now, receipt=a.receipt)
    lines = [f"forgot in {report.places} place(s) (run {report.batch}), status: {report.status}"]
    lines += [f"  {f['file']}: {f['lines']} line(s)" for f in report.files]
    lines.append(f"  conversation log: {report.log_messages} message(s), {report.aml_facts} AML fact(s); "
                 f"message index: {report.message_index_docs}; search index: {report.search_index_rows} row(s)")
    if report.history_purge_due:
        lines.append(f"  history copies: purged after {report.history_purge_due} "
                     f"(undo before: mateclaw-mem undo {a.agent} --run {report.batch})")
    else:
        lines.append(f"  history copies purged: {report.history_purged}")
    lines += [f"  not cut: {k['file']} ({k['why']})" for k in report.shared_kept]
    lines += [f"  FAILED {e['store']}: {e['error']} (the forget stays pending and is run again)" for e in report.errors]
    if a.receipt:
        lines += _receipt(report.to_dict())
    ctx.emit(report.to_dict(), "\n".join(lines))
    if report.errors:
        return EXIT_ERROR  # something still holds it; the report says what, the next heartbeat tries again
    return 0 if report.places or report.history_purged or report.removed else EXIT_NOTHING


def _receipt(r: dict) -> list[str]:
    lines = ["receipt:"]
    for s in r["stores"]:
        extra = ", ".join(f"{k} {v}" for k, v in s.items() if k not in ("store", "holds", "removed") and v)
        lines.append(f"  {s['store']}: removed {s.get('removed', 0)}" + (f" ({extra})" if extra else ""))
    for d in r["scrubbed"]:
        fts = f", FTS optimized: {', '.join(d['fts_optimized'])}" if d["fts_optimized"] else ""
        lines.append(f"  scrubbed {d['db']}: vacuumed {d['vacuumed']}{fts}, WAL {d['wal_bytes']} bytes")
    scan = r["scan"]
    if scan:
        control = scan["control"]
        lines.append(f"  byte scan: {scan['files']} files, {scan['bytes']:,} bytes ({scan['gunzipped']} gzip "
                     f"unpacked): the claim found {scan['occurrences']} time(s), {scan['unexplained']} unexplained")
        lines += [f"    {h['file']}: {h['count']}" + (f" ({h['why']})" if h["why"] else "") for h in scan["found"]]
        lines.append(f"  control: planted in {', '.join(control['planted'])}; found in "
                     f"{', '.join(control['found']) or 'none'} -> {scan['proof']}")
    return lines
