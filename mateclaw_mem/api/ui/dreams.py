"""`/ui/dreams`: the DREAMS.md diary as entries (newest first), "preview a dream" (a dry run that
writes nothing and shows the MEMORY.md diff it would make) and "dream now"."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from mateclaw_mem.api.ui.view import diff_lines, render_markdown
from mateclaw_mem.api.ui.web import Page, UiRoute, form_of, page

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)
ENTRIES = 30


def _entries(p: Page) -> list[dict[str, object]]:
    sections = p.services.dreaming.diary.entries(p.agent, owner=p.owner)
    return [{"title": s.title, "html": render_markdown("\n".join(s.text.splitlines()[1:]))}
            for s in reversed(sections[-ENTRIES:])]


@router.get("/dreams")
def dreams(p: Page = Depends(page)) -> Response:
    return p.render("dreams.html", entries=_entries(p), preview=None)


@router.post("/dreams/preview")
async def preview(request: Request, p: Page = Depends(page)) -> Response:
    form = await form_of(request, p)
    topic = form.get("topic", "").strip() or None
    out = p.services.dreaming.dream(p.agent, owner=p.owner, topic=topic, preview=True, trigger="manual")
    shown = {"status": out.status, "reason": out.reason, "would_change": out.would_change,
             "promoted": out.promoted, "kept": out.kept, "dropped": out.dropped, "sections": out.sections,
             "diff": diff_lines(out.diff)}
    return p.render("dreams.html", entries=_entries(p), preview=shown)


@router.post("/dreams/run")
async def run(request: Request, p: Page = Depends(page)) -> Response:
    form = await form_of(request, p)
    topic = form.get("topic", "").strip() or None
    out = p.services.dreaming.dream(p.agent, owner=p.owner, topic=topic, trigger="manual")
    p.flash(f"Dream {out.status.replace('_', ' ')}: {len(out.promoted)} promoted"
            + (f" — {out.reason}" if out.reason else "") + ".",
            diffs=[{"file": "MEMORY.md", "rows": diff_lines(out.diff)}] if out.diff else [])
    return p.redirect("dreams")
