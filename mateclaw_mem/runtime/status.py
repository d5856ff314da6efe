"""What `status` shows: agents, files against their budgets, last writes, the model's health (its
probe and failures per step) — plus whatever other services report through
`Services.status_reporters` (extraction, dreaming, index, model usage)."""

from __future__ import annotations

import os
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mateclaw_mem.runtime import pidfile

if TYPE_CHECKING:
    from pathlib import Path

    from mateclaw_mem.runtime.services import Services


_SHOWN_WRITES = 5  # the last writes `status` lists per agent

def collect(services: Services, agents: list[str] | None = None, *,
            daemon: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report. `daemon` is what to say about the daemon when the daemon itself collects it
    (`collect_in_daemon`); otherwise this process asks the pid file and the daemon's /health."""
    # The file table here and the prompt budgets of a reporter list the same folders: once.
    with services.store.one_listing():
        return _collect(services, agents, daemon)


def _collect(services: Services, agents: list[str] | None, daemon: dict[str, Any] | None) -> dict[str, Any]:
    store = services.store
    settings = services.settings
    out: dict[str, Any] = {
        "mode": services.mode,
        "model": settings.model.model or None,
        "workspace": str(settings.workspace.resolve()),
        "workspace_source": settings.workspace_source or None,
        "config": str(settings.config_path) if settings.config_path else None,
        "config_source": settings.config_source or None,
        "daemon": daemon if daemon is not None else pidfile.probe(settings.state_dir),
        "owner_isolation": settings.owner_isolation,
        "agents": {},
    }
    for agent in agents or store.agents():
        files = store.list_files(agent)
        # The listing has already resolved the agent's folder and kept only files inside it: resolve
        # it once, not once per file (`store.history`/`store.path` would, ~1 ms each on 1,000 notes).
        folder, key = store.agent_dir(agent), store.agent_key(agent)
        kept = store.history_store.tails(key, [f.rel for f in files], 3)
        # A hand edit is dated by the file's mtime; one dated before the fifth newest kept version
        # cannot be among the five writes shown, so only the files saved since are read and hashed
        # (all of them, on a workspace of 1,000 notes the daemon wrote, was most of this report).
        ats = sorted((v.at for versions in kept for v in versions), reverse=True)
        since = ats[_SHOWN_WRITES - 1] if len(ats) >= _SHOWN_WRITES else ""
        recent = []
        for f, versions in zip(files, kept, strict=True):
            for v in versions:
                recent.append({"file": f.rel, "at": v.at, "actor": v.actor, "reason": v.reason})
            if versions:
                at = datetime.fromtimestamp(f.mtime, services.clock.tz).isoformat(timespec="seconds")
                if at >= since and _hand_edited(folder / f.rel, versions[-1].replaced_by):
                    recent.append({"file": f.rel, "at": at, "actor": "you", "reason": "hand edit"})
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
                    # workspace/oversized.py: read in parts, facts from its head, no machine writes
                    "oversized": store.file_max_bytes > 0 and f.size > store.file_max_bytes,
                }
                for f in files
            ],
            "last_writes": recent[:_SHOWN_WRITES],
        }
        if settings.owner_isolation:
            # Counts only: status is the operator's view, and an owner's text is that owner's alone.
            out["agents"][agent]["owners"] = {
                o: {"files": len(mine), "chars": sum(f.chars for f in mine)}
                for o in store.owners(agent) for mine in [store.list_files(agent, owner=o)]
            }
    if services.mode == "model":
        out["model_health"] = _guarded(lambda: model_health(services))
    from mateclaw_mem.runtime.heal import report

    if unreadable := store.unreadable_files():  # binary junk, not UTF-8: left out until fixed (listing.py)
        out["unreadable_files"] = unreadable
    if set_aside := report(settings):  # damaged databases moved aside: which, why, how to recover rows
        out["set_aside_databases"] = set_aside
    from mateclaw_mem.runtime import recovery

    if interrupted := recovery.report(services):  # operations a crash interrupted, finished at start
        out["interrupted_operations"] = interrupted
    for name, reporter in services.status_reporters():
        out[name] = _guarded(reporter)
    if daemon is not None:
        _said_by_the_daemon(out, daemon["pid"])
    else:
        _watcher_from_daemon(out, services)
        _providers_from_daemon(out, services)
    return out


def collect_in_daemon(services: Services, agents: list[str] | None, health: dict[str, Any]) -> dict[str, Any]:
    """The report as the running daemon makes it for `mateclaw-mem status` (`GET /api/v1/status`):
    its own record and `health` (its /health body) instead of asking itself over HTTP."""
    pid = os.getpid()
    record = pidfile.read(services.settings.state_dir)
    if record is not None and record.pid == pid:
        daemon: dict[str, Any] = {"running": True, **record.to_dict()}
    else:  # asked in the moment before the pid file is written
        from mateclaw_mem import __version__

        daemon = {"running": True, "pid": pid, "url": None, "started_at": "", "version": __version__}
    daemon["health"] = health
    return collect(services, agents, daemon=daemon)


def _said_by_the_daemon(out: dict[str, Any], pid: int) -> None:
    """Worded as a `status` run beside the daemon words them: the live parts are the daemon's."""
    watcher = (out.get("index") or {}).get("watcher") if isinstance(out.get("index"), dict) else None
    if isinstance(watcher, dict) and isinstance(watcher.get("state"), str):
        watcher["state"] = f"{watcher['state']} (in the daemon, pid {pid})"
    if isinstance(out.get("providers"), dict) and "error" not in out["providers"]:
        out["providers"]["source"] = f"the daemon (pid {pid})"


def model_health(services: Services) -> dict[str, Any]:
    """The model's start-up probe and its failures per step over the last 24 h (`status`, `/health`).

    Every step is listed, 0 when it did not fail: "no failures" is a statement, not an omission."""
    from mateclaw_mem.llm.failures import STEPS

    probe = services.model_probe
    usage = getattr(services.model, "usage", None)
    failures = usage.failures() if usage is not None else {}
    steps = {step: failures.pop(step, {"failures": 0}) for step in STEPS}
    steps.update(failures)  # a step recorded under another name is shown, not lost
    return {
        "probe": probe.status() if probe is not None else {"state": "not probed yet"},
        "failures_24h": steps,
    }


def _guarded(report: Any) -> Any:
    try:
        return report()
    except Exception as exc:  # status must always render; say what failed instead
        return {"error": f"{type(exc).__name__}: {exc}"}


def _watcher_from_daemon(out: dict[str, Any], services: Services) -> None:
    """The watcher runs in the daemon, not in this process: report the daemon's, or that there is none."""
    index = out.get("index")
    if not isinstance(index, dict) or "watcher" not in index or services.built("watcher"):
        return
    daemon = out["daemon"]
    background = (daemon.get("health") or {}).get("background") or {}
    if "file watcher" in background:
        index["watcher"] = {"state": f"{background['file watcher']} (in the daemon, pid {daemon['pid']})"}
    elif not daemon["running"]:
        index["watcher"] = {"state": "off: the daemon is not running (`mateclaw-mem serve` starts it)"}


def _providers_from_daemon(out: dict[str, Any], services: Services) -> None:
    """Provider calls happen in the daemon: its latencies, failures and breakers are the live ones."""
    daemon = out["daemon"]
    live = (daemon.get("health") or {}).get("providers")
    if isinstance(live, dict) and not services.running_parts():
        out["providers"] = {**live, "source": f"the daemon (pid {daemon['pid']})"}
    elif isinstance(out.get("providers"), dict) and "error" not in out["providers"]:
        where = "this process" if services.running_parts() else "this process (no daemon: counts start at zero)"
        out["providers"]["source"] = where


def _hand_edited(path: Path, last_sha: str) -> bool:
    """A save nobody recorded: the file differs from what the store last wrote. History keeps what
    machines replaced, so a person's save shows only here (a file the store never wrote was dropped
    in by hand, but when is unknown: not one)."""
    from mateclaw_mem.workspace.records import sha256

    try:
        data = path.read_bytes()
    except OSError:
        return False
    return sha256(data) != last_sha
