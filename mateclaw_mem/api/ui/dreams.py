"""`/ui/dreams`: the DREAMS.md diary as entries (newest first), "preview a dream" (a dry run that
writes nothing and shows the MEMORY.md diff it would make) and "dream now".

"Dream now" runs in the background (a model dream can take minutes): the page shows the run in
progress and refreshes itself -- htmx polls the page while it runs, and without JavaScript a
`<meta http-equiv="refresh">` does the same -- until the outcome replaces it."""

from __future__ import annotations

import threading
import time
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from mateclaw_mem.api.ui.view import diff_lines, render_markdown
from mateclaw_mem.api.ui.web import Page, UiRoute, form_of, page
from mateclaw_mem.errors import MateclawError

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)
ENTRIES = 30


def _entries(p: Page) -> list[dict[str, object]]:
    sections = p.services.dreaming.diary.entries(p.agent, owner=p.owner)
    return [{"title": s.title, "html": render_markdown("\n".join(s.text.splitlines()[1:]))}
            for s in reversed(sections[-ENTRIES:])]


# (agent, owner) -> the background run: {"started", "out" when done, "error" when it failed}
_RUNS: dict[tuple[str, str | None], dict[str, Any]] = {}
_LOCK = threading.Lock()


def _progress(p: Page) -> dict[str, Any] | None:
    """The run in progress for this page's agent and owner; a finished one becomes the flash."""
    with _LOCK:
        run = _RUNS.get((p.agent, p.owner))
        if run is None or ("out" not in run and "error" not in run):
            return None if run is None else {"seconds": int(time.monotonic() - run["started"])}
        del _RUNS[(p.agent, p.owner)]
    if "error" in run:
        p.flash(f"Dream failed: {run['error']}")
    else:
        out = run["out"]
        p.flash(f"Dream {out.status.replace('_', ' ')}: {len(out.promoted)} promoted"
                + (f" — {out.reason}" if out.reason else "") + ".",
                diffs=[{"file": "MEMORY.md", "rows": diff_lines(out.diff)}] if out.diff else [])
    return None


@router.get("/dreams")
def dreams(p: Page = Depends(page)) -> Response:
    running = _progress(p)
    return p.render("dreams.html", entries=_entries(p), preview=None, running=running)


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
    key, dreaming = (p.agent, p.owner), p.services.dreaming
    with _LOCK:
        if key in _RUNS:
            return p.redirect("dreams")  # one run at a time: the page shows the one in progress
        _RUNS[key] = run_state = {"started": time.monotonic()}

    def work() -> None:
        try:
            out = dreaming.dream(key[0], owner=key[1], topic=topic, trigger="manual")
        except MateclawError as exc:  # busy (a scheduled run holds the lock), a model failure, ...
            result: dict[str, Any] = {"error": exc.message}
        except Exception as exc:  # never a dead run the page waits for forever
            result = {"error": f"{type(exc).__name__}: {exc}"}
        else:
            result = {"out": out}
        with _LOCK:
            run_state.update(result)

    threading.Thread(target=work, name=f"ui-dream-{key[0]}", daemon=True).start()
    return p.redirect("dreams")
