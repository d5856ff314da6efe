"""`mateclaw-mem card`: the morning card (last night's report) and what the person does with it.

    mateclaw-mem card AGENT [--owner O] [--seen]           # show the latest unseen report (10: none waits)
    mateclaw-mem card AGENT confirm|forget FACT            # trust up / forget it everywhere
    mateclaw-mem card AGENT edit FACT "the new text"       # the person's words, through the writer
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("card", parents=[common], help=HELP["card"],
                       description="Show the latest unseen dream report (exit 10 when none waits), mark it seen, "
                       "or confirm, edit or forget one of its facts.")
    p.add_argument("agent", help="agent")
    p.add_argument("action", nargs="?", choices=("confirm", "edit", "forget"), help="what to do with FACT")
    p.add_argument("fact", nargs="?", help="a fact id from the card")
    p.add_argument("text", nargs="*", help="edit: the new text")
    p.add_argument("--seen", action="store_true", help="mark the card seen")
    p.add_argument("--owner", help="personal memory of this owner (owner isolation)")
    p.set_defaults(func=cmd_card)


def _render(card: dict[str, Any]) -> str:
    lines = []
    report = card.get("report")
    if report:
        lines.append(f"{report['run_id']}: {report['status'].replace('_', ' ')} — {report['reason']}")
        lines += [f"promoted: {p['text']}" + (f"  [{p['fact_id']}]" if p.get("fact_id") else "")
                  for p in report.get("promoted", [])]
        lines += [f"kept: {k['text']}" for k in report.get("kept", [])[:10]]
        lines += [f"rejected: {r['text']} — {r['reason']}" for r in report.get("rejected", [])[:10]]
        facts = report.get("facts", {})
        lines += [f"superseded: {f['old']} → {f['new']}  [{f['id']}]" for f in facts.get("superseded", [])]
        lines += [f"contradiction: {c}" for c in report.get("contradictions", [])[:5]]
    for f in card.get("facts", []):
        lines.append(f"fact {f['id']} trust {f['trust']:.2f}: {f['text']}")
    soul = card.get("soul_proposal")
    if soul:
        lines.append(f"SOUL.md proposal #{soul['id']} ({soul['mode']}): {soul['reason']}")
        lines.append(soul["diff"].rstrip("\n"))
    return "\n".join(lines)


def cmd_card(ctx: CliContext) -> int:
    from mateclaw_mem.cli.main import EXIT_NOTHING, EXIT_OK

    a, card = ctx.args, ctx.services.morning_card
    agent = ctx.agent()
    if a.action:
        if not a.fact:
            ctx.fail(f"card {a.action} needs a FACT id (see `mateclaw-mem card {agent}`)", code="invalid_input")
        if a.action == "edit":
            if not a.text:
                ctx.fail("card edit needs the new text after the FACT id", code="invalid_input")
            view = card.edit(agent, a.owner, a.fact, " ".join(a.text))
        elif a.text:
            ctx.fail(f"card {a.action} takes one FACT id and no text", code="invalid_input")
        else:
            view = getattr(card, a.action)(agent, a.owner, a.fact)
        trust = f" (trust {view['trust']:.2f})" if isinstance(view.get("trust"), float) else ""
        done = {"confirm": "confirmed", "edit": "edited", "forget": "forgot"}[a.action]
        ctx.emit(view, f"{done} fact {view.get('id', a.fact)}{trust}")
        return EXIT_OK
    shown = card.card(agent, a.owner)
    if a.seen:
        marked = card.seen(agent, a.owner)
        ctx.emit(marked, f"marked {marked['marked']} report(s) seen")
        return EXIT_OK if marked["marked"] else EXIT_NOTHING
    if shown is None:
        ctx.emit(None, f"no morning card for {agent}: every dream report has been seen")
        return EXIT_NOTHING
    ctx.emit(shown, _render(shown))
    return EXIT_OK
