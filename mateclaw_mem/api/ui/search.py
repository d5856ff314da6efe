"""`/ui/search`: one box over files, structured entries, conversations and facts (CJK included);
snippets with the matched terms highlighted, each hit linking to its file and line."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from mateclaw_mem.api.ui.view import snippet
from mateclaw_mem.api.ui.web import Page, UiRoute, page

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)
LIMIT = 30


@router.get("/search")
def search(q: str = "", p: Page = Depends(page)) -> Response:
    q = q.strip()
    hits, facts, warnings = [], [], []
    if q:
        result = p.services.search.search(q, agent=p.agent, owner=p.owner, limit=LIMIT, record=False)
        hits = [{"h": h, "snippet": snippet(h.snippet)} for h in result.hits]
        warnings = result.warnings
        if p.services.facts.enabled:
            facts = p.services.facts.list(p.agent, p.owner, query=q, limit=10)
    return p.render("search.html", q=q, hits=hits, facts=facts, warnings=warnings)
