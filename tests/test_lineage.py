"""Harness lineage: versions of AGENTS.md + SOUL.md by SHA-256, from machine writes, hand edits and checks."""

from __future__ import annotations

import os
import time

import pytest

from mateclaw_mem.errors import InvalidInputError, NotFoundError
from mateclaw_mem.runtime.services import Services

AGENT = "default"


@pytest.fixture
def lineage(services: Services):
    services.store.ensure_agent(AGENT)
    return services.lineage


def soul_path(services: Services):
    return services.store.path(AGENT, "SOUL.md")


def test_a_hand_edit_of_soul_md_on_disk_is_a_new_version(services: Services, lineage) -> None:
    first = lineage.versions(AGENT)
    assert len(first["versions"]) == 1 and first["currentHash"] == first["versions"][0]["hash"]
    path = soul_path(services)
    path.write_text(path.read_text(encoding="utf-8") + "\n## Boundaries\n\nNever guess a password.\n",
                    encoding="utf-8")
    after = lineage.versions(AGENT)  # no watcher running: the read itself checks
    assert len(after["versions"]) == 2
    assert after["currentHash"] == after["versions"][1]["hash"] != first["currentHash"]
    assert after["versions"][1]["source"] == "check"
    assert after["versions"][0]["registered_at"] == "2026-11-30T09:15:00+01:00"


def test_the_watcher_reports_hand_edits(services: Services, lineage) -> None:
    before = lineage.versions(AGENT)["currentHash"]
    watcher = services.watcher
    watcher.start()
    try:
        # An editor's save: a new file renamed over the old one (never a half-written file).
        path = soul_path(services)
        tmp = path.with_name(".SOUL.md.swp.md")
        tmp.write_text(path.read_text(encoding="utf-8").replace("warm", "kind"), encoding="utf-8")
        os.replace(tmp, path)
        edited = lineage.current_hash(AGENT)
        deadline = time.monotonic() + 30
        # check=False: only the watcher may record it here.
        while edited not in [v["hash"] for v in lineage.versions(AGENT, check=False)["versions"]]:
            assert time.monotonic() < deadline, "the watcher never reported the edit of SOUL.md"
            time.sleep(0.05)
    finally:
        watcher.stop()
    versions = lineage.versions(AGENT)
    assert [v["source"] for v in versions["versions"]] == ["seed", "hand-edit"]
    assert versions["currentHash"] == edited != before


def test_machine_writes_register_through_the_store(services: Services, lineage) -> None:
    lineage.check(AGENT)
    services.tools.edit(AGENT, "AGENTS.md", "Your memory is Markdown", "Your good memory is Markdown", actor="api")
    rows = lineage.versions(AGENT)["versions"]
    assert [r["source"] for r in rows] == ["seed", "api"]
    # Other files and owners' files are not the harness.
    services.tools.write(AGENT, "MEMORY.md", "# Memory\n", actor="api")
    lineage.on_file_changed(AGENT, "alice", "SOUL.md", False)
    assert len(lineage.versions(AGENT)["versions"]) == 2


def test_what_counts_as_a_version(services: Services, lineage) -> None:
    original = lineage.check(AGENT)
    tools = services.tools
    tools.set_sort_order(AGENT, "SOUL.md", 1, actor="api")  # already 1: no change at all
    text = services.store.read(AGENT, "SOUL.md").text
    services.store.write(AGENT, "SOUL.md", text.replace("sort_order: 1", "sort_order: 1\nmy_key: x"),
                         expected_sha=None, actor="person")
    assert lineage.current_hash(AGENT) == original  # frontmatter is never in the prompt
    tools.set_enabled(AGENT, "SOUL.md", False, actor="api")
    disabled = lineage.current_hash(AGENT)
    assert disabled != original  # SOUL.md left the prompt
    tools.set_sort_order(AGENT, "SOUL.md", -1, actor="api")
    tools.set_enabled(AGENT, "SOUL.md", True, actor="api")
    reordered = lineage.current_hash(AGENT)
    assert reordered not in (original, disabled)  # SOUL.md now comes before AGENTS.md
    tools.set_sort_order(AGENT, "SOUL.md", 1, actor="api")
    data = lineage.versions(AGENT)
    assert data["currentHash"] == original  # back to the first version: known, not new
    assert [v["hash"] for v in data["versions"]] == [original, disabled, reordered]


def test_labels(services: Services, lineage) -> None:
    current = lineage.check(AGENT)
    assert lineage.label(AGENT, None, "  baseline  harness ")["label"] == "baseline harness"
    assert lineage.label(AGENT, current[:8].upper(), "v1") == {
        "hash": current, "label": "v1", "registered_at": "2026-11-30T09:15:00+01:00", "source": "seed"
    }
    assert lineage.label(AGENT, current, "")["label"] is None
    with pytest.raises(NotFoundError, match="no harness version"):
        lineage.label(AGENT, "0" * 64, "x")
    with pytest.raises(InvalidInputError, match="not a SHA-256"):
        lineage.label(AGENT, "xyz", "x")
    with pytest.raises(InvalidInputError, match="limit is 200"):
        lineage.label(AGENT, None, "l" * 201)
    with pytest.raises(NotFoundError, match="agent 'ghost'"):
        lineage.versions("ghost")


def test_runs_remember_their_harness(services: Services, lineage) -> None:
    ctx = services.learning.enter(AGENT, "maze")
    assert ctx.harness_hash == lineage.versions(AGENT)["currentHash"]
    path = soul_path(services)
    path.write_text(path.read_text(encoding="utf-8") + "\nchanged\n", encoding="utf-8")
    out = services.learning.record_result(AGENT, "maze", 5, run_id=ctx.run_id, actor="test")
    assert out.run.harness_hash == ctx.harness_hash  # the prompt the run was entered with
    assert len(lineage.versions(AGENT)["versions"]) == 2  # recording the result noticed the edit
