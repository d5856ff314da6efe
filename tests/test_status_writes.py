"""`status`'s last writes per agent read and hash only the files saved since the fifth newest kept
version (runtime/status.py): the same five as reading every file, on seeded random workspaces of
machine writes, hand edits dated before, between and after them, and ties to the second."""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.runtime.status import collect
from mateclaw_mem.settings import load_settings
from mateclaw_mem.workspace.records import sha256

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def _every_file_read(svc: Services, agent: str) -> list[dict[str, str]]:
    """The last writes as found by reading every file the store wrote (what status did before)."""
    store = svc.store
    recent = []
    for f in store.list_files(agent):
        versions = store.history_store.list(store.agent_key(agent), f.rel)
        recent += [{"file": f.rel, "at": v.at, "actor": v.actor, "reason": v.reason} for v in versions[-3:]]
        if versions and sha256((store.agent_dir(agent) / f.rel).read_bytes()) != versions[-1].replaced_by:
            at = datetime.fromtimestamp(f.mtime, svc.clock.tz).isoformat(timespec="seconds")
            recent.append({"file": f.rel, "at": at, "actor": "you", "reason": "hand edit"})
    recent.sort(key=lambda r: r["at"], reverse=True)
    return recent[:5]


@pytest.mark.parametrize("seed", range(12))
def test_the_last_writes_are_those_reading_every_file_finds(tmp_path: Path, seed: int) -> None:
    """Three rounds of writes and hand edits, a report after each: the later reports are made from
    what the daemon's history cache kept of the earlier ones (`History.tails`), so a stale entry
    would show an old write here."""
    rng = random.Random(seed)
    clock = ManualClock(START)
    svc = Services(load_settings(None, tmp_path / "ws"), clock=clock)
    svc.store.ensure_agent("default")
    moments: list[datetime] = []
    for _ in range(3):
        for k in range(rng.randint(3, 30)):
            rel = f"memory/2026-02-{1 + k % 28:02d}.md" if k % 5 else f"notes/n{k}.md"
            for n in range(rng.randint(1, 4)):
                clock.advance(timedelta(seconds=rng.choice((0, 1, 1, 7, 60))))
                moments.append(clock.now())
                svc.store.write("default", rel, f"# note {k}\n\nversion {n} {rng.random()}\n", expected_sha=None,
                                actor=rng.choice(("dream", "extract", "person")), reason=f"write {n}")
        folder = svc.store.agent_dir("default")
        for f in svc.store.list_files("default"):
            if rng.random() < 0.4:  # a hand edit, dated anywhere from before the first write to after the last
                path = folder / f.rel
                path.write_text(path.read_text(encoding="utf-8") + "by hand\n", encoding="utf-8")
                when = rng.choice(moments) + timedelta(seconds=rng.choice((-90, -1, 0, 0, 1, 30)))
                os.utime(path, (when.timestamp(), when.timestamp()))
        shown = collect(svc)["agents"]["default"]["last_writes"]
        assert shown == _every_file_read(svc, "default")
        assert len(shown) == min(5, len(shown)) and shown
    svc.close()


def test_a_hand_edit_dated_as_the_fifth_newest_write_is_shown_where_reading_every_file_puts_it(
        tmp_path: Path) -> None:
    clock = ManualClock(START)
    svc = Services(load_settings(None, tmp_path / "ws"), clock=clock)
    svc.store.ensure_agent("default")
    names = [f"notes/{c}.md" for c in "abcdef"]
    for rel in names:  # one write a minute: a.md oldest
        clock.advance(timedelta(seconds=60))
        svc.store.write("default", rel, f"{rel}\n", expected_sha=None, actor="dream")
    fifth = START + timedelta(seconds=120)  # b.md's write, the fifth newest
    path = svc.store.agent_dir("default") / names[0]
    path.write_text("a.md, by hand\n", encoding="utf-8")
    os.utime(path, (fifth.timestamp(), fifth.timestamp()))
    shown = collect(svc)["agents"]["default"]["last_writes"]
    assert shown == _every_file_read(svc, "default")
    assert [(w["file"], w["actor"]) for w in shown][-1] == ("notes/a.md", "you")  # the tie: a.md is listed first
    svc.close()
