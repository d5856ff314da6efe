"""`/ui/`: what the person acts on first: the morning card (the latest dream's report with Confirm /
Edit / Forget per fact) and the contradiction inbox, greeted and dated in the daemon's time zone;
then the always-on budgets as bars. The daemon's own parts are on `/ui/health` (ui/health.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from mateclaw_mem.api.ui.view import diff_lines
from mateclaw_mem.api.ui.web import Page, UiRoute, form_of, page
from mateclaw_mem.api.ui.when import greeting, local, run_heading
from mateclaw_mem.errors import NotFoundError
from mateclaw_mem.memory.dreaming.card import report_fact_ids
from mateclaw_mem.runtime.services import Services

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)


def _report_facts(services: Services, agent: str, owner: str | None, report: dict[str, Any]) -> list[Any]:
    if not services.facts.enabled:
        return []
    out = []
    for fid in sorted(report_fact_ids(report)):
        try:
            out.append(services.facts.get(agent, owner, fid))
        except NotFoundError:
            continue  # edited or forgotten since the night
    return out


def _budgets(services: Services, agent: str) -> list[dict[str, Any]]:
    report = services.context.budget_report([agent]).get(agent, {})
    bars = [{"name": f["file"], "used": f["chars"], "ceiling": f["budget_chars"], "over": f["over_budget"]}
            for f in report.get("files", [])]
    block = report.get("structured_block")
    if block:
        bars.append({"name": "structured block", "used": block["chars"], "ceiling": block["budget_chars"],
                     "over": bool(block["budget_chars"] and block["chars"] > block["budget_chars"])})
    return bars


@router.get("/")
def home(p: Page = Depends(page)) -> Response:
    services = p.services
    report = services.dreaming.runs.latest_report(p.agent, p.owner)
    unseen = services.dreaming.runs.latest_report(p.agent, p.owner, unseen=True) is not None
    inbox = len(services.contradictions.list(p.agent, p.owner)) if services.facts.enabled else None
    now, tz = services.clock.now(), services.clock.tz
    ran = local(report.get("at"), tz) if report else None
    return p.render("home.html", report=report, unseen=unseen, greeting=greeting(now),
                    card_heading=run_heading(report, tz, now) if report else "Latest dream",
                    ran_at=f"{ran:%Y-%m-%d %H:%M}" if ran else "",
                    facts=_report_facts(services, p.agent, p.owner, report) if report else [],
                    diff=diff_lines(report.get("memory_diff", "")) if report else [],
                    inbox=inbox, budgets=_budgets(services, p.agent))


@router.post("/card/seen")
async def seen(request: Request, p: Page = Depends(page)) -> Response:
    await form_of(request, p)
    p.services.morning_card.seen(p.agent, p.owner)
    p.flash("Marked the morning card seen.")
    return p.redirect("")
