"""The prompt's recall, end to end over HTTP (issue 34, points 1-3): turns carry their own time, the
recalled block draws whole earlier messages from the message index with the day they were said and
who said it, relative dates resolved beside the words, its budget filled; memoryless conversations and
the dream diary's archives never recalled; `dream` runs the night of a given date."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import httpx
import pytest

from mateclaw_mem.markdown.dates import dated_label, day_label, resolve_relative
from mateclaw_mem.memory.context.recall import RECALLED_TITLE
from tests.support.server import daemon_services, serve_api

API = "/api/v1/memory/default"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path / "ws", mcp=False, timezone="UTC",
                         mate={"memory": {"cooldown-minutes": 0, "provider-prefetch-timeout-ms": 30000,
                                          "provider-prefetch-total-budget-ms": 60000}})


def turn(client: httpx.Client, conv: str, user: str, assistant: str = "", **extra: object) -> httpx.Response:
    return client.post(f"{API}/conversations/{conv}/turns", json={"user": user, "assistant": assistant, **extra})


def recalled(client: httpx.Client, query: str) -> str:
    r = client.post(f"{API}/context", json={"query": query})
    assert r.status_code == 200, r.text
    system = r.json()["messages"][0]["content"]
    return system[system.index(RECALLED_TITLE):] if RECALLED_TITLE in system else ""


def test_a_timestamped_turn_is_recalled_whole_with_its_day_speaker_and_resolved_dates(client: httpx.Client) -> None:
    r = turn(client, "s1", "I went to a LGBTQ support group yesterday and it was so powerful.",
             "That sounds wonderful, tell me more!", timestamp="2023-05-08T13:56:00Z")
    assert r.status_code == 202, r.text
    block = recalled(client, "When did I go to the LGBTQ support group?")
    # The whole message, the day it was said, who said it, and what "yesterday" meant that day.
    assert ("- [Mon 8 May 2023] user: I went to a LGBTQ support group yesterday (7 May 2023) and it was so "
            "powerful.") in block
    assert "[conversations/" not in block  # the date says more than the id, in fewer characters


def test_epoch_milliseconds_work_and_a_bad_timestamp_is_refused_by_name(client: httpx.Client) -> None:
    ms = 1_689_811_200_000  # 2023-07-20T00:00:00Z
    assert turn(client, "s2", "My sister Olivia moved to Lisbon last week.", timestamp=ms).status_code == 202
    assert "[Thu 20 July 2023] user: My sister Olivia moved to Lisbon last week (the week of 10 July 2023)." \
        in recalled(client, "where did Olivia move")
    r = turn(client, "s3", "hello there my friend", timestamp="next tuesday")
    assert r.status_code in (400, 422) and "timestamp" in r.text and "ISO-8601" in r.text
    assert turn(client, "s3", "hello there my friend", timestamp=-5).status_code in (400, 422)
    # Nothing of the refused turn was logged.
    assert client.services.log.messages("default", "s3") == []  # type: ignore[attr-defined]


def test_recall_fills_its_budget_beyond_five_hits(client: httpx.Client) -> None:
    for i in range(30):
        turn(client, f"c{i}", f"Note {i}: the garden shed key number {i} hangs by the blue door.",
             timestamp=f"2023-06-{1 + i % 28:02d}T10:00:00Z")
    block = recalled(client, "garden shed key blue door")
    lines = [ln for ln in block.splitlines() if re.match(r"- \[\w{3} \d+ June 2023\] user: Note \d+: ", ln)]
    assert len(lines) == 30  # all of them: ~2,600 characters, well within the default budget


def test_a_memoryless_conversation_is_never_recalled(client: httpx.Client) -> None:
    turn(client, "private", "The alarm code for the cellar is kept in the green notebook.", memoryless=True,
         timestamp="2023-05-08T10:00:00Z")
    turn(client, "open", "The cellar has a green door and a squeaky step.", timestamp="2023-05-09T10:00:00Z")
    block = recalled(client, "cellar green notebook alarm code")
    assert "squeaky step" in block
    assert "alarm code" not in block


def test_archived_dream_diary_text_never_enters_recall(client: httpx.Client) -> None:
    store = client.services.store  # type: ignore[attr-defined]
    store.write("default", "memory/dreams/2023-05.md",
                "# Dreams 2023-05\n\n## 2023-05-09 03:00 Dreaming\n\nReason: no fact recurred about the "
                "violin lessons. Kept for next time: violin lessons on Saturday.\n",
                expected_sha=None, actor="person")
    store.write("default", "memory/2023-05-09.md", "# 2023-05-09\n\n## 10:00 Music\n\nViolin lessons on Saturday "
                "mornings with Mrs Park.\n", expected_sha=None, actor="person")
    block = recalled(client, "violin lessons Saturday")
    assert "Mrs Park" in block  # the daily note is recalled ...
    assert "Kept for next time" not in block and "no fact recurred" not in block  # ... the diary is not


def test_extraction_files_a_dated_turn_under_its_own_day(client: httpx.Client) -> None:
    turn(client, "hist", "Remember that I adopted a cat named Miso yesterday.", "Noted!",
         timestamp="2023-03-14T18:30:00Z")
    r = client.post(f"{API}/summarize/hist")
    assert r.status_code in (200, 202), r.text
    ws = client.services.settings.workspace  # type: ignore[attr-defined]
    note = ws / "default" / "memory" / "2023-03-14.md"
    assert note.exists(), sorted(p.name for p in (ws / "default" / "memory").glob("*.md"))
    assert "## 18:30" in note.read_text(encoding="utf-8")


def test_dream_as_of_runs_that_night_and_refuses_the_future(client: httpx.Client) -> None:
    store = client.services.store  # type: ignore[attr-defined]
    store.write("default", "memory/2023-05-08.md", "# 2023-05-08\n\n## 10:00 Tea\n\nDrinks green tea daily.\n",
                expected_sha=None, actor="person")
    r = client.post(f"{API}/emergence", json={"asOf": "2023-05-08"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["started_at"].startswith("2023-05-08T23:59")
    assert "no daily notes" not in out["reason"]  # it looked at that day's note, not today's
    r = client.post(f"{API}/emergence", json={"asOf": "2999-01-01"})
    assert r.status_code == 400 and "future" in r.text
    assert client.post(f"{API}/emergence", json={"asOf": "last night"}).status_code == 422


@pytest.mark.parametrize(("text", "said", "expected"), [
    ("I went yesterday", date(2023, 5, 8), "I went yesterday (7 May 2023)"),
    ("it was last Friday.", date(2023, 5, 8), "it was last Friday (5 May 2023)."),
    ("joined last Tues", date(2023, 7, 20), "joined last Tues (18 July 2023)"),
    ("we met 3 days ago", date(2023, 5, 8), "we met 3 days ago (5 May 2023)"),
    ("painted it last year", date(2023, 5, 8), "painted it last year (2022)"),
    ("moving next month", date(2023, 12, 20), "moving next month (January 2024)"),
    ("a few years ago", date(2023, 5, 8), "a few years ago (about 2020)"),
    ("我昨天去了公园", date(2023, 5, 8), "我昨天（7 May 2023）去了公园"),
    ("上周我很忙", date(2023, 5, 8), "上周（the week of 1 May 2023）我很忙"),
    ("no dates here", date(2023, 5, 8), "no dates here"),
])
def test_relative_dates_are_resolved_beside_the_words(text: str, said: date, expected: str) -> None:
    assert resolve_relative(text, said) == expected
    assert resolve_relative(expected, said) == expected  # resolving twice changes nothing


def test_date_labels_are_what_people_write() -> None:
    assert day_label(date(2023, 5, 7)) == "7 May 2023"
    assert dated_label(date(2023, 5, 8)) == "Mon 8 May 2023"


def test_a_backdated_history_is_extracted_day_by_day_without_waiting_out_live_cooldowns(tmp_path: Path) -> None:
    # The shipped 5-minute cooldown: a live chat's turns are spaced by it; turns said weeks ago are not.
    services = daemon_services(tmp_path / "ws", timezone="UTC",
                               mate={"memory": {"min-messages-for-summarize": 2}})
    services.seed_agents()
    services.build()
    services.extraction.start()
    try:
        said = [("2023-03-01", "My name is Priya."), ("2023-03-02", "I work at Initech."),
                ("2023-03-03", "I live in Lyon.")]
        for day, text in said:
            services.extraction.record_turn("default", f"day-{day}", text, "Noted.", timestamp=f"{day}T09:00:00Z")
        notes = tmp_path / "ws" / "default" / "memory"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all((notes / f"{d}.md").exists() for d, _ in said):
            time.sleep(0.05)
        assert sorted(p.name for p in notes.glob("2023-*.md")) == ["2023-03-01.md", "2023-03-02.md", "2023-03-03.md"]
        profile = services.store.read("default", "PROFILE.md").body
        assert "Priya" in profile and "Initech" in profile and "Lyon" in profile
    finally:
        services.close()
