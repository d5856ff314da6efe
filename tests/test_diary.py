"""DREAMS.md's growth cap: old entries move to monthly archives and one summary stays in their place."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.sections import split_sections
from mateclaw_mem.memory.dreaming.diary import SUMMARY_MONTHS, Diary, DiaryEntry
from mateclaw_mem.workspace.store import WorkspaceStore
from tests.conftest import TZ

START = datetime(2026, 9, 28, 3, 0, tzinfo=TZ)


def entry(i: int, when: datetime) -> DiaryEntry:
    # Every third run is skipped, the others promote i % 4 facts (shown in full up to 20).
    if i % 3 == 2:
        return DiaryEntry(when, "skipped", "emergence-enabled: false", f"dream-{i:03d}")
    promoted = [f"fact {i}.{k} recurred on 2 days" for k in range(i % 4)]
    return DiaryEntry(when, "done" if promoted else "nothing_to_do", "recurring facts", f"dream-{i:03d}",
                      looked_at=["memory/2026-09-27.md"], sections=3, promoted=promoted, added=len(promoted))


def diary_text(store: WorkspaceStore) -> str:
    return store.read("default", "DREAMS.md").text


def archives(store: WorkspaceStore) -> dict[str, str]:
    return {f.rel: store.read("default", f.rel).text for f in store.list_files("default", prefix="memory/dreams/")}


def write_runs(store: WorkspaceStore, diary: Diary, n: int, *, start: datetime = START) -> list[DiaryEntry]:
    runs = [entry(i, start + timedelta(days=i)) for i in range(n)]
    for e in runs:
        diary.append("default", e)
    return runs


def summaries(text: str) -> list[str]:
    return [s.text for s in split_sections(frontmatter.body(text))[1] if s.title == "Archived dreams"]


def test_archived_entries_leave_one_summary_with_runs_dates_outcomes_and_the_file(store: WorkspaceStore) -> None:
    diary = Diary(store, max_chars=2500)
    runs = write_runs(store, diary, 9)  # 2026-09-28 … 2026-10-06: two months
    text = diary_text(store)
    archived = archives(store)
    moved = [e for e in runs if f"`{e.run_id}`" not in text]
    assert moved and f"`{runs[-1].run_id}`" in text
    for e in moved:  # each one whole, in its month's archive
        assert e.render().rstrip("\n") in archived[f"memory/dreams/{e.when:%Y-%m}.md"]
    [summary] = summaries(text)
    # The summary sits where the old entries were: before the entries still in the diary.
    sections = split_sections(frontmatter.body(text))[1]
    assert sections[0].title == "Archived dreams" and len(text) <= 2500
    months = {e.when.strftime("%Y-%m") for e in moved}
    for month in months:
        mine = [e for e in moved if e.when.strftime("%Y-%m") == month]
        days = sorted(e.when.strftime("%Y-%m-%d") for e in mine)
        span = f"{days[0]} … {days[-1]}" if len(days) > 1 else days[0]
        line = next(ln for ln in summary.splitlines() if ln.startswith(f"- **{month}**"))
        assert f"{len(mine)} run{'s' if len(mine) != 1 else ''} ({span})" in line, line
        assert f"{sum(len(e.promoted) for e in mine)} fact" in line and f"`memory/dreams/{month}.md`" in line
        skipped = sum(e.outcome == "skipped" for e in mine)
        assert (f"{skipped} skipped" in line) == bool(skipped), line
    if len(months) > 1:
        assert f"- In all: {len(moved)} runs" in summary


def test_repeated_archiving_updates_the_one_summary_and_loses_nothing(store: WorkspaceStore) -> None:
    diary = Diary(store, max_chars=3000)
    runs = write_runs(store, diary, 60)  # two months of nightly runs, archived night after night
    text = diary_text(store)
    assert len(summaries(text)) == 1 and text.count("\n## Archived dreams\n") == 1
    archived = archives(store)
    everything = text + "".join(archived.values())
    for e in runs:
        assert everything.count(f"`{e.run_id}`") == 1, e.run_id  # in the diary or an archive, once
    # The summary counts exactly what the archives hold.
    in_archives = sum(len(re.findall(r"^## \d{4}-\d{2}-\d{2} \d{2}:\d{2} Dreaming", t, re.M)) for t in archived.values())
    [summary] = summaries(text)
    assert f"- In all: {in_archives} runs" in summary
    promoted = sum(len(e.promoted) for e in runs if f"`{e.run_id}`" not in text)
    assert f"; {promoted} facts promoted" in summary.rstrip().splitlines()[-1]
    assert diary.latest("default") is not None and f"`{runs[-1].run_id}`" in diary.latest("default")
    assert all(s.title != "Archived dreams" for s in diary.entries("default"))


def test_the_summary_stays_bounded_as_months_go_by(store: WorkspaceStore) -> None:
    diary = Diary(store, max_chars=2500)
    start = datetime(2025, 1, 15, 3, 0, tzinfo=TZ)
    for month in range(SUMMARY_MONTHS + 6):  # one run a month, each archived by the next
        when = start.replace(year=2025 + (month // 12), month=month % 12 + 1)
        diary.append("default", entry(month, when))
        diary.append("default", entry(month + 100, when + timedelta(days=1)))
    [summary] = summaries(diary_text(store))
    month_lines = [ln for ln in summary.splitlines() if ln.startswith("- **")]
    assert len(month_lines) <= SUMMARY_MONTHS + 1  # the newest months, then one line for the rest
    assert month_lines[0].startswith("- **2025-01 … ") and month_lines[0].endswith("→ `memory/dreams/`")
    assert len(archives(store)) >= SUMMARY_MONTHS + 1


def test_a_pinned_summary_is_left_as_the_person_wrote_it(store: WorkspaceStore) -> None:
    diary = Diary(store, max_chars=2500)
    write_runs(store, diary, 9)
    snap = store.read("default", "DREAMS.md")
    [old] = summaries(snap.text)
    mine = old.replace("## Archived dreams\n", "## Archived dreams\n<!-- pin -->\nMy own words.\n", 1)
    store.write("default", "DREAMS.md", snap.text.replace(old, mine), expected_sha=snap.sha, actor="person")
    runs = write_runs(store, diary, 6, start=START + timedelta(days=10))
    text = diary_text(store)
    assert summaries(text) == [mine]
    assert any(f"`{e.run_id}`" in "".join(archives(store).values()) for e in runs)  # archiving went on
