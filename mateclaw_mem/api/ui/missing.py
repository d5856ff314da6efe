"""`/ui/<anything else>`: a page of its own, not the API's JSON 404. Mounted after every page
(`install_ui` adds it last), so it only answers paths no page claims, and with the nav bar, so a
mistyped or stale link still leaves the person one click from where they meant to go."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from mateclaw_mem.api.ui.web import Page, UiRoute, page

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)


@router.get("/{rest:path}")
def missing(rest: str, p: Page = Depends(page)) -> Response:
    return p.render("error.html", status=404, title="Page not found",
                    message=f"The Memory Browser has no page /ui/{rest}. Pick one from the bar above.")
