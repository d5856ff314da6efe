"""`/ui/health`: the daemon's own parts (workers, WAL checkpoints, AML views, the file watcher), its
next scheduled runs and today's model tokens. Kept off Home, which opens on what the person acts on
(the morning card, the contradiction inbox); this page is for when something seems wrong."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from mateclaw_mem.api.health import background_status
from mateclaw_mem.api.ui.web import Page, UiRoute, page
from mateclaw_mem.api.ui.when import short
from mateclaw_mem.runtime import recovery
from mateclaw_mem.runtime.services import Services

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)


def _health(services: Services) -> dict[str, Any]:
    background = background_status(services)
    next_runs = background.pop("next_runs", {}) or {}
    now = services.clock.now()
    usage = getattr(services.model, "usage", None) if services.mode == "model" else None
    today = None
    if usage is not None:
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        totals = usage.summary(since_ms=int(midnight.timestamp() * 1000))
        today = totals["prompt_tokens"] + totals["completion_tokens"]
    runs = {job.replace("_", " "): short(at, services.clock.tz, now) or "not scheduled"
            for job, at in next_runs.items()}
    return {"mode": services.mode, "model": services.settings.model.model or "", "parts": background,
            "next_runs": runs, "tokens_today": today, "tz": str(services.clock.tz),
            "interrupted": recovery.report(services)}


@router.get("/health")
def health(p: Page = Depends(page)) -> Response:
    return p.render("health.html", health=_health(p.services))
