"""What `status` shows: agents, files against their budgets, last writes — plus whatever other
services report through `Services.status_reporters` (extraction, dreaming, index, model usage)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mateclaw_mem.runtime.services import Services


def collect(services: Services, agents: list[str] | None = None) -> dict[str, Any]:
    store = services.store
    settings = services.settings
    out: dict[str, Any] = {
        "mode": services.mode,
        "model": settings.model.model or None,
        "workspace": str(settings.workspace.resolve()),
        "config": str(settings.config_path) if settings.config_path else None,
        "owner_isolation": settings.owner_isolation,
        "agents": {},
    }
    for agent in agents or store.agents():
        files = store.list_files(agent)
        recent = []
        for f in files:
            for v in store.history(agent, f.rel)[-3:]:
                recent.append({"file": f.rel, "at": v.at, "actor": v.actor, "reason": v.reason})
        recent.sort(key=lambda r: r["at"], reverse=True)
        out["agents"][agent] = {
            "files": [
                {
                    "file": f.rel,
                    "enabled": f.enabled,
                    "chars": f.chars,
                    "ceiling": f.ceiling,
                    "over_budget": f.over_budget,
                    "frontmatter_error": f.meta_error,
                }
                for f in files
            ],
            "last_writes": recent[:5],
        }
    for name, reporter in services.status_reporters():
        try:
            out[name] = reporter()
        except Exception as exc:  # status must always render; say what failed instead
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out
