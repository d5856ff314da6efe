"""`/ui/facts`: the facts table (search, trust bar, source, uses, last confirmed) and what a person
does to a fact: feedback, confirm, edit, forget. Every action is a POST with the CSRF token, then a
303 back to the page it came from (`back`: facts or home)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi import Path as PathParam
from fastapi.responses import Response

from mateclaw_mem.api.ui.web import Page, UiRoute, form_of, page
from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.mcp.features import FACTS, is_on

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)
FactId = PathParam(pattern=r"^[A-Za-z0-9_-]{1,64}$")
ACTOR = "person"
LIMIT = 100  # per page; `?limit=` shows up to 500


def _back(p: Page, message: str) -> Response:
    p.flash(message)
    back = p.request.query_params.get("back", "facts")
    return p.redirect("" if back == "home" else "facts", q=p.request.query_params.get("q") or None)


@router.get("/facts")
def facts(p: Page = Depends(page)) -> Response:
    services = p.services
    if not is_on(FACTS, services.settings):  # a page with the navigation that says how to turn facts on
        return p.render("off.html", status=409, title="Facts are off", message=FACTS.how_to_turn_on())
    q = (p.request.query_params.get("q") or "").strip() or None
    limit = p.request.query_params.get("limit", "")
    limit_n = min(int(limit), 500) if limit.isdigit() and int(limit) > 0 else LIMIT
    found = services.facts.list(p.agent, p.owner, query=q, limit=limit_n)
    return p.render("facts.html", facts=found, q=q or "", limit=limit_n)


@router.post("/facts/{fid}/act")
async def act(request: Request, fid: str = FactId, p: Page = Depends(page)) -> Response:
    """One form per fact (fewer bytes per row than a form per button): `do` says which button."""
    form = await form_of(request, p)
    facts, agent, owner = p.services.facts, p.agent, p.owner
    match form.get("do", ""):
        case "confirm":
            view = facts.confirm(agent, owner, fid, actor=ACTOR)
            return _back(p, f"Confirmed: trust is now {view.trust:.2f}.")
        case "helpful" | "unhelpful" as verdict:
            view = facts.feedback(agent, owner, fid, verdict.upper(), actor=ACTOR, note=form.get("note", "")[:300])
            return _back(p, f"Marked {verdict.replace('un', 'not ')}: trust is now {view.trust:.2f}.")
        case "edit":
            text = form.get("text", "").strip()
            if not text or len(text) > 2000:
                raise InvalidInputError("the fact's new wording must be 1 to 2000 characters")
            view = facts.edit(agent, owner, fid, text, actor=ACTOR)
            return _back(p, f"Saved in {view.file}: {view.text}")
        case "forget":
            report = p.services.forget.forget_fact(agent, owner, fid, actor=ACTOR)
            where = ", ".join(f["file"] for f in report.files) or "no file"
            return _back(p, f"Forgotten everywhere (removed from {where}); undo with run {report.batch}.")
        case other:
            raise InvalidInputError(f"unknown fact action {other!r}: use confirm, helpful, unhelpful, edit or forget")
