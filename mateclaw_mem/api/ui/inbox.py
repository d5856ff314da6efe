"""`/ui/inbox`: open contradictions side by side with their sources; KEEP_A / KEEP_B / MERGE / IGNORE
change the files, and the page that follows shows the resulting diff."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi import Path as PathParam
from fastapi.responses import Response

from mateclaw_mem.api.ui.view import diff_lines
from mateclaw_mem.api.ui.web import Page, UiRoute, form_of, page
from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.mcp.features import INBOX, is_on

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)
PairId = PathParam(pattern=r"^[0-9a-f]{20}$")
ACTIONS = ("KEEP_A", "KEEP_B", "MERGE", "IGNORE")
SAID = {"KEEP_A": "Kept the first claim", "KEEP_B": "Kept the second claim", "MERGE": "Merged both claims",
        "IGNORE": "Ignored (this pair will not come back)"}


@router.get("/inbox")
def inbox(p: Page = Depends(page)) -> Response:
    if not is_on(INBOX, p.services.settings):  # a page with the navigation that says how to turn the inbox on
        return p.render("off.html", status=409, title="The inbox is off", message=INBOX.how_to_turn_on())
    return p.render("inbox.html", pairs=p.services.contradictions.list(p.agent, p.owner))


@router.post("/inbox/{pid}/resolve")
async def resolve(request: Request, pid: str = PairId, p: Page = Depends(page)) -> Response:
    form = await form_of(request, p)
    action = form.get("action", "")
    if action not in ACTIONS:
        raise InvalidInputError(f"unknown action {action!r}: use one of {', '.join(ACTIONS)}")
    text = form.get("text", "").strip() or None
    if action == "MERGE" and not text:
        raise InvalidInputError("MERGE needs the merged claim: write it in the box next to Merge")
    p.services.facts.require_enabled()
    r = p.services.contradictions.resolve(p.agent, p.owner, pid, action, text=text if action == "MERGE" else None,
                                          actor="person")
    diffs = [{"file": f["file"], "rows": diff_lines(f["diff"])} for f in r.files]
    p.flash(f"{SAID[action]}." + ("" if diffs else " No file changed."), diffs=diffs)
    return p.redirect("inbox")
