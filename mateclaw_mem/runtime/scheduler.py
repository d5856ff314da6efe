"""The nightly schedule inside the daemon (APScheduler 3 BackgroundScheduler), with catch-up.

Jobs (crons from settings, Quartz or 5-field, in the configured timezone):

- `dreaming` at `dreaming.cron` — one dream per agent (each agent has its own lock and bookkeeping);
- `structured_consolidation` at `mate.memory.structured-consolidation-cron` — runs
  `services.structured_consolidation.run()` when that service exists and is enabled;
- `archive_rotation` at `dreaming.archive-rotation-cron` — `DreamingService.rotate` per agent;
- `fact_projection` at `mate.memory.fact.projection-rebuild-cron` (with `fact.projection-enabled`) —
  `FactService.rebuild()` reconciles the facts with the files.

Catch-up: a desktop is often asleep or off at 3 AM. Every job records in `state.db` the time up to
which its schedule is covered. `due_fire(covered, now, trigger)` — a pure function — returns the
first fire time in (covered, now], or None. Whatever wakes a job (its cron firing, the start of the
daemon, or a one-minute heartbeat that notices a wake from sleep), the job runs only when a fire
time is due, then covers everything up to now: any number of missed fires become ONE run, never a
burst, and a run is never repeated for a fire time already covered. With `dreaming.catch-up: false`
a fire missed by more than `MISFIRE_GRACE` is recorded as missed and skipped.

A job seen for the first time starts covered at "now": installing the daemon at noon does not
trigger last night's dream.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, unquote

from mateclaw_mem.cron import cron_trigger, next_fire_after
from mateclaw_mem.db import SharedConnection
from mateclaw_mem.errors import BusyError, MateclawError
from mateclaw_mem.runtime import recovery

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

    from mateclaw_mem.conversations.aml_users import AmlUsers
    from mateclaw_mem.memory.dreaming.service import DreamingService
    from mateclaw_mem.memory.facts.service import FactService
    from mateclaw_mem.memory.forget.service import ForgetService
    from mateclaw_mem.memory.structured.consolidation import StructuredConsolidation

log = logging.getLogger("mateclaw_mem.scheduler")


class Container(recovery.Container, Protocol):
    """What the jobs run on (runtime/services.py `Services`, which builds the scheduler); each part is
    built when its job first runs. Recovery's heartbeat sweep reads what recovery.Container names."""

    @property
    def dreaming(self) -> DreamingService: ...
    @property
    def structured_consolidation(self) -> StructuredConsolidation: ...
    @property
    def facts(self) -> FactService: ...
    @property
    def forget(self) -> ForgetService: ...
    @property
    def aml_users(self) -> AmlUsers: ...

HEARTBEAT_SECONDS = 60  # wall-clock check; after a sleep the next beat notices the missed fire
MISFIRE_GRACE = timedelta(minutes=10)  # with catch-up off: how late a fire may still run

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schedule_jobs (
    job TEXT PRIMARY KEY,
    covered_until TEXT NOT NULL,
    last_fire TEXT,
    last_started TEXT,
    last_finished TEXT,
    last_outcome TEXT,
    last_error TEXT
);
"""


# -- pure schedule functions ------------------------------------------------------------------------


def due_fire(covered_until: datetime | None, now: datetime, trigger: CronTrigger) -> datetime | None:
    """The first fire time in (covered_until, now], or None when nothing is due.

    None for `covered_until` (a job never seen) is never due: the first sight only starts coverage."""
    if covered_until is None or now <= covered_until:
        return None
    fire = next_fire_after(trigger, covered_until)
    return fire if fire is not None and fire <= now else None


@dataclass(frozen=True)
class Decision:
    run: bool
    fire: datetime | None  # the scheduled time this run stands for (the first one missed)
    late: bool  # the fire time is more than MISFIRE_GRACE ago: a catch-up
    reason: str


def decide(covered_until: datetime | None, now: datetime, trigger: CronTrigger, *, catch_up: bool,
           grace: timedelta = MISFIRE_GRACE) -> Decision:
    """Whether a job runs now. Pure: tests drive it with a ManualClock."""
    fire = due_fire(covered_until, now, trigger)
    if fire is None:
        return Decision(False, None, False, "not due")
    late = now - fire > grace
    if late and not catch_up:
        return Decision(False, fire, True, f"missed the {fire:%Y-%m-%d %H:%M} run; catch-up is off")
    return Decision(True, fire, late, f"catch-up of the {fire:%Y-%m-%d %H:%M} run" if late else "scheduled")


class ScheduleState(SharedConnection):
    """state.db `schedule_jobs`: how far each unit's schedule is covered, and its last run."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, _SCHEMA)

    def covered_until(self, unit: str) -> datetime | None:
        with self._lock:
            row = self._conn.execute("SELECT covered_until FROM schedule_jobs WHERE job=?", (unit,)).fetchone()
        return datetime.fromisoformat(row[0]) if row else None

    def cover(self, unit: str, until: datetime, **fields: str | None) -> None:
        cols = ["covered_until", *fields]
        vals = [until.isoformat(), *fields.values()]
        with self._write() as conn:
            conn.execute(
                f"INSERT INTO schedule_jobs(job, {', '.join(cols)}) VALUES (?, {', '.join('?' * len(cols))}) "
                f"ON CONFLICT(job) DO UPDATE SET {', '.join(f'{c}=excluded.{c}' for c in cols)}",
                (unit, *vals),
            )

    def job_state(self, unit: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute("SELECT * FROM schedule_jobs WHERE job=?", (unit,)).fetchone()
        return dict(row) if row else None


# -- the scheduler ----------------------------------------------------------------------------------


@dataclass
class _Job:
    name: str
    cron: str
    trigger: CronTrigger
    run: Callable[[str, str], str]  # (unit, "schedule" | "catch-up") -> outcome
    units: Callable[[], list[str]]  # coverage keys: one per agent for dreaming, the job name otherwise


class Scheduler:
    """start() / stop() / next_runs() for the daemon; tick() / tick_all() are what every wake-up calls."""

    def __init__(self, services: Container) -> None:
        self.services = services
        self.settings = services.settings
        self.clock = services.clock
        self._db = ScheduleState(self.settings.state_db)
        self._job_locks: dict[str, threading.Lock] = {}
        self._scheduler: Any = None
        self.jobs: dict[str, _Job] = {}
        self._build_jobs()

    # -- jobs ------------------------------------------------------------------------------------

    def _build_jobs(self) -> None:
        tz = self.clock.tz
        s = self.settings
        mem = s.mate.memory
        if mem.emergence_enabled:
            self.jobs["dreaming"] = _Job("dreaming", s.dreaming.cron, cron_trigger(s.dreaming.cron, tz),
                                         self._run_dreaming, lambda: self._units("dreaming"))
        if mem.structured_consolidation_enabled:
            cron = mem.structured_consolidation_cron
            self.jobs["structured_consolidation"] = _Job(
                "structured_consolidation", cron, cron_trigger(cron, tz), self._run_structured,
                lambda: ["structured_consolidation"])
        if mem.fact.projection_enabled:
            cron = mem.fact.projection_rebuild_cron
            self.jobs["fact_projection"] = _Job("fact_projection", cron, cron_trigger(cron, tz), self._run_facts,
                                                lambda: ["fact_projection"])
        self.jobs["archive_rotation"] = _Job(
            "archive_rotation", s.dreaming.archive_rotation_cron, cron_trigger(s.dreaming.archive_rotation_cron, tz),
            self._run_rotation, lambda: self._units("archive_rotation"))

    def _units(self, job: str) -> list[str]:
        """One unit per agent, plus one per owner's personal memory when owner isolation is on:
        `job:agent` and `job:agent:owner` (the owner percent-encoded, so it never holds a ':')."""
        store = self.services.store
        units = []
        for agent in store.agents():
            units.append(f"{job}:{agent}")
            units.extend(f"{job}:{agent}:{quote(owner, safe='')}" for owner in store.owners(agent))
        return units

    @staticmethod
    def _target(unit: str) -> tuple[str, str | None]:
        parts = unit.split(":")
        return parts[1], (unquote(parts[2]) if len(parts) > 2 else None)

    def _run_dreaming(self, unit: str, trigger: str) -> str:
        agent, owner = self._target(unit)
        try:
            out = self.services.dreaming.dream(agent, owner=owner, trigger=trigger)
        except BusyError:
            return "busy (a manual run holds the lock)"
        return f"{out.status}: {out.reason}"

    def _run_structured(self, unit: str, trigger: str) -> str:
        try:
            report = self.services.structured_consolidation.run()
        except BusyError:
            return "busy (a manual run holds the lock)"
        summary = report.as_dict() if hasattr(report, "as_dict") else {}
        return (f"done: {summary.get('ownersConsolidated', 0)} owner(s) consolidated, "
                f"{summary.get('updated', 0)} updated")

    def _run_facts(self, unit: str, trigger: str) -> str:
        report = self.services.facts.rebuild()
        return f"done: {report['facts']} fact(s) from {report['files']} file(s)"

    def _run_rotation(self, unit: str, trigger: str) -> str:
        agent, owner = self._target(unit)
        result = self.services.dreaming.rotate(agent, owner=owner)
        return f"done: {len(result['daily_notes_archived'])} note(s) archived"

    # -- bookkeeping -----------------------------------------------------------------------------

    def covered_until(self, unit: str) -> datetime | None:
        return self._db.covered_until(unit)

    def _cover(self, unit: str, until: datetime, **fields: str | None) -> None:
        self._db.cover(unit, until, **fields)

    def job_state(self, unit: str) -> dict[str, Any] | None:
        return self._db.job_state(unit)

    # -- ticking ---------------------------------------------------------------------------------

    def tick(self, name: str) -> list[tuple[str, str]]:
        """Run job `name` for every unit that is due. Returns [(unit, outcome)] for units that ran
        (or were recorded as missed). Idempotent for a fire time: safe to call from anywhere."""
        job = self.jobs[name]
        lock = self._job_locks.setdefault(name, threading.Lock())
        if not lock.acquire(blocking=False):
            return []  # the same job is running in another thread; it covers this fire
        try:
            done: list[tuple[str, str]] = []
            for unit in job.units():
                now = self.clock.now()
                covered = self.covered_until(unit)
                if covered is None:
                    self._cover(unit, now)  # first sight starts coverage; nothing is "missed" yet
                    continue
                d = decide(covered, now, job.trigger, catch_up=self.settings.dreaming.catch_up)
                if d.fire is None:
                    continue
                if not d.run:
                    log.info("%s: %s", unit, d.reason)
                    self._cover(unit, now, last_fire=d.fire.isoformat(), last_outcome=f"missed: {d.reason}")
                    done.append((unit, "missed"))
                    continue
                # Cover before running: a crash mid-run must not turn into a retry loop every minute.
                self._cover(unit, now, last_fire=d.fire.isoformat(), last_started=now.isoformat(),
                            last_outcome="running", last_error=None)
                log.info("%s: %s", unit, d.reason)
                try:
                    outcome = job.run(unit, "catch-up" if d.late else "schedule")
                    error = None
                except MateclawError as exc:
                    outcome, error = f"failed: {exc.message}", exc.message
                except Exception as exc:  # a job's bug must not kill the scheduler thread
                    log.exception("%s failed", unit)
                    outcome, error = f"failed: {type(exc).__name__}: {exc}", str(exc)
                self._cover(unit, now, last_finished=self.clock.now().isoformat(), last_outcome=outcome[:500],
                            last_error=error)
                (log.warning if error else log.info)("%s: %s", unit, outcome)
                done.append((unit, outcome))
            return done
        finally:
            lock.release()

    def tick_all(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        try:  # every heartbeat: history copies of forgotten claims whose undo window has passed
            if self.services.forget.purge_due():
                out.append(("forget_purge", "done"))
        except Exception:  # a purge failing must not stop the schedule; it is tried again next beat
            log.exception("forget purge failed")
        try:  # every heartbeat: an operation another process died in is finished (runtime/recovery.py)
            if finished := recovery.sweep(self.services):
                out.append(("interrupted_operations", f"{len(finished)} finished"))
        except Exception:  # tried again next beat; status says what is unfinished
            log.exception("finishing interrupted operations failed")
        try:  # AML users past aml.retention-days (at most hourly; the first beat is at start)
            if expired := self.services.aml_users.expire_due():
                out.append(("aml_retention", f"{len(expired)} user(s) deleted"))
        except Exception:
            log.exception("AML retention failed")
        for name in list(self.jobs):
            out.extend(self.tick(name))
        return out

    def next_runs(self) -> dict[str, str | None]:
        now = self.clock.now()
        out: dict[str, str | None] = {}
        for name, job in self.jobs.items():
            nxt = next_fire_after(job.trigger, now)
            out[name] = nxt.isoformat(timespec="seconds") if nxt else None
        return out

    def next_run(self, name: str) -> datetime | None:
        job = self.jobs.get(name)
        return next_fire_after(job.trigger, self.clock.now()) if job else None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler
        from apscheduler.triggers.interval import IntervalTrigger

        if self._scheduler is not None:
            return
        sched = BackgroundScheduler(timezone=self.clock.tz)
        for name, job in self.jobs.items():
            # coalesce + no grace limit: APScheduler itself runs a late fire once after a wake; tick()
            # decides whether it is still due, so it never repeats what the heartbeat already ran.
            sched.add_job(self.tick, job.trigger, args=[name], id=name, name=name, coalesce=True,
                          max_instances=1, misfire_grace_time=None, replace_existing=True)
        # The heartbeat runs once right away (the catch-up at start) and then every minute: the
        # monotonic timers APScheduler waits on stand still while the machine sleeps, the wall clock
        # does not, so this is what notices a wake.
        sched.add_job(self.tick_all, IntervalTrigger(seconds=HEARTBEAT_SECONDS, timezone=self.clock.tz),
                      id="heartbeat", name="heartbeat", coalesce=True, max_instances=1, misfire_grace_time=None,
                      next_run_time=datetime.now(self.clock.tz), replace_existing=True)
        sched.start()
        self._scheduler = sched

    def stop(self) -> None:
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=True)
            self._scheduler = None

    @property
    def running(self) -> bool:
        return self._scheduler is not None and bool(self._scheduler.running)

    def close(self) -> None:
        self.stop()
        self._db.close()
