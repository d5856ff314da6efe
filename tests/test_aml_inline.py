"""`AmlService.add_json_now`, the Add the HTTP face runs on its event loop: it never waits, and
whatever it gives up on, the waiting `add_json` finishes - nothing lost, nothing twice."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.aml import AmlMessage, AmlService
from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.index.messages import worker
from mateclaw_mem.index.messages.index import MessageIndex

TS = 1683554160000


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[AmlService]:
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    yield AmlService(log, index, ManualClock(datetime(2024, 1, 1, tzinfo=UTC)))
    index.close()
    log.close()


def _msgs(word: str) -> list[AmlMessage]:
    return [AmlMessage("user", f"Caroline: the {word} was lovely", TS)]


def _found(svc: AmlService, word: str) -> int:
    return sum(word in i.content for i in svc.search(word, "u1", 10))


def test_unhindered_it_adds_and_answers_as_add_json(svc: AmlService) -> None:
    now = svc.add_json_now("r1", "u1", "s1", _msgs("walrus"))
    assert now is not None and now == svc.add_json("r1", "u1", "s1", _msgs("walrus"))  # the replay's answer
    assert _found(svc, "walrus") == 1


def test_another_thread_holding_the_log_means_none_and_no_wait(svc: AmlService) -> None:
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with svc.log.lock:
            held.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(30)
    try:
        assert svc.add_json_now("r1", "u1", "s1", _msgs("narwhal")) is None
    finally:
        release.set()
        t.join()
    assert _found(svc, "narwhal") == 0  # nothing was done
    svc.add_json("r1", "u1", "s1", _msgs("narwhal"))
    assert _found(svc, "narwhal") == 1


def test_another_process_writing_the_log_means_none_and_the_waiting_add_finishes_it(
    svc: AmlService, tmp_path: Path
) -> None:
    other = sqlite3.connect(tmp_path / "log.db", timeout=0, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
    try:
        assert svc.add_json_now("r1", "u1", "s1", _msgs("axolotl")) is None
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert len(svc.log.since(0)) == 0  # nothing was logged
    svc.add_json("r1", "u1", "s1", _msgs("axolotl"))
    assert len(svc.log.since(0)) == 1 and _found(svc, "axolotl") == 1
    # The connection waits again as before (the busy timeout is back).
    assert svc.log._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30000


def test_another_process_writing_the_index_holds_no_add_back(svc: AmlService, tmp_path: Path) -> None:
    """The Add needs only the log: the index is written after the answer (by its own thread, or by
    the first search), so another process writing messages.db delays neither."""
    other = sqlite3.connect(tmp_path / "messages.db", timeout=0, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        answer = svc.add_json_now("r1", "u1", "s1", _msgs("axolotl"))
        assert answer is not None and '"success": true' in answer
        assert len(svc.log.since(0)) == 1
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert _found(svc, "axolotl") == 1
    assert svc.add_json_now("r1", "u1", "s1", _msgs("axolotl")) == answer  # a replay, not a second copy
    assert len(svc.log.since(0)) == 1 and _found(svc, "axolotl") == 1


def test_an_add_answered_on_the_event_loop_is_served_so(svc: AmlService, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index's threads pause their indexing while it runs (tests/test_index_give_way.py)."""
    seen: list[int] = []
    append_once = svc.log.append_once

    def watched(*args: Any, **kw: Any) -> Any:
        seen.append(worker.serving.n)
        return append_once(*args, **kw)

    monkeypatch.setattr(svc.log, "append_once", watched)
    assert svc.add_json_now("r1", "u1", "s1", [AmlMessage("user", "Caroline: the walrus was lovely", TS)]) is not None
    assert svc.add_json("r2", "u1", "s1", [AmlMessage("user", "Caroline: the narwhal too", TS)])
    assert seen == [1, 0]  # (the waiting Add, on a pool's thread, may wait on the index: not served so)
    assert worker.serving.n == 0
