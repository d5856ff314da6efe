"""`/ui/timeline`: every change to the agent's (and the picked owner's) files by day, newest first —
extraction runs, dreams, consolidations, a person's saves, imports, undos, forgets, and hand edits
nobody recorded (the file differs from what the store last wrote). Filter by kind; each change
opens its diff on the file's history page.

The history keeps one record per change (the content it replaced, who replaced it and why), so the
timeline is those records; nothing is stored for it.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from mateclaw_mem.api.ui.web import Page, UiRoute, page
from mateclaw_mem.workspace.history import Version
from mateclaw_mem.workspace.records import sha256

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)
KINDS = ("extraction", "dream", "consolidation", "edit", "hand edit", "import", "undo", "forget", "other")
LIMIT = 300


def kind_of(v: Version) -> str:
    actor, reason = v.actor.lower(), v.reason.lower()
    if reason.startswith("undo"):
        return "undo"
    if reason.startswith("forget"):
        return "forget"
    for kind in ("import", "extraction", "consolidation"):
        if kind in actor or reason.startswith(kind):
            return kind
    if "dream" in actor or "rotation" in actor:
        return "dream"
    return "edit" if actor in ("person", "api") else "other"


def _events(p: Page, owner: str | None, scope: str) -> list[dict[str, Any]]:
    store = p.services.store
    key, folder = store.agent_key(p.agent, owner), store.agent_dir(p.agent, owner)
    out = []
    for f in store.list_files(p.agent, owner=owner):
        if scope == "team" and p.services.settings.owner_isolation and f.rel.startswith("owners/"):
            continue
        versions = store.history_store.list(key, f.rel)
        out += [{"at": v.at, "kind": kind_of(v), "file": f.rel, "scope": scope, "actor": v.actor,
                 "reason": v.reason, "version": v.version, "batch": v.batch} for v in versions]
        if versions and versions[-1].replaced_by:
            try:
                on_disk = sha256((folder / f.rel).read_bytes())
            except OSError:
                continue
            if on_disk != versions[-1].replaced_by:
                at = datetime.fromtimestamp(f.mtime, p.services.clock.tz).isoformat(timespec="seconds")
                out.append({"at": at, "kind": "hand edit", "file": f.rel, "scope": scope, "actor": "you",
                            "reason": "saved outside the daemon", "version": None, "batch": None})
    return out


@router.get("/timeline")
def timeline(kind: str = "", p: Page = Depends(page)) -> Response:
    events = _events(p, None, "team")
    if p.owner is not None:
        events += _events(p, p.owner, "personal")
    counts: dict[str, int] = defaultdict(int)
    for e in events:
        counts[e["kind"]] += 1
    if kind:
        events = [e for e in events if e["kind"] == kind]
    events.sort(key=lambda e: e["at"], reverse=True)
    shown = events[:LIMIT]
    days: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in shown:
        days[e["at"][:10]].append(e)
    return p.render("timeline.html", days=days, kinds=KINDS, counts=counts, kind=kind,
                    more=len(events) - len(shown))
