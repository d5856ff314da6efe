"""The scheduler's jobs and heartbeat tasks, built from settings and the parts they run
(runtime/scheduler.py runs them and knows no service). Each part is a getter: it is built when its
job first runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from mateclaw_mem.errors import BusyError

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.conversations.aml_users import AmlUsers
    from mateclaw_mem.memory.dreaming.service import DreamingService
    from mateclaw_mem.memory.facts.service import FactService
    from mateclaw_mem.memory.forget.service import ForgetService
    from mateclaw_mem.memory.structured.consolidation import StructuredConsolidation
    from mateclaw_mem.runtime.build.types import Closer
    from mateclaw_mem.runtime.scheduler import Beat, Job, Scheduler
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.store import WorkspaceStore


def scheduler(settings: Settings, clock: Clock, jobs: list[Job], beats: list[Beat], *, on_close: Closer) -> Scheduler:
    """Built here, not started: `Services.start()` starts it, `stop()` stops it."""
    from mateclaw_mem.runtime.scheduler import Scheduler

    sched = Scheduler(settings.state_db, clock, jobs, beats, catch_up=lambda: settings.dreaming.catch_up)
    on_close(sched)
    return sched


def jobs(settings: Settings, clock: Clock, store: WorkspaceStore, *, dreaming: Callable[[], DreamingService],
         structured: Callable[[], StructuredConsolidation], facts: Callable[[], FactService]) -> list[Job]:
    """The cron jobs the settings switch on, in the configured timezone."""
    from mateclaw_mem.cron import cron_trigger
    from mateclaw_mem.runtime.scheduler import Job

    tz = clock.tz
    mem = settings.mate.memory

    def units(job: str) -> Callable[[], list[str]]:
        """One unit per agent, plus one per owner's personal memory when owner isolation is on:
        `job:agent` and `job:agent:owner` (the owner percent-encoded, so it never holds a ':')."""
        def listed() -> list[str]:
            out = []
            for agent in store.agents():
                out.append(f"{job}:{agent}")
                out.extend(f"{job}:{agent}:{quote(owner, safe='')}" for owner in store.owners(agent))
            return out
        return listed

    def dream(unit: str, trigger: str) -> str:
        agent, owner = _target(unit)
        try:
            out = dreaming().dream(agent, owner=owner, trigger=trigger)
        except BusyError:
            return "busy (a manual run holds the lock)"
        return f"{out.status}: {out.reason}"

    def consolidate(unit: str, trigger: str) -> str:
        try:
            report = structured().run()
        except BusyError:
            return "busy (a manual run holds the lock)"
        summary = report.as_dict() if hasattr(report, "as_dict") else {}
        return (f"done: {summary.get('ownersConsolidated', 0)} owner(s) consolidated, "
                f"{summary.get('updated', 0)} updated")

    def project(unit: str, trigger: str) -> str:
        report = facts().rebuild()
        return f"done: {report['facts']} fact(s) from {report['files']} file(s)"

    def rotate(unit: str, trigger: str) -> str:
        agent, owner = _target(unit)
        result = dreaming().rotate(agent, owner=owner)
        return f"done: {len(result['daily_notes_archived'])} note(s) archived"

    def job(name: str, cron: str, run: Callable[[str, str], str], listed: Callable[[], list[str]]) -> Job:
        return Job(name, cron, cron_trigger(cron, tz), run, listed)

    out = []
    if mem.emergence_enabled:
        out.append(job("dreaming", settings.dreaming.cron, dream, units("dreaming")))
    if mem.structured_consolidation_enabled:
        out.append(job("structured_consolidation", mem.structured_consolidation_cron, consolidate,
                       lambda: ["structured_consolidation"]))
    if mem.fact.projection_enabled:
        out.append(job("fact_projection", mem.fact.projection_rebuild_cron, project, lambda: ["fact_projection"]))
    out.append(job("archive_rotation", settings.dreaming.archive_rotation_cron, rotate, units("archive_rotation")))
    return out


def beats(*, forget: Callable[[], ForgetService], sweep: Callable[[], list[Any]],
          aml_users: Callable[[], AmlUsers]) -> list[Beat]:
    """What every heartbeat does before the jobs. `sweep`: runtime/recovery.py's, finishing an
    operation another process died in."""
    from mateclaw_mem.runtime.scheduler import Beat


    def purge() -> str | None:  # history copies of forgotten claims whose undo window has passed
        return "done" if forget().purge_due() else None

    def finish() -> str | None:
        finished = sweep()
        return f"{len(finished)} finished" if finished else None

    def retention() -> str | None:  # AML users past aml.retention-days (at most hourly; the first beat is at start)
        expired = aml_users().expire_due()
        return f"{len(expired)} user(s) deleted" if expired else None

    return [Beat("forget_purge", purge, "forget purge failed"),
            Beat("interrupted_operations", finish, "finishing interrupted operations failed"),
            Beat("aml_retention", retention, "AML retention failed")]


def _target(unit: str) -> tuple[str, str | None]:
    parts = unit.split(":")
    return parts[1], (unquote(parts[2]) if len(parts) > 2 else None)
