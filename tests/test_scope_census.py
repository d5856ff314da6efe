"""The file index's scope census (`chunk_scopes`): a search skips its per-match scope check only when
every scope the index has held is asked for, and every writer keeps the census, of any version."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.index.files.storage import FileStorage, tags
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    services = Services(load_settings(None, tmp_path / "ws"), ManualClock(datetime(2026, 3, 2, 9, tzinfo=UTC)))
    services.store.ensure_agent("default")
    _ = services.file_index
    snap = services.store.read("default", "MEMORY.md")
    services.store.write("default", "MEMORY.md", "# Memory\n\n## Boats\n\n- the zephyrine kayak is red\n",
                         expected_sha=snap.sha, actor="person")
    yield services
    services.close()


def _census(path: Path) -> set[tuple[str, str, str]]:
    with sqlite3.connect(path) as conn:
        return set(conn.execute("SELECT agent, owner, kind FROM chunk_scopes"))


def _foreign_writer(path: Path, agent: str, text: str) -> None:
    """A chunk written by plain SQL, as another program (or an older mateclaw-mem) would."""
    with sqlite3.connect(path) as conn:
        cur = conn.execute(
            "INSERT INTO chunks (file_id, agent, owner, rel, kind, title, line_start, line_end, text, sha, ntok)"
            " VALUES (NULL, ?, '', 'MEMORY.md', 'memory', 'Boats', 1, 3, ?, 'x', 4)", (agent, text))
        conn.execute("INSERT INTO fts (rowid, title, body, tag) VALUES (?, 'boat', ?, ?)",
                     (cur.lastrowid, text.lower(), tags(agent, None, "memory")))


def _agents_found(svc: Services, query: str) -> set[str]:
    return {h.agent for h in svc.search.search(query, agent="default", record=False).hits}


def test_one_agent_workspace_is_all_in_scope_and_found(svc: Services) -> None:
    assert {a for a, _, _ in _census(svc.file_index.path)} == {"default"}
    assert _agents_found(svc, "zephyrine kayak") == {"default"}


def test_a_chunk_of_another_agent_from_any_writer_stays_out_of_this_agents_search(svc: Services) -> None:
    path = svc.file_index.path
    _foreign_writer(path, "intruder", "the zephyrine kayak belongs to the intruder")
    assert ("intruder", "", "memory") in _census(path)  # the trigger counted it, not our code
    assert _agents_found(svc, "zephyrine kayak intruder") == {"default"}


def test_an_index_made_before_the_census_is_counted_when_opened(svc: Services, tmp_path: Path) -> None:
    path = svc.file_index.path
    with sqlite3.connect(path) as conn:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DELETE FROM chunk_scopes")
    _foreign_writer(path, "intruder", "the zephyrine kayak belongs to the intruder")
    assert _census(path) == set()  # nothing kept it
    FileStorage(path, svc.clock).close()  # the next open recounts and puts the trigger back
    assert {a for a, _, _ in _census(path)} == {"default", "intruder"}
    assert _agents_found(svc, "zephyrine kayak intruder") == {"default"}
    _foreign_writer(path, "second", "the zephyrine kayak of a second intruder")
    assert ("second", "", "memory") in _census(path)


def test_with_the_trigger_dropped_under_a_running_index_every_match_is_checked_again(svc: Services) -> None:
    # An older version's rebuild (or a hand) can leave `chunks` without the trigger while this
    # process keeps the index open: the census is then stale, and the search must not trust it.
    path = svc.file_index.path
    with sqlite3.connect(path) as conn:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
            conn.execute(f"DROP TRIGGER {name}")
    _foreign_writer(path, "intruder", "the zephyrine kayak belongs to the intruder")
    assert {a for a, _, _ in _census(path)} == {"default"}  # nothing counted it
    assert _agents_found(svc, "zephyrine kayak intruder") == {"default"}
