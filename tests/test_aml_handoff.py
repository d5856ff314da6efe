"""The message index's background steps run with a short interpreter switch interval (issue 36: a
request arriving while one ran waited up to the default 5 ms for the interpreter lock), and leave
the interval as it was once none runs. Real threads, a real log and index; nothing timed."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.aml import AmlMessage, AmlService
from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.index.messages import worker
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.index.messages.worker import STEP_SWITCH, handing_off

TS = 1_700_000_000_000
WORDS = ["garden", "violin", "harbour", "lantern", "pottery", "meadow", "quartz", "saffron", "tundra", "willow"]


@pytest.fixture(autouse=True)
def _default_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    sys.setswitchinterval(before)


def _same(a: float, b: float) -> bool:
    return abs(a - b) < 1e-9


def test_a_step_shortens_the_interval_and_the_last_step_restores_it() -> None:
    inside: list[float] = []
    first_in, release = threading.Event(), threading.Event()

    def step() -> None:
        with handing_off():
            inside.append(sys.getswitchinterval())
            first_in.set()
            release.wait(30)

    other = threading.Thread(target=step)
    other.start()
    assert first_in.wait(30)
    with handing_off():  # a second step while the first runs (the merger beside the indexer)
        inside.append(sys.getswitchinterval())
    assert _same(sys.getswitchinterval(), STEP_SWITCH)  # the other step still runs
    release.set()
    other.join(30)
    assert all(_same(v, STEP_SWITCH) for v in inside) and len(inside) == 2
    assert _same(sys.getswitchinterval(), 0.005)
    assert worker._steps == 0


def test_an_interval_someone_else_set_during_a_step_is_left_alone() -> None:
    with handing_off():
        sys.setswitchinterval(0.0001)  # a daemon's start building its routes meanwhile
    assert _same(sys.getswitchinterval(), 0.0001)


def test_a_shorter_interval_already_set_is_not_lengthened() -> None:
    sys.setswitchinterval(0.0001)
    with handing_off():
        assert _same(sys.getswitchinterval(), 0.0001)
    assert _same(sys.getswitchinterval(), 0.0001)


def test_the_indexing_thread_indexes_with_the_short_interval_then_restores_it(tmp_path: Path) -> None:
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    try:
        svc = AmlService(log, index, ManualClock(datetime(2024, 1, 1, tzinfo=UTC)))
        index._indexer.stop()  # the Adds logged first, then one long step of the thread to watch
        for n in range(60):
            turns = [AmlMessage("user", f"Caroline: turn {n}.{k} about the {WORDS[(n + k) % 10]} and "
                                        f"the {WORDS[(n * k) % 10]}", TS + 20 * n + k) for k in range(20)]
            svc.add_json(f"r{n}", "u1", f"s{n % 3}", turns)
        last = log.since(0, limit=10_000)[-1].id
        assert index.watermark() < last
        fresh = MessageIndex(tmp_path / "messages.db")  # its own indexing thread, not started yet
        try:
            seen: set[float] = set()
            fresh.sync_later(log, last, wait=False)
            deadline = time.monotonic() + 120  # (a bound on a hang, not a speed figure)
            while fresh.watermark() < last and time.monotonic() < deadline:
                seen.add(sys.getswitchinterval())
            thread = fresh._indexer._thread
            assert thread is not None
            fresh._indexer.stop()
            fresh._storage.merger.stop()  # (its merges of the 1,200 turns: steps too)
            assert fresh.watermark() == last
            assert any(_same(v, STEP_SWITCH) for v in seen)  # while it indexed
            # Once no step runs in this process (an earlier test's index may still be merging):
            while worker._steps and time.monotonic() < deadline:
                time.sleep(0.01)
            assert worker._steps == 0
            assert _same(sys.getswitchinterval(), 0.005)
            assert svc.search("violin harbour", "u1", 5)
        finally:
            fresh.close()
    finally:
        index.close()
        log.close()
