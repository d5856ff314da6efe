"""The nightly schedule inside the daemon (APScheduler 3 BackgroundScheduler), with catch-up.

Jobs (crons from settings, Quartz or 5-field, in the configured timezone):

- `dreaming` at `dreaming.cron` — one dream per agent (each agent has its own lock and bookkeeping);
- `structured_consolidation` at `mate.memory.structured-consolidation-cron` — runs
  `StructuredConsolidation.run()` when that service is enabled;
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

The scheduler is handed its jobs (`Job`: a cron and what to run per unit) and the heartbeat's own
tasks (`Beat`: forget's purges, interrupted operations, AML retention) by runtime/build/schedule.py;
it knows no service.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mateclaw_mem.cron import next_fire_after
from mateclaw_mem.db import SharedConnection
from mateclaw_mem.errors import MateclawError

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

    from mateclaw_mem.clock import Clock

log = logging.getLogger("mateclaw_mem.scheduler")

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
class Job:
    """A scheduled job: its cron, and what one run of one unit does."""

    name: str
    cron: str
    trigger: CronTrigger
    run: Callable[[str, str], str]  # (unit, "schedule" | "catch-up") -> outcome
    units: Callable[[], list[str]]  # coverage keys: one per agent for dreaming, the job name otherwise


@dataclass
class Beat:
    """A task of every heartbeat: `run()` answers what it did, or None when there was nothing to do.
    A failure is logged (`failed`) and tried again at the next beat; it never stops the schedule."""

    name: str
    run: Callable[[], str | None]
    failed: str


class Scheduler:
    """start() / stop() / next_runs() for the daemon; tick() / tick_all() are what every wake-up calls."""

    def __init__(self, state_db: Path, clock: Clock, jobs: list[Job], beats: list[Beat], *,
                 catch_up: Callable[[], bool]) -> None:
        self.clock = clock
        self.catch_up = catch_up  # dreaming.catch-up, read at each fire: whether one missed past MISFIRE_GRACE runs
        self._db = ScheduleState(state_db)
        self._job_locks: dict[str, threading.Lock] = {}
        self._scheduler: Any = None
        self.jobs: dict[str, Job] = {job.name: job for job in jobs}
        self.beats = beats

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
                d = decide(covered, now, job.trigger, catch_up=self.catch_up())
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
        for beat in self.beats:
            try:
                if (outcome := beat.run()) is not None:
                    out.append((beat.name, outcome))
            except Exception:  # tried again next beat; status says what is left
                log.exception(beat.failed)
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
