"""Dreaming: evidence-scored candidates, rules/model consolidation, safety gates, diary, preview, undo."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.errors import BusyError
from mateclaw_mem.memory.dreaming import candidates as cand
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from tests.conftest import TZ
from tests.support.model_server import Answer

NIGHT = datetime(2026, 12, 1, 3, 0, tzinfo=TZ)

# A week of real daily notes (mixed English / Chinese), as extraction writes them.
# Recurring on >= 2 distinct days: Atlas deadline (3), dark mode (2), Sunday run (2), peanut allergy (2).
# One-offs: README typo, movie, light terminal theme. Lisbon weather and the Zephyr kickoff are said
# once in the window and once on 11-15, outside it: no recurring claim of the window, but a topic the
# person came back to 11 and 13 days later (topic threads read 30 days back, memory/dreaming/topics.py).
WEEK: list[tuple[datetime, str, str]] = [
    (datetime(2026, 11, 15, 18, 0, tzinfo=TZ), "Old chat",
     "- User asked about the weather in Lisbon\n- Project Zephyr kickoff is in January"),
    (datetime(2026, 11, 25, 9, 30, tzinfo=TZ), "Planning",
     "- Project Atlas deadline: December 15\n- User prefers dark mode in the editor"),
    (datetime(2026, 11, 26, 8, 10, tzinfo=TZ), "周末计划",
     "- 用户每周日早上去公园跑步\n- User asked about the weather in Lisbon"),
    (datetime(2026, 11, 27, 10, 0, tzinfo=TZ), "Standup", "- Project Atlas deadline: December 15\n- 用户对花生过敏"),
    (datetime(2026, 11, 27, 20, 0, tzinfo=TZ), "Evening", "- Fixed a typo in the README"),
    (datetime(2026, 11, 28, 14, 2, tzinfo=TZ), "Tools",
     "- The user prefers dark mode in editors\n- Project Zephyr kickoff is in January"),
    (datetime(2026, 11, 29, 9, 0, tzinfo=TZ), "跑步", "- 用户周日早上在公园跑步\n- 用户今天看了一部电影"),
    (datetime(2026, 11, 30, 21, 0, tzinfo=TZ), "Work",
     "- Project Atlas deadline: December 15\n- 提醒：用户对花生过敏\n- User uses a light theme in the terminal"),
]
RECURRING = ["Project Atlas deadline: December 15", "The user prefers dark mode in editors", "用户周日早上在公园跑步",
             "提醒：用户对花生过敏"]
ONE_OFFS = ["README", "电影", "light theme"]
THREADS = ['Weather / Lisbon (2026-11-15, 2026-11-26): "User asked about the weather in Lisbon"',
           'Zephyr (2026-11-15, 2026-11-28): "Project Zephyr kickoff is in January"']

MACHINE_MEMORY = """---
enabled: true
sort_order: 3
---
# MEMORY.md — long-term memory

## Work

- Works on Project Atlas with the platform team
- Standup is at 10:00 every weekday
- Uses Python 3.12 and uv

## Preferences

- Prefers short answers
- Likes concrete code examples
- 喜欢喝绿茶
"""  # 2 sections + 6 items = 8 entries


def write_week(services: Services) -> None:
    for when, title, body in WEEK:
        services.store.append_daily("default", title, body, actor="extraction", when=when)


def memory(services: Services) -> str:
    return services.store.read("default", "MEMORY.md").text


def diary(services: Services) -> str:
    return services.store.read("default", "DREAMS.md").text


@pytest.fixture
def night(services: Services, clock) -> Services:
    services.store.ensure_agent("default")
    write_week(services)
    clock.set(NIGHT)
    return services


@pytest.fixture
def model_services(tmp_path: Path, workspace: Path, clock, model_settings_overrides, monkeypatch):
    for key in [k for k in __import__("os").environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key, raising=False)
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    settings = load_settings(cfg, workspace, overrides=model_settings_overrides)
    svc = Services(settings, clock)
    svc.store.ensure_agent("default")
    write_week(svc)
    clock.set(NIGHT)
    yield svc
    svc.close()


def set_machine_memory(services: Services, text: str = MACHINE_MEMORY) -> str:
    snap = services.store.read("default", "MEMORY.md")
    services.store.write("default", "MEMORY.md", text, expected_sha=snap.sha, actor="extraction")
    return services.store.read("default", "MEMORY.md").text


# -- candidates and scoring ------------------------------------------------------------------------


def test_candidates_are_recent_daily_sections_newest_first_and_bounded(night: Services) -> None:
    found, looked_at = cand.collect(night.store, "default", owner=None, today=NIGHT.date(), day_range=7, limit=100)
    assert looked_at[0] == "memory/2026-11-30.md" and looked_at[-1] == "memory/2026-11-25.md"
    assert "memory/2026-11-15.md" not in looked_at  # outside emergence-day-range
    assert found[0].heading == "21:00 Work" and found[-1].heading == "09:30 Planning"
    assert [c.heading for c in found if c.day == datetime(2026, 11, 27).date()] == ["20:00 Evening", "10:00 Standup"]
    capped, _ = cand.collect(night.store, "default", owner=None, today=NIGHT.date(), day_range=7, limit=3)
    assert [c.heading for c in capped] == ["21:00 Work", "09:00 跑步", "14:02 Tools"]
    # DREAMS.md and archives are never input, even when they exist.
    night.store.write("default", "DREAMS.md", "# d\n\n## 2026-11-30 03:00 Dreaming\n\n- Project Atlas\n",
                      expected_sha="", actor="dreaming")
    again, _ = cand.collect(night.store, "default", owner=None, today=NIGHT.date(), day_range=7, limit=100)
    assert {c.rel for c in again} == {c.rel for c in found}


def test_clustering_joins_rephrasings_and_keeps_near_misses_apart(night: Services) -> None:
    found, _ = cand.collect(night.store, "default", owner=None, today=NIGHT.date(), day_range=7, limit=100)
    scored = cand.score(found, today=NIGHT.date())
    by_text = {k.text: k for k in scored.clusters}
    assert len(by_text["Project Atlas deadline: December 15"].days) == 3
    assert len(by_text["The user prefers dark mode in editors"].days) == 2
    assert len(by_text["用户周日早上在公园跑步"].days) == 2
    assert len(by_text["提醒：用户对花生过敏"].days) == 2
    assert len(by_text["User uses a light theme in the terminal"].days) == 1  # not merged with dark mode
    top = scored.candidates[0]
    assert top.candidate.heading == "21:00 Work" and top.days == 3
    one_off = next(s for s in scored.candidates if s.candidate.heading == "20:00 Evening")
    assert one_off.days == 1 and one_off.score < top.score


# -- rules mode -------------------------------------------------------------------------------------


def test_rules_dream_promotes_recurring_facts_and_none_of_the_one_offs(night: Services) -> None:
    out = night.dreaming.dream("default")
    assert out.status == "done", out.reason
    assert out.run_id == "dream-default-20261201T030000"
    text = memory(night)
    recurring_section = text.split("## Recurring", 1)[1]
    for fact in RECURRING:
        assert fact in recurring_section
    for word in ONE_OFFS:
        assert word not in text
    atlas = next(line for line in text.splitlines() if "Atlas deadline" in line)
    assert "Source: memory/2026-11-30.md 21:00; memory/2026-11-27.md 10:00; memory/2026-11-25.md 09:30" in atlas
    lisbon, zephyr = (next(line for line in text.splitlines() if thread in line) for thread in THREADS)
    assert "(Source: memory/2026-11-26.md 08:10; memory/2026-11-15.md 18:00 · dreamed 2026-12-01)" in lisbon
    assert "(Source: memory/2026-11-28.md 14:02; memory/2026-11-15.md 18:00 · dreamed 2026-12-01)" in zephyr
    assert len(out.promoted) == 6 and out.lines_added >= 6 and out.lines_removed == 0
    entry = diary(night)
    assert "## 2026-12-01 03:00 Dreaming" in entry
    assert "- Outcome: **done**" in entry and "### Candidates" in entry and "### Promoted" in entry
    kept = entry.split("### Kept for next time")[1]
    assert "Fixed a typo in the README (memory/2026-11-27.md 20:00, 1 day)" in kept
    assert "User uses a light theme in the terminal" in kept and "Atlas" not in kept
    assert "3 days" in entry and "+" in entry and "Reason: promoted 4 facts" in entry
    # The diary is not injected into prompts.
    assert night.store.read("default", "DREAMS.md").text.startswith("---\nenabled: false\n---\n")

    # Nothing new the next night: what is already in MEMORY.md is not promoted again.
    again = night.dreaming.dream("default")
    assert again.status == "nothing_to_do"
    assert "already in MEMORY.md" in again.reason
    assert memory(night) == text
    assert diary(night).count(" Dreaming") == 2


def test_focused_dream_weights_and_limits_to_the_topic(night: Services) -> None:
    out = night.dreaming.dream("default", topic="跑步")
    assert out.status == "done"
    assert out.promoted and all("跑步" in p for p in out.promoted)
    assert out.candidates[0]["heading"] == "09:00 跑步"
    assert "## 2026-12-01 03:00 Dreaming [FOCUSED: 跑步]" in diary(night)
    assert "Atlas" not in memory(night)
    assert "## 反复出现" in memory(night)  # the person's language for the new section


def test_retrieval_hits_are_evidence(night: Services) -> None:
    result = night.search.search("weather in Lisbon", agent="default")
    assert any(h.file == "memory/2026-11-26.md" for h in result.hits)
    out = night.dreaming.dream("default", preview=True)
    lisbon = next(c for c in out.candidates if c["heading"] == "08:10 周末计划")
    typo = next(c for c in out.candidates if c["heading"] == "20:00 Evening")
    assert lisbon["hits"] >= 1 and typo["hits"] == 0
    # Evidence raises the score, recurrence decides promotion: Lisbon only as the thread of its two days.
    assert "Lisbon" not in "".join(out.promoted).replace(THREADS[0], "")


# -- outcomes and the diary -------------------------------------------------------------------------


def test_every_outcome_gets_a_diary_entry(services: Services, clock) -> None:
    services.store.ensure_agent("default")
    clock.set(NIGHT)
    nothing = services.dreaming.dream("default")
    assert nothing.status == "nothing_to_do" and "no daily-note sections" in nothing.reason
    services.settings.mate.memory.emergence_enabled = False
    skipped = services.dreaming.dream("default")
    assert skipped.status == "skipped"
    text = diary(services)
    assert text.count("Dreaming") >= 2
    assert "- Outcome: **nothing to do**" in text and "- Outcome: **skipped**" in text
    assert "emergence-enabled: false" in text


def test_diary_cap_moves_oldest_entries_to_monthly_archives(night: Services, clock) -> None:
    night.settings.dreaming.diary_max_chars = 2500
    night.dreaming.diary.max_chars = 2500
    clock.set(datetime(2026, 11, 30, 3, 0, tzinfo=TZ))
    runs = [night.dreaming.dream("default").run_id]
    for _ in range(4):
        clock.advance(hours=24)
        runs.append(night.dreaming.dream("default").run_id)
    current = diary(night)
    archive_nov = night.store.read("default", "memory/dreams/2026-11.md").text
    archive_dec = night.store.read("default", "memory/dreams/2026-12.md")
    all_text = current + archive_nov + (archive_dec.text if archive_dec.exists else "")
    for run_id in runs:
        assert all_text.count(f"`{run_id}`") == 1  # archived, never lost, never twice
    assert f"`{runs[-1]}`" in current and f"`{runs[0]}`" in archive_nov
    assert len(current) <= 2500 or current.count(" Dreaming") == 1


# -- model mode and the safety gates ----------------------------------------------------------------


def test_model_dream_rewrites_memory_and_undo_restores_byte_for_byte(model_services: Services, model_server) -> None:
    before = set_machine_memory(model_services)
    new_body = MACHINE_MEMORY.split("---\n", 2)[2] + "\n## Recurring\n\n- Project Atlas deadline: December 15\n"
    model_server.reply_json({"should_update": True, "reason": "Atlas deadline recurred 3 times",
                             "memory_content": new_body})
    out = model_services.dreaming.dream("default")
    assert out.status == "done", out.reason
    assert "Project Atlas deadline: December 15" in memory(model_services)
    assert out.promoted == ["Project Atlas deadline: December 15"]
    req = model_server.chat_requests[0]
    assert "score" in req.prompt_text and "memory/2026-11-30.md 21:00 Work" in req.prompt_text
    assert "memory/2026-11-15.md" not in req.prompt_text
    assert "Reason: Atlas deadline recurred 3 times" in diary(model_services)
    # The dream's model turn never reaches the conversation log (so it can never trigger extraction).
    assert model_services.log.since(0) == []

    model_services.store.undo_batch(out.run_id)
    assert model_services.store.read("default", "MEMORY.md").path.read_bytes() == before.encode("utf-8")


def test_model_said_no_change_is_nothing_to_do(model_services: Services, model_server) -> None:
    before = set_machine_memory(model_services)
    model_server.reply_json({"should_update": False, "reason": "nothing new", "memory_content": ""})
    out = model_services.dreaming.dream("default")
    assert out.status == "nothing_to_do" and out.reason == "nothing new"
    assert memory(model_services) == before
    assert "- Outcome: **nothing to do**" in diary(model_services)


def test_loss_gate_rejects_a_destructive_rewrite(model_services: Services, model_server) -> None:
    before = set_machine_memory(model_services)
    model_server.reply_json({"should_update": True, "reason": "tidied up",
                             "memory_content": "# MEMORY.md\n\n## Work\n\n- Works on Project Atlas\n"})
    out = model_services.dreaming.dream("default")
    assert out.status == "rejected"
    assert "drop" in out.reason and "of 8 entries" in out.reason
    assert memory(model_services) == before
    entry = diary(model_services)
    assert "- Outcome: **rejected**" in entry and "tidied up" in entry


def test_small_drop_is_archived_before_the_rewrite(model_services: Services, model_server) -> None:
    before = set_machine_memory(model_services)
    body = MACHINE_MEMORY.split("---\n", 2)[2].replace("- Prefers short answers\n", "")
    model_server.reply_json({"should_update": True, "reason": "dropped an outdated preference",
                             "memory_content": body})
    out = model_services.dreaming.dream("default")
    assert out.status == "done", out.reason
    assert out.archived == ["memory/archive/MEMORY-2026-12-01.md"]
    archive = model_services.store.read("default", "memory/archive/MEMORY-2026-12-01.md").text
    assert "- Prefers short answers" in archive and out.run_id in archive
    model_services.store.undo_batch(out.run_id)
    assert memory(model_services) == before
    assert not model_services.store.read("default", "memory/archive/MEMORY-2026-12-01.md").exists


def test_failed_model_leaves_memory_untouched(model_services: Services, model_server) -> None:
    before = set_machine_memory(model_services)
    for _ in range(3):  # max_retries 2: three attempts
        model_server.server_error(503)
    out = model_services.dreaming.dream("default")
    assert out.status == "failed" and out.error_kind == "server" and out.error_code == "model"
    assert memory(model_services) == before
    assert "- Outcome: **failed**" in diary(model_services)


def test_pinned_and_hand_edited_sections_survive_a_rewrite(model_services: Services, model_server) -> None:
    set_machine_memory(model_services, MACHINE_MEMORY)
    snap = model_services.store.read("default", "MEMORY.md")
    # Only a person pins: the pinned section is the person's own addition.
    edited = snap.text + "\n## Family\n<!-- pin -->\n- Sister: Ana\n"
    edited = edited.replace("- Standup is at 10:00 every weekday", "- Standup is at 09:30 every weekday")
    model_services.store.write("default", "MEMORY.md", edited, expected_sha=snap.sha, actor="person")
    rewrite = MACHINE_MEMORY.split("---\n", 2)[2].replace("- Standup is at 10:00 every weekday\n", "- Standup daily\n")
    rewrite = rewrite.replace("- Likes concrete code examples", "- Likes concrete, runnable code examples")
    model_server.reply_json({"should_update": True, "reason": "merged", "memory_content": rewrite})
    out = model_services.dreaming.dream("default")
    assert out.status == "done", out.reason
    text = memory(model_services)
    assert "- Standup is at 09:30 every weekday" in text and "Standup daily" not in text  # hand edit kept
    assert "## Family\n<!-- pin -->\n- Sister: Ana\n" in text  # pin kept
    assert "- Likes concrete, runnable code examples" in text  # the machine section was rewritten


def test_concurrent_person_edit_wins_and_the_dream_retries_once(model_services: Services, model_server) -> None:
    set_machine_memory(model_services)
    store = model_services.store
    answer = MACHINE_MEMORY.split("---\n", 2)[2] + "\n## Recurring\n\n- Project Atlas deadline: December 15\n"
    calls = []

    def responder(body: dict) -> Answer:
        calls.append(body)
        if len(calls) == 1:  # the person saves while the model is thinking
            snap = store.read("default", "MEMORY.md")
            store.write("default", "MEMORY.md", snap.text + "\n## Mine\n\n- I moved to Porto\n",
                        expected_sha=snap.sha, actor="person")
        return Answer(content={"should_update": True, "reason": "added Atlas", "memory_content": answer})

    model_server.responder = responder
    out = model_services.dreaming.dream("default")
    assert out.status == "done", out.reason
    assert len(calls) == 2
    assert "I moved to Porto" in str(calls[1]["messages"]) and "edited by the person" in str(calls[1]["messages"])
    text = memory(model_services)
    assert "## Mine\n\n- I moved to Porto\n" in text and "Project Atlas deadline: December 15" in text


def test_manual_run_during_a_scheduled_run_is_busy(model_services: Services, model_server) -> None:
    set_machine_memory(model_services)
    arrived, release = threading.Event(), threading.Event()
    answer = {"should_update": False, "reason": "nothing new", "memory_content": ""}

    def slow(body: dict) -> Answer:
        arrived.set()
        release.wait(10)
        return Answer(content=answer)

    model_server.responder = slow
    results = {}
    scheduled = threading.Thread(
        target=lambda: results.setdefault("out", model_services.dreaming.dream("default", trigger="schedule")))
    scheduled.start()
    try:
        assert arrived.wait(10)
        with pytest.raises(BusyError):
            model_services.dreaming.dream("default")
        assert model_services.dreaming.status("default")["running"] is True
    finally:
        release.set()
        scheduled.join(10)
    assert results["out"].status == "nothing_to_do"
    assert len(model_server.chat_requests) == 1  # never a double run
    text = diary(model_services)
    assert "- Outcome: **skipped**" in text and "already in progress" in text


def test_lock_is_held_across_threads(night: Services) -> None:
    with night.dreaming.lock("default"):
        errors = []
        t = threading.Thread(target=lambda: _try(night, errors))
        t.start()
        t.join(10)
        assert errors and isinstance(errors[0], BusyError)
    assert night.dreaming.dream("default").status == "done"  # free again afterwards


def test_status_probes_never_see_each_other_nor_turn_a_dream_away(night: Services) -> None:
    # A status probe once took the run lock itself: two at once saw each other as a run, and a dream
    # starting during one was refused (scripts/bench/deferred_routes_races.py).
    seen: list[bool] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            seen.append(night.dreaming.status("default")["running"])

    def probing(work: Callable[[], Any]) -> Any:
        stop.clear()
        probes = [threading.Thread(target=probe) for _ in range(6)]
        for t in probes:
            t.start()
        try:
            return work()
        finally:
            stop.set()
            for t in probes:
                t.join(10)

    probing(lambda: time.sleep(0.3))
    assert len(seen) > 100 and not any(seen)  # no run: no probe ever saw one
    outcomes = probing(lambda: [night.dreaming.dream("default").status for _ in range(10)])
    assert outcomes[0] == "done" and set(outcomes[1:]) <= {"done", "nothing_to_do"}  # never refused as busy


def test_a_run_in_another_process_is_running_and_a_probe_of_one_is_waited_out(night: Services) -> None:
    from filelock import FileLock

    path = night.dreaming._locks("default", None)[1].lock_file
    other = FileLock(path, thread_local=False)  # its own descriptor, as another process has; released by a timer
    with other:
        assert night.dreaming.status("default")["running"] is True
        with pytest.raises(BusyError, match="in another process"):
            night.dreaming.dream("default")
    assert night.dreaming.status("default")["running"] is False
    # Held for 50 ms, as a probe elsewhere holds it for microseconds: the run waits it out.
    other.acquire()
    release = threading.Timer(0.05, other.release)
    release.start()
    try:
        assert night.dreaming.dream("default").status == "done"
    finally:
        release.join(10)


def _try(services: Services, errors: list) -> None:
    try:
        services.dreaming.dream("default")
    except BusyError as exc:
        errors.append(exc)


# -- preview, status, CLI ---------------------------------------------------------------------------


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.endswith((".db", ".db-wal", ".db-shm", ".lock"))}


def test_preview_returns_the_diff_and_writes_nothing(night: Services) -> None:
    before = _tree(night.settings.workspace)
    out = night.dreaming.dream("default", preview=True)
    assert out.status == "preview" and out.would_change
    assert "+- Project Atlas deadline: December 15" in out.diff and out.lines_added >= 4
    assert _tree(night.settings.workspace) == before
    assert night.dreaming.last_run("default") is None


def test_status_reports_last_run_next_run_and_latest_entry(night: Services) -> None:
    assert night.dreaming.status("default")["last_run"] is None
    out = night.dreaming.dream("default")
    st = night.dreaming.status("default")
    assert st["last_run"]["run_id"] == out.run_id and st["last_run"]["outcome"] == "done"
    assert st["next_run"] == "2026-12-02T03:00:00+01:00"
    assert st["latest_entry"].startswith("## 2026-12-01 03:00 Dreaming")
    assert st["running"] is False
    from mateclaw_mem.runtime.status import collect

    assert collect(night)["dreaming"]["agents"]["default"]["outcome"] == "done"


def test_cli_dream_exit_codes(tmp_path: Path, monkeypatch) -> None:
    from mateclaw_mem.cli.main import main
    from mateclaw_mem.clock import SystemClock
    from mateclaw_mem.workspace.store import WorkspaceStore

    for key in [k for k in __import__("os").environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key, raising=False)
    ws = tmp_path / "ws"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    common = ["--workspace", str(ws), "--config", str(cfg)]
    assert main(["init", *common]) == 0
    assert main(["dream", "default", *common]) == 10  # no daily notes: nothing to do
    store = WorkspaceStore(ws, clock=SystemClock(TZ))
    now = store.clock.now()
    for days, text in ((1, "- Project Atlas deadline: December 15"), (2, "- Project Atlas deadline: December 15")):
        store.append_daily("default", "Work", text, actor="extraction", when=now - timedelta(days=days))
    assert main(["dream", "default", "--preview", *common]) == 0
    assert "Atlas" not in (ws / "default" / "MEMORY.md").read_text(encoding="utf-8")
    settings = load_settings(cfg, ws)
    holder = Services(settings)
    try:
        with holder.dreaming.lock("default"):
            assert main(["dream", "default", *common]) == 5  # busy
    finally:
        holder.close()
    assert main(["dream", "default", *common]) == 0
    assert "Atlas" in (ws / "default" / "MEMORY.md").read_text(encoding="utf-8")
    assert main(["dream", "default", *common]) == 10  # already promoted


# -- archive rotation -------------------------------------------------------------------------------


def test_rotation_archives_old_daily_notes_and_can_be_undone(night: Services) -> None:
    old = night.store.read("default", "memory/2026-11-15.md").text
    assert night.settings.mate.memory.dream.archive_keep_days == 30
    night.settings.mate.memory.dream.archive_keep_days = 10
    result = night.dreaming.rotate("default")
    assert result["daily_notes_archived"] == ["memory/2026-11-15.md"]
    assert not night.store.read("default", "memory/2026-11-15.md").exists
    from mateclaw_mem.workspace import month_archive

    archive = month_archive.read_month(night.store, "default", "2026-11")
    assert archive is not None and "User asked about the weather in Lisbon" in dict(archive.texts())[
        "memory/2026-11-15.md"]
    assert night.dreaming.rotate("default")["daily_notes_archived"] == []  # idempotent
    batch = night.store.history("default", "memory/2026-11-15.md")[-1].batch
    assert batch and batch.startswith("rotate-default-")
    night.store.undo_batch(batch)
    assert night.store.read("default", "memory/2026-11-15.md").text == old


def test_cli_dream_model_failure_exits_7(tmp_path: Path, monkeypatch, model_server) -> None:
    from mateclaw_mem.cli.main import main
    from mateclaw_mem.clock import SystemClock
    from mateclaw_mem.workspace.store import WorkspaceStore

    for key in [k for k in __import__("os").environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key, raising=False)
    ws = tmp_path / "ws"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"timezone: Europe/Berlin\nmodel:\n  base-url: {model_server.base_url}\n  model: test-model\n"
                   "  max-retries: 0\n  timeout-seconds: 5\n", encoding="utf-8")
    common = ["--workspace", str(ws), "--config", str(cfg)]
    assert main(["init", *common]) == 0
    store = WorkspaceStore(ws, clock=SystemClock(TZ))
    store.append_daily("default", "Work", "- Project Atlas deadline: December 15", actor="extraction")
    before = (ws / "default" / "MEMORY.md").read_bytes()
    model_server.server_error(500)
    assert main(["dream", "default", *common]) == 7
    assert (ws / "default" / "MEMORY.md").read_bytes() == before


def test_an_unreadable_daily_note_is_skipped_and_named_not_fatal(night: Services) -> None:
    bad = night.store.path("default", "memory/2026-12-01.md")
    bad.write_bytes(b"caf\xe9 written by a latin-1 editor\n")
    out = night.dreaming.dream("default")
    assert out.status == "done"
    assert "memory/2026-12-01.md (skipped: memory/2026-12-01.md is not UTF-8" in diary(night)
    assert bad.read_bytes() == b"caf\xe9 written by a latin-1 editor\n"


# -- answers as edits, checked for meaning (issue 20) -----------------------------------------------------


def test_model_dream_edits_change_only_the_lines_they_name(model_services: Services, model_server) -> None:
    before = set_machine_memory(model_services)
    model_server.reply_json({"should_update": True, "reason": "recurring facts", "edits": [
        {"op": "add", "section": "Preferences", "text": "Prefers dark mode in editors",
         "evidence": ["2026-11-25", "2026-11-28"]},
        {"op": "update", "old": "Standup is at 10:00 every weekday", "text": "Standup is at 10:00 on weekdays",
         "evidence": ["memory/2026-11-27.md"]},
    ]})
    out = model_services.dreaming.dream("default")
    assert out.status == "done", out.reason
    after = memory(model_services)
    expected = before.replace("- Standup is at 10:00 every weekday", "- Standup is at 10:00 on weekdays").replace(
        "- 喜欢喝绿茶\n", "- 喜欢喝绿茶\n- Prefers dark mode in editors\n")
    assert after == expected
    assert out.dropped == ["- Standup is at 10:00 every weekday"]  # the old wording is archived, not lost
    # The answer asked for is edits, not the file written back.
    assert '"edits"' in model_server.chat_requests[0].body["messages"][0]["content"]


@pytest.mark.parametrize(
    "bad",
    [
        {"should_update": True, "reason": "x", "memory_content": "...\n...\n"},
        {"should_update": True, "reason": "x", "edits": [{"op": "add", "text": "...", "evidence": ["2026-11-25"]}]},
        {"should_update": True, "reason": "x", "edits": [{"op": "add", "text": "<one line>",
                                                          "evidence": ["<YYYY-MM-DD>"]}]},
        {"should_update": True, "reason": "x", "edits": [{"op": "add", "text": "Moved to Mars",
                                                          "evidence": ["2025-01-01"]}]},
    ],
    ids=["dots-body", "dots-edit", "echoed-example", "evidence-not-shown"],
)
def test_model_dream_placeholders_and_unfounded_edits_are_refused(model_services: Services, model_server,
                                                                  bad: dict) -> None:
    before = set_machine_memory(model_services)
    model_server.reply_json(bad)
    model_server.reply_json(bad)
    out = model_services.dreaming.dream("default")
    assert out.status == "failed" and out.error_kind == "invalid_output", out
    assert memory(model_services) == before
    assert "Your previous answer could not be used" in model_server.chat_requests[1].prompt_text


def test_a_placeholder_reason_never_reaches_the_diary(model_services: Services, model_server) -> None:
    set_machine_memory(model_services)
    model_server.reply_json({"should_update": False, "reason": "..."})
    out = model_services.dreaming.dream("default")
    assert out.status == "nothing_to_do"
    assert "- Reason: ..." not in diary(model_services)
