"""`GET /health`: open (no key), cheap, secret-free. Any 2xx means the daemon is up."""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends, Response

from mateclaw_mem import __version__
from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.deps import get_services
from mateclaw_mem.runtime import recovery
from mateclaw_mem.runtime.daemon_status import STATUS_PATH
from mateclaw_mem.runtime.heal import report
from mateclaw_mem.runtime.services import START_ORDER, Services
from mateclaw_mem.runtime.status import collect_in_daemon, model_health

router = APIRouter(tags=["health"])


@router.get("/health", summary="liveness, mode, version, index freshness and model health (no auth)")
def health(services: Services = Depends(get_services)) -> dict[str, Any]:
    # Says whether auth is on, never what the key is; no paths, no file names, no owners (a set-aside
    # database is named by our own file name under .mateclaw/, relative to the workspace).
    return {
        "status": "ok",
        "version": __version__,
        "mode": services.mode,
        "auth": bool(services.api_key),
        "pid": os.getpid(),  # `status` checks it against the daemon's pid file
        "background": background_status(services),
        "index": _index(services),
        # Model mode: does the model answer (start-up probe) and which steps failed in the last 24 h.
        "model": model_health(services) if services.mode == "model" else None,
        # Per memory provider: latency, failures, breaker state (what `status` shows from the daemon).
        "providers": services.providers.status() if services.built("providers") else None,
        # Damaged databases moved aside (runtime/heal.py): which, why, and how to copy their rows back.
        "set_aside": report(services.settings, full_paths=False),
        # Operations a crash interrupted, finished at start (runtime/recovery.py): which and how.
        "interrupted_operations": recovery.report(services, full=False),
    }


@router.get(STATUS_PATH, dependencies=[Depends(require_api_key)],
            summary="what `mateclaw-mem status` shows (paths, files, last writes: needs the key)")
def status(agent: str | None = None, services: Services = Depends(get_services)) -> Response:
    if agent:
        services.store.require_agent(agent)  # 404 naming it, as the CLI's own check would
    data = collect_in_daemon(services, [agent] if agent else None, health(services))
    # Encoded as the CLI's --json encodes it, so both ways to a report give the same bytes.
    return Response(json.dumps(data, ensure_ascii=False, default=str), media_type="application/json")


def background_status(services: Services) -> dict[str, Any]:
    """The daemon's own parts (what `status` shows): each running or stopped, the next scheduled runs."""
    running = set(services.running_parts())
    parts: dict[str, Any] = {label: "running" if label in running else "stopped" for label in START_ORDER}
    if services.built("aml") and services.aml.facts is None:
        parts["AML fact worker"] = "off (rules mode)"
    if services.built("watcher"):
        parts["file watcher"] = services.watcher.status()["state"]
    parts["next_runs"] = services.scheduler.next_runs() if services.built("scheduler") else {}
    return parts


def _index(services: Services) -> dict[str, Any] | None:
    """How fresh the search index is. None when this process has not opened it (no watcher)."""
    if not services.built("file_index"):  # never open (create) the index just to report on it
        return None
    index = services.file_index
    synced = index.last_sync_ms
    status = services.watcher.status() if services.built("watcher") else None
    return {
        # "catching up" until the watcher's start-up reconcile (whatever changed while no daemon was
        # watching) is done: searches answer from what is indexed meanwhile, so say so.
        "state": _catch_up_state(status),
        **index.counts(),
        "last_sync": datetime.fromtimestamp(synced / 1000, services.clock.tz).isoformat(timespec="seconds")
        if synced else None,
        "watcher": status["state"] if status else "not running",
        "pending_changes": status["pending"] if status else None,
        # A restarted watcher may have missed events (a reconcile follows): say so, and when.
        "watcher_restarts": status["restarts"] if status else 0,
        "watcher_last_restart": _iso(status["last_restart"], services) if status else None,
        "watcher_restart_reason": status["restart_reason"] if status else None,
    }


def _catch_up_state(status: dict[str, Any] | None) -> str:
    if status is None:
        return "not watching"  # no watcher in this process: the index is as the last reconcile left it
    return "ready" if status["last_reconcile"] is not None else "catching up"


def _iso(unix: float | None, services: Services) -> str | None:
    return datetime.fromtimestamp(unix, services.clock.tz).isoformat(timespec="seconds") if unix else None
