"""`/ui/learning`: the agent's tasks (attempts, best and average score, a trend sparkline), its
reflections and strategies — read from `services.learning`, the same service as the API and MCP.

The sparkline is inline SVG built here: markup, not script, and positioned with SVG attributes
(the CSP forbids inline `style`), so it needs neither JavaScript nor an asset.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from markupsafe import Markup

from mateclaw_mem.api.ui.web import Page, UiRoute, page

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)
SPARK_POINTS = 30  # the latest results drawn; older ones are in the run log
WIDTH, HEIGHT, PAD = 120, 28, 3


def sparkline(scores: list[float], label: str) -> Markup:
    """Scores (oldest first) as a polyline scaled to their own range, the last point marked."""
    if not scores:
        return Markup("")
    low, high = min(scores), max(scores)
    span = (high - low) or 1.0
    step = (WIDTH - 2 * PAD) / max(len(scores) - 1, 1)
    points = [(PAD + i * step, HEIGHT - PAD - (s - low) / span * (HEIGHT - 2 * PAD)) for i, s in enumerate(scores)]
    if len(points) == 1:
        points = [(PAD, points[0][1]), (WIDTH - PAD, points[0][1])]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    x, y = points[-1]
    # The label is the page's text, escaped by Markup.format; numbers are ours.
    return Markup(
        '<svg class="spark" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{label}">'
        '<polyline fill="none" stroke="#2f5d8a" stroke-width="1.5" points="{line}"/>'
        '<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="#2f5d8a"/></svg>'
    ).format(w=WIDTH, h=HEIGHT, label=label, line=line, x=x, y=y)


@dataclass(frozen=True)
class TaskRow:
    task: str
    attempts: int
    best: float | int | None
    avg: float | int | None
    trend: str
    runs: int
    memoryless: int
    spark: Markup
    strategies: list[str]


@router.get("/learning")
def learning(p: Page = Depends(page)) -> Response:
    service = p.services.learning
    rows = []
    for t in service.list_tasks(p.agent):
        scores = [float(r.score) for r in reversed(service.run_list(p.agent, t.task, limit=SPARK_POINTS))
                  if r.score is not None]
        strategies = service.task_memory(p.agent, t.task).strategies if t.has_memory else []
        label = f"{t.task}: last {len(scores)} score(s), {t.score_trend}"
        rows.append(TaskRow(t.task, t.attempt_count, t.best_score, t.avg_score, t.score_trend, t.runs,
                            t.memoryless_runs, sparkline(scores, label), strategies))
    return p.render("learning.html", tasks=rows, memory=service.memory(p.agent))
