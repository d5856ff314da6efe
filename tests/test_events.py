"""Who reacts to whose writes is one table (runtime/events.py), applied when an emitter is built:
a write reaches each listener that exists, builds none that does not (but the file index while an
index is on disk), and the table names only real parts and hooks."""

from __future__ import annotations

from pathlib import Path

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.runtime.events import REACTIONS
from mateclaw_mem.runtime.services import BUILD_ORDER, Services
from mateclaw_mem.settings import load_settings

AGENT = "default"


@pytest.fixture
def svc(tmp_path: Path, clock: ManualClock):
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\nmate:\n  memory:\n    soul-update-interval: 50\n"
                   "    fact:\n      projection-enabled: true\n", encoding="utf-8")
    services = Services(load_settings(cfg, tmp_path / "workspace"), clock)
    services.store.ensure_agent(AGENT)
    yield services
    services.close()


def write(services: Services, rel: str, body: str) -> str:
    snap = services.store.read(AGENT, rel)
    return services.store.write(AGENT, rel, body, expected_sha=snap.sha, actor="person").sha


def indexed_sha(services: Services, rel: str) -> str | None:
    """What the file index holds of `rel`, read without a search (a search reconciles first)."""
    found = services.file_index.indexed_files(AGENT).get((AGENT, None, rel))
    return found.sha if found is not None else None


def test_a_write_builds_no_listener(svc: Services) -> None:
    write(svc, "MEMORY.md", "# MEMORY.md\n\n- keeps bees on the roof\n")
    assert [name for name in ("file_index", "facts", "soul", "lineage", "contradictions") if svc.built(name)] == []
    assert not svc.settings.index_db.exists()  # a CLI write keeps an index fresh, never creates one


def test_a_write_reaches_every_listener_that_exists(svc: Services) -> None:
    soul, facts = svc.soul, svc.facts
    assert svc.built("file_index"), "building facts (projection on) builds the index whose ingest feeds them"
    before = soul.writes(AGENT, None)
    sha = write(svc, "MEMORY.md", "# MEMORY.md\n\n## Preferences\n- keeps bees on the roof\n")
    assert soul.writes(AGENT, None) == before + 1  # store -> SOUL counter
    assert indexed_sha(svc, "MEMORY.md") == sha  # store -> file index
    assert any("bees" in f.text for f in facts.list(AGENT, None))  # index ingest -> facts


def test_an_index_on_disk_hears_a_later_process_s_writes(svc: Services, clock: ManualClock) -> None:
    _ = svc.file_index  # an earlier process built the index
    svc.close()
    later = Services(svc.settings, clock)  # a CLI command: nothing built
    try:
        sha = write(later, "MEMORY.md", "# MEMORY.md\n\n- grows saffron crocus\n")
        assert later.built("file_index")  # the write found the index on disk and went in
        assert indexed_sha(later, "MEMORY.md") == sha
    finally:
        later.close()


def test_the_table_names_parts_and_their_hooks(svc: Services) -> None:
    for r in REACTIONS:
        assert r.emitter in BUILD_ORDER and r.listener in BUILD_ORDER, r
        assert callable(getattr(type(getattr(svc, r.emitter)), r.hook, None)), f"{r.emitter} has no {r.hook}()"
