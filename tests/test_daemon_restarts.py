"""The daemon always comes back: `mateclaw-mem serve` killed with -9 while extraction work is pending
(some of it running, some queued) comes up and serves, restart after restart.

Pending work is resumed by the new process while it is still starting, so its workers write memory
files (and the store's listeners reach the search index) while the main thread builds the rest of
the services. That is the window in which lazily built services under locks deadlocked a restart
(issue 13, point 5): nothing printed, the port never opened.

Each restart is made to count instead of counting on many: every kill must leave named conversations
pending, and the next process must be seen running exactly those (its log names them) before it is
killed in turn, so every start really overlapped resumed work with its own start-up. Six such starts
replace the twenty blind ones this test once made."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_daemon_e2e import MEM, WAIT, WS, Daemon, wait_for

RESTARTS = 5
# One extraction bucket each, more buckets than the two workers: each start resumes a queue, not a run.
OWNERS = 6
# A hang costs one WAIT per start; this bounds the whole test so a hang fails it instead of freezing
# the suite. It is a guard, not a measurement: healthy restarts take a small fraction of it.
OVERALL_TIMEOUT = (RESTARTS + 1) * (2 * WAIT + 15.0)


def _config(tmp_path: Path) -> None:
    # No cooldown and no count gate: every turn is extraction work that is due at once, so each kill
    # leaves runs in flight and rows pending, and each start resumes them immediately.
    (tmp_path / "mateclaw.yaml").write_text(
        "timezone: Europe/Berlin\n"
        "mate:\n  memory:\n    cooldown-minutes: 0\n    min-messages-for-summarize: 0\n",
        encoding="utf-8",
    )


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[Daemon]]:
    """Every daemon the test starts; a hung one is killed here, so the suite moves on."""
    daemons: list[Daemon] = []
    yield daemons
    for d in daemons:
        if d.proc is not None and d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


def _pending(workspace: Path) -> set[str]:
    """Conversations whose extraction was requested and not finished, as a killed daemon left them."""
    db = sqlite3.connect(workspace / ".mateclaw" / "state.db")
    try:
        return {row[0] for row in db.execute("SELECT conversation_id FROM extraction_pending")}
    finally:
        db.close()


def _extracted(log: str) -> set[str]:
    """Conversations a run logged (`extraction default/chat-0-0,chat-1-0 (owner …): …`): one run takes
    all of an owner's pending conversations, so one left by an earlier kill is named beside a newer one."""
    return {conv for m in re.finditer(r"extraction default/(\S+) \(", log) for conv in m.group(1).split(",")}


def test_kill_9_with_extraction_pending_comes_back_every_time(started: list[Daemon], tmp_path: Path) -> None:
    _config(tmp_path)
    deadline = time.monotonic() + OVERALL_TIMEOUT
    left: set[str] = set()  # what the previous kill left pending: this start must resume it
    for round_ in range(RESTARTS + 1):  # the first start plus RESTARTS restarts
        assert time.monotonic() < deadline, f"restarts took longer than the {OVERALL_TIMEOUT:.0f} s guard"
        d = Daemon(tmp_path)
        started.append(d)
        try:
            d.start()  # waits (bounded) for "listening on"; a hung start-up fails here
        except AssertionError as exc:
            raise AssertionError(f"start {round_} never came up: {exc}\n--- log ---\n{d.log()}") from None
        with d.client() as c:
            health = c.get("/health")
            assert health.status_code == 200 and health.json()["status"] == "ok", health.text
            # A real request through the services, not just the liveness route.
            read = c.get(f"{WS}/file", params={"path": "MEMORY.md"})
            assert read.status_code == 200, read.text
            # The work the last kill cut off is run by this process (each run logs its conversation).
            try:
                wait_for(lambda d=d, left=left: left <= _extracted(d.log()),
                         f"start {round_} to resume {sorted(left)}", alive=d.proc)
            except AssertionError as exc:  # (the log says what the start did instead: CI failed here once)
                pending = sorted(_pending(d.workspace))
                raise AssertionError(f"{exc}; still pending: {pending}\n--- log ---\n{d.log()[-20000:]}") from None
            # New work for the next start: a burst of turns, each due now, in several buckets.
            for i in range(OWNERS * 2):
                r = c.post(f"{MEM}/conversations/chat-{round_}-{i % OWNERS}/turns",
                           json={"user": f"Remember that round {round_} item {i} is a blue umbrella number {i}.",
                                 "assistant": "Noted.", "owner": f"person-{i % OWNERS}"})
                assert r.status_code == 202, r.text
        assert d.proc is not None
        d.proc.kill()  # SIGKILL: no shutdown, running extractions cut off, pending rows left behind
        d.proc.wait(timeout=WAIT)
        left = _pending(d.workspace)
        # The scenario really happens on every restart, not on some: the kill left work behind.
        assert left, f"kill {round_} left no extraction work pending for the next start"
