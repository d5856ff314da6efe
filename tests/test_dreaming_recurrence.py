"""Rules-mode dreaming consolidates what recurs in meaning, not only in wording (issue 34.5): the same
profile key and value, the same claim rephrased, a correction taking an older claim's place; never a
one-off. And a night with nothing to look at stays out of DREAMS.md but for a line a week."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from mateclaw_mem.runtime.services import Services
from tests.conftest import TZ

AGENT = "default"
NIGHT = datetime(2026, 12, 1, 3, 0, tzinfo=TZ)


def note(services: Services, days_ago: int, body: str, *, title: str = "Chat", hour: int = 10,
         actor: str = "extraction") -> None:
    when = NIGHT - timedelta(days=days_ago)
    services.store.append_daily(AGENT, title, body, actor=actor, when=when.replace(hour=hour))


def recurring_lines(services: Services) -> list[str]:
    text = services.store.read(AGENT, "MEMORY.md").text
    if "## Recurring" not in text:
        return []
    section = text.split("## Recurring", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("- ")]


def lines_about(services: Services, *words: str) -> list[str]:
    return [line for line in recurring_lines(services) if all(w in line.lower() for w in words)]


def diary_entries(services: Services) -> list[str]:
    return re.findall(r"^## \d{4}-\d{2}-\d{2} \d{2}:\d{2} Dreaming.*$", diary(services), re.MULTILINE)


def diary(services: Services) -> str:
    snap = services.store.read(AGENT, "DREAMS.md")
    return snap.text if snap.exists else ""


def test_a_claim_rephrased_on_another_day_is_promoted(services: Services, clock) -> None:
    # Each pair says one thing twice: word order, case, punctuation, inflection and filler differ.
    note(services, 3, "- Prefers dark mode in the editor\n- Project Atlas ships on December 15\n"
                      "- Walks the dog Biscuit every evening")
    note(services, 1, "Dark mode is what the user always prefers in editors. December 15 is the ship date for "
                      "project atlas! Every evening the user walks Biscuit, the dog.", actor="person", title="Notes")
    clock.set(NIGHT)
    out = services.dreaming.dream(AGENT)
    assert out.status == "done", out.reason
    [dark] = lines_about(services, "dark mode")
    [atlas] = lines_about(services, "atlas", "december 15")
    [dog] = lines_about(services, "biscuit")
    for line in (dark, atlas, dog):  # one line each, sourced from both days
        assert "memory/2026-11-30.md 10:00" in line and "memory/2026-11-28.md 10:00" in line, line
    assert len(out.promoted) == 3


def test_a_one_off_stays_in_the_notes_even_beside_a_near_miss(services: Services, clock) -> None:
    # One value swapped in place is another claim: each deadline was said on one day only.
    note(services, 3, "- Project Atlas deadline: December 15")
    note(services, 1, "- Project Atlas deadline: December 20")
    # The same day twice (two sessions) is still one day.
    note(services, 2, "- Went to the LGBTQ support group", hour=9)
    note(services, 2, "- The user went to the LGBTQ support group", hour=18)
    # A negation on one side is another claim too.
    note(services, 3, "- User drinks coffee in the morning", hour=11)
    note(services, 1, "- User does not drink coffee in the morning", hour=11)
    clock.set(NIGHT)
    out = services.dreaming.dream(AGENT)
    assert out.status == "nothing_to_do", out.promoted
    assert recurring_lines(services) == []
    kept = "\n".join(out.kept)
    assert "December 15" in kept and "December 20" in kept and "support group" in kept


def test_the_same_key_and_value_in_other_words_is_promoted_once(services: Services, clock) -> None:
    note(services, 4, "- likes + hiking")  # extraction's profile change
    note(services, 2, "User loves hiking.", actor="person")
    note(services, 4, "- location: Berlin", hour=11)
    note(services, 2, "I live in Berlin these days.", hour=11, actor="person")
    clock.set(NIGHT)
    out = services.dreaming.dream(AGENT)
    assert out.status == "done", out.reason
    assert len(lines_about(services, "hiking")) == 1
    assert len(lines_about(services, "berlin")) == 1
    # The next nights bring the same claims in yet other words: nothing is promoted twice.
    note(services, 0, "I really like hiking. I live in Berlin.", actor="person")
    note(services, -1, "- likes: hiking\n- Caroline lives in Berlin", hour=9, actor="person")
    for night in (1, 2):
        clock.set(NIGHT + timedelta(days=night))
        again = services.dreaming.dream(AGENT)
        assert again.status == "nothing_to_do", again.promoted
    assert len(lines_about(services, "hiking")) == 1
    assert len(lines_about(services, "berlin")) == 1


def test_a_correction_supersedes_the_older_claim(services: Services, clock) -> None:
    note(services, 5, "- User prefers dark mode in the editor")
    note(services, 4, "- The user prefers dark mode in editors")
    note(services, 2, "- Actually, the user prefers light mode in the editor, not dark mode")
    # A one-value key given another value takes the old value's place as well.
    note(services, 5, "- employer: Acme", hour=11)
    note(services, 4, "I work at Acme.", hour=11, actor="person")
    note(services, 1, "- employer: Acme → Globex", hour=11)
    clock.set(NIGHT)
    out = services.dreaming.dream(AGENT)
    assert out.status == "done", out.reason
    lines = recurring_lines(services)
    assert not [line for line in lines if "dark mode" in line and "not dark mode" not in line], lines
    [light] = lines_about(services, "light mode")
    assert light.startswith("- Actually, the user prefers light mode in the editor, not dark mode (Source: "
                            "memory/2026-11-29.md")
    assert lines_about(services, "globex") and not lines_about(services, "acme")
    assert "correcting an earlier note" in out.reason
    kept = "\n".join(out.kept)
    assert "corrected later" in kept and "dark mode in editors" in kept


def test_a_night_with_nothing_to_look_at_writes_a_line_a_week_at_most(services: Services, clock) -> None:
    clock.set(NIGHT)
    first = services.dreaming.dream(AGENT, trigger="schedule")
    assert first.status == "nothing_to_do"
    assert len(diary_entries(services)) == 1  # the first quiet night says so, in two lines
    entry = services.dreaming.status(AGENT)["latest_entry"]
    assert entry.count("\n- ") == 2 and "no daily notes" in entry and first.run_id in entry
    for day in range(1, 7):  # the rest of the week: quiet nights, no entries ...
        clock.set(NIGHT + timedelta(days=day))
        out = services.dreaming.dream(AGENT, trigger="schedule")
        assert out.status == "nothing_to_do"
        assert services.dreaming.last_run(AGENT)["run_id"] == out.run_id  # ... but each run is recorded
    # A past night dreamt now (an imported history) is no quieter than the week around it.
    back = services.dreaming.dream(AGENT, as_of=(NIGHT - timedelta(days=3)).date())
    assert back.status == "nothing_to_do"
    assert len(diary_entries(services)) == 1
    assert services.dreaming.status(AGENT)["latest_entry"] == entry
    # A week after the last quiet entry, one more.
    clock.set(NIGHT + timedelta(days=7))
    services.dreaming.dream(AGENT, trigger="schedule")
    assert len(diary_entries(services)) == 2 and diary(services).count("no daily notes") == 2
    # A night that had something to look at is always written, quiet week or not.
    clock.set(NIGHT + timedelta(days=8))
    note(services, -8, "- Fixed a typo in the README")
    assert services.dreaming.dream(AGENT).status == "nothing_to_do"
    assert len(diary_entries(services)) == 3 and "Fixed a typo" in diary(services)
