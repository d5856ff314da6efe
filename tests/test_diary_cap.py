"""DREAMS.md stays within `dreaming.diary-max-chars` (issue 38.5: 1,967 chars against a 1,500 cap):
the summary of archived months shortens to fit, and an entry too big for the cap is archived whole
like the others. Nothing is lost or kept twice. Real files through the store."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from mateclaw_mem.memory.dreaming.diary import Diary, DiaryEntry
from mateclaw_mem.workspace.store import WorkspaceStore
from tests.conftest import TZ

CAP = 1500


def entry(i: int, when: datetime, facts: int, kept: int = 0) -> DiaryEntry:
    return DiaryEntry(when, "done", "promoted what recurred", f"dream-{i:03d}", looked_at=["memory/2026-01-01.md"],
                      sections=5, memory_chars=800, added=facts,
                      promoted=[f"fact {i}.{k} about the person and their long running project" for k in range(facts)],
                      kept=[f"note {i}.{k} seen once, kept for another night" for k in range(kept)])


def everything(store: WorkspaceStore) -> str:
    files = store.list_files("default", prefix="memory/dreams/")
    return store.read("default", "DREAMS.md").text + "".join(store.read("default", f.rel).text for f in files)


def test_months_of_nightly_entries_never_take_the_diary_over_its_cap(store: WorkspaceStore) -> None:
    diary = Diary(store, max_chars=CAP)
    when = datetime(2026, 1, 1, 3, 0, tzinfo=TZ)
    sizes, runs = [], []
    for i in range(40):  # ~700-char entries every third night: four months, a summary line each
        e = entry(i, when, 3 + i % 5)
        diary.append("default", e)
        runs.append(e.run_id)
        sizes.append(len(store.read("default", "DREAMS.md").text))
        when += timedelta(days=3)
    assert max(sizes) <= CAP, sizes
    text = store.read("default", "DREAMS.md").text
    assert f"`{runs[-1]}`" in text  # the newest entry fits, so it stays
    kept = everything(store)
    assert all(kept.count(f"`{r}`") == 1 for r in runs)  # in the diary or an archive, once


def test_an_entry_too_big_for_the_cap_is_archived_whole_and_the_summary_names_its_file(
        store: WorkspaceStore) -> None:
    diary = Diary(store, max_chars=CAP)
    when = datetime(2026, 3, 5, 3, 0, tzinfo=TZ)
    diary.append("default", entry(1, when, 2))
    big = entry(2, when + timedelta(days=1), 20)  # the 20 promoted lines alone are ~1,300 chars
    assert len(big.render()) > CAP // 2
    diary.append("default", big)
    diary.append("default", huge := entry(3, when + timedelta(days=2), 20, kept=20))
    assert len(huge.render()) > CAP
    text = store.read("default", "DREAMS.md").text
    assert len(text) <= CAP
    assert "`memory/dreams/2026-03.md`" in text and re.search(r"- \*\*2026-03\*\* — 3 runs", text)
    assert huge.render().rstrip("\n") in store.read("default", "memory/dreams/2026-03.md").text
    assert all(everything(store).count(f"`dream-{i:03d}`") == 1 for i in (1, 2, 3))
