"""The nightly schedule: fire times from settings, catch-up after downtime/sleep exactly once."""

from __future__ import annotations

import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from mateclaw_mem.cron import cron_trigger, next_fire_after
from mateclaw_mem.runtime.scheduler import Scheduler, decide, due_fire
from mateclaw_mem.runtime.services import Services
from tests.conftest import TZ
from tests.test_dreaming import write_week


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=TZ)


# -- pure functions ---------------------------------------------------------------------------------


def test_due_fire_is_the_first_fire_in_the_uncovered_span() -> None:
    trig = cron_trigger("0 0 3 * * ?", TZ)  # Quartz, as the seed writes it
    covered = at(2026, 11, 30, 3, 0, 5)
    assert due_fire(covered, at(2026, 12, 1, 2, 59, 59), trig) is None
    assert due_fire(covered, at(2026, 12, 1, 3, 0, 0), trig) == at(2026, 12, 1, 3, 0)
    # Four nights missed: one fire is due (the first), never four.
    assert due_fire(at(2026, 11, 26, 12, 0), at(2026, 12, 1, 9, 0), trig) == at(2026, 11, 27, 3, 0)
    assert due_fire(None, at(2026, 12, 1, 9, 0), trig) is None  # a job never seen is not "missed"
    # Exactly on a fire time that is already covered: not due again.
    assert due_fire(at(2026, 12, 1, 3, 0), at(2026, 12, 1, 3, 0, 30), trig) is None


def test_decide_catch_up_and_grace() -> None:
    trig = cron_trigger("0 0 3 * * ?", TZ)
    on_time = decide(at(2026, 11, 30, 12, 0), at(2026, 12, 1, 3, 0, 1), trig, catch_up=False)
    assert on_time.run and not on_time.late
    late = decide(at(2026, 11, 30, 12, 0), at(2026, 12, 1, 8, 0), trig, catch_up=True)
    assert late.run and late.late and "catch-up" in late.reason
    skipped = decide(at(2026, 11, 30, 12, 0), at(2026, 12, 1, 8, 0), trig, catch_up=False)
    assert not skipped.run and skipped.fire == at(2026, 12, 1, 3, 0)


def test_timezone_and_dst_are_respected() -> None:
    berlin = cron_trigger("0 0 3 * * ?", TZ)
    # Berlin leaves summer time on 2026-10-25: 03:00 local is +01:00 on that night, +02:00 before.
    assert next_fire_after(berlin, at(2026, 10, 24, 4, 0)).isoformat() == "2026-10-25T03:00:00+01:00"
    assert next_fire_after(berlin, at(2026, 10, 23, 4, 0)).isoformat() == "2026-10-24T03:00:00+02:00"
    shanghai = cron_trigger("30 3 * * *", ZoneInfo("Asia/Shanghai"))  # classic 5-field cron
    assert next_fire_after(shanghai, at(2026, 12, 1, 0, 0)).isoformat() == "2026-12-02T03:30:00+08:00"


# -- the scheduler with a controlled clock ----------------------------------------------------------


@pytest.fixture
def sched(services: Services, clock) -> Scheduler:
    services.store.ensure_agent("default")
    write_week(services)
    return services.scheduler


def dream_entries(services: Services) -> int:
    return services.store.read("default", "DREAMS.md").text.count(" Dreaming")


def test_next_runs_follow_the_settings(sched: Scheduler, clock) -> None:
    clock.set(at(2026, 12, 1, 1, 0))
    assert sched.next_runs() == {
        "dreaming": "2026-12-01T03:00:00+01:00",
        "structured_consolidation": "2026-12-01T03:30:00+01:00",
        "archive_rotation": "2026-12-01T03:45:00+01:00",
    }


def test_schedule_fires_at_the_configured_time_once(sched: Scheduler, services: Services, clock) -> None:
    clock.set(at(2026, 11, 30, 22, 0))
    assert sched.tick("dreaming") == []  # first sight: coverage starts now
    clock.set(at(2026, 12, 1, 2, 59, 59))
    assert sched.tick("dreaming") == []
    assert not services.store.read("default", "DREAMS.md").exists
    clock.set(at(2026, 12, 1, 3, 0, 0))
    ran = sched.tick("dreaming")
    assert [unit for unit, _ in ran] == ["dreaming:default"] and ran[0][1].startswith("done")
    assert "(rules mode, schedule)" in services.store.read("default", "DREAMS.md").text
    clock.set(at(2026, 12, 1, 3, 1))
    assert sched.tick_all() == []  # the heartbeat does not repeat it
    state = sched.job_state("dreaming:default")
    assert state["last_fire"] == "2026-12-01T03:00:00+01:00" and state["last_outcome"].startswith("done")
    assert dream_entries(services) == 1


def test_a_missed_run_is_caught_up_exactly_once_after_a_restart(services: Services, clock) -> None:
    services.store.ensure_agent("default")
    write_week(services)
    clock.set(at(2026, 11, 26, 23, 0))
    services.scheduler.tick_all()  # the daemon ran on the 26th, then the machine was off for days
    services.close()

    clock.set(at(2026, 12, 1, 9, 0))
    again = Services(services.settings, clock)  # a new daemon process, same workspace
    try:
        ran = again.scheduler.tick_all()
        assert [u for u, _ in ran if u.startswith("dreaming")] == ["dreaming:default"]
        assert "(rules mode, catch-up)" in again.store.read("default", "DREAMS.md").text
        assert again.scheduler.tick_all() == []
        clock.advance(minutes=5)  # the next heartbeat
        assert again.scheduler.tick_all() == []
        assert dream_entries(again) == 1
        clock.set(at(2026, 12, 2, 3, 0))  # and the next night runs normally
        assert [u for u, _ in again.scheduler.tick("dreaming")] == ["dreaming:default"]
    finally:
        again.close()


def test_a_wake_from_sleep_runs_once(sched: Scheduler, services: Services, clock) -> None:
    clock.set(at(2026, 11, 30, 23, 0))
    sched.tick_all()
    clock.set(at(2026, 12, 1, 7, 12))  # asleep from 23:00 to 07:12: the cron fire and the beats were missed
    results = sched.tick_all() + sched.tick("dreaming") + sched.tick_all()  # heartbeat + late cron fire + beat
    assert [u for u, _ in results if u.startswith("dreaming")] == ["dreaming:default"]
    assert dream_entries(services) == 1


def test_catch_up_off_records_the_miss_and_skips(sched: Scheduler, services: Services, clock) -> None:
    services.settings.dreaming.catch_up = False
    clock.set(at(2026, 11, 30, 23, 0))
    sched.tick_all()
    clock.set(at(2026, 12, 1, 9, 0))
    assert ("dreaming:default", "missed") in sched.tick_all()
    assert not services.store.read("default", "DREAMS.md").exists
    assert sched.job_state("dreaming:default")["last_outcome"].startswith("missed")


def test_structured_consolidation_and_rotation_jobs(sched: Scheduler, services: Services, clock) -> None:
    services.settings.mate.memory.dream.archive_keep_days = 10
    clock.set(at(2026, 11, 30, 23, 0))
    sched.tick_all()
    clock.set(at(2026, 12, 1, 3, 50))
    ran = dict(sched.tick_all())
    assert ran["structured_consolidation"].startswith("done")
    assert ran["archive_rotation:default"] == "done: 1 note(s) archived"
    assert not services.store.read("default", "memory/2026-11-15.md").exists


def test_real_background_scheduler_catches_up_at_start(services: Services, clock) -> None:
    """start() wires APScheduler: its first heartbeat runs right away and does the catch-up."""
    services.store.ensure_agent("default")
    write_week(services)
    clock.set(at(2026, 11, 26, 23, 0))
    sched = services.scheduler
    sched.tick_all()
    clock.set(at(2026, 12, 1, 9, 0))
    sched.start()
    try:
        assert sched.running
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            state = sched.job_state("dreaming:default") or {}
            if state.get("last_finished"):
                break
            time.sleep(0.05)
        assert (sched.job_state("dreaming:default") or {}).get("last_outcome", "").startswith("done")
    finally:
        sched.stop()
    assert not sched.running
    assert dream_entries(services) == 1
    assert services.dreaming.status("default")["next_run"] == "2026-12-02T03:00:00+01:00"



def test_with_owner_isolation_each_owner_dreams_on_schedule(tmp_path, clock) -> None:
    from mateclaw_mem.settings import load_settings
    from tests.test_dreaming import WEEK

    cfg = tmp_path / "iso.yaml"
    cfg.write_text("timezone: Europe/Berlin\nowner-isolation: true\n", encoding="utf-8")
    svc = Services(load_settings(cfg, tmp_path / "iso-ws"), clock)
    try:
        svc.store.ensure_agent("default")
        owner = "bench:alice"  # an AML-style key with ':' in it
        svc.store.ensure_agent("default", owner=owner)
        for when, title, body in WEEK:
            svc.store.append_daily("default", title, body, actor="extraction", when=when, owner=owner)
        clock.set(at(2026, 11, 30, 22, 0))
        assert svc.scheduler.tick("dreaming") == []  # first sight: coverage starts now
        clock.set(at(2026, 12, 1, 3, 0, 0))
        ran = dict(svc.scheduler.tick("dreaming"))
        assert set(ran) == {"dreaming:default", "dreaming:default:bench%3Aalice"}
        assert ran["dreaming:default:bench%3Aalice"].startswith("done")
        personal = svc.store.read("default", "MEMORY.md", owner=owner).text
        assert "Project Atlas deadline: December 15" in personal
        assert "Project Atlas" not in svc.store.read("default", "MEMORY.md").text  # nothing leaks to shared
    finally:
        svc.close()


def test_the_scheduler_runs_the_jobs_and_beats_it_is_handed(tmp_path, clock) -> None:
    """It knows no service (runtime/build/schedule.py hands it Job and Beat specs): a job runs once
    per due fire, a beat every heartbeat, and a failing beat stops neither the others nor the jobs."""
    from mateclaw_mem.runtime.scheduler import Beat, Job

    ran: list[tuple[str, str]] = []
    cron = "0 0 3 * * ?"
    job = Job("nightly", cron, cron_trigger(cron, TZ), lambda unit, why: ran.append((unit, why)) or "done",
              lambda: ["nightly"])
    beats = [Beat("broken", lambda: str(1 // 0), "broken beat failed"), Beat("count", lambda: "beat", "no count")]
    sched = Scheduler(tmp_path / "state.db", clock, [job], beats, catch_up=lambda: True)
    try:
        clock.set(at(2026, 12, 1, 2, 0))
        assert sched.tick_all() == [("count", "beat")]  # the job's first sight only starts its coverage
        clock.set(at(2026, 12, 1, 3, 5))
        assert sched.tick_all() == [("count", "beat"), ("nightly", "done")] and ran == [("nightly", "schedule")]
        assert sched.tick_all() == [("count", "beat")]  # that fire is covered: never run twice
        assert sched.job_state("nightly")["last_outcome"] == "done"
    finally:
        sched.close()
