"""The message index's own threads make way for the requests this process serves (`worker.give_way`):
between documents they hand the interpreter over, and while an Add answered on the event loop is
being served (`worker.serving`) their indexing waits - bounded, and never on any other thread."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.index.messages.worker import Worker, give_way, serving

TS = 1683554160000


class _Steps(Worker):
    """A worker whose work is `steps` calls of `give_way`, then `done`."""

    name = "test-give-way"

    def __init__(self, steps: int = 1) -> None:
        super().__init__()
        self.go, self.steps = False, steps
        self.done = threading.Event()

    def start(self) -> None:
        with self._cv:
            self.go = True
            self._wake()

    def _run(self) -> None:
        with self._cv:
            while not self.go and not self._stop:
                self._cv.wait()
        for _ in range(self.steps):
            give_way()
        self.done.set()


@pytest.fixture
def long_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("WAIT", 30.0), ("BUDGET", 30.0), ("WINDOW", 60.0)):
        monkeypatch.setattr(serving, name, value)


def test_a_worker_waits_while_a_request_is_served_and_goes_on_after_it(long_wait: None) -> None:
    w = _Steps()
    try:
        with serving():
            w.start()
            assert not w.done.wait(0.3), "the worker went on while a request was being served"
        assert w.done.wait(10)
    finally:
        w.stop()


@pytest.mark.parametrize(("wait", "budget"), [(0.05, 30.0), (30.0, 0.05)])
def test_the_wait_is_bounded(monkeypatch: pytest.MonkeyPatch, wait: float, budget: float) -> None:
    """Per document (WAIT), and in all (BUDGET of every WINDOW): the worker holds the index's lock,
    which a search may be waiting for."""
    for name, value in (("WAIT", wait), ("BUDGET", budget), ("WINDOW", 60.0)):
        monkeypatch.setattr(serving, name, value)
    w = _Steps(steps=20)
    try:
        with serving():  # (a stream of requests never lets go: the worker goes on all the same)
            w.start()
            assert w.done.wait(20)
    finally:
        w.stop()


def test_no_other_thread_ever_waits(long_wait: None) -> None:
    """A search catching the index up runs the same indexing code on its own thread: it must not
    wait for the requests being served (it is one of them)."""
    with serving():
        t = threading.Thread(target=give_way)
        t.start()
        t.join(10)
        assert not t.is_alive()
        give_way()  # (this thread too)
    assert serving.n == 0


def test_the_index_thread_pauses_its_indexing_while_a_request_is_served(tmp_path: Path, long_wait: None) -> None:
    log, index = ConversationLog(tmp_path / "log.db"), MessageIndex(tmp_path / "messages.db")
    log.append("aml", "s1", [NewMessage("user", f"Caroline: turn {i} about the walrus", TS + i) for i in range(5)],
               owner="u1", now_ms=TS)
    with serving():
        index.sync_later(log, wait=False)  # (the indexer's thread starts, and stops at its first document)
        assert not _until(lambda: index._storage.indexed_to > 0, 0.3)
    assert _until(lambda: index._storage.indexed_to > 0, 10)
    assert [h.content for h in index.search("aml", "u1", "walrus", limit=10)]
    index.close()
    log.close()


def test_far_behind_the_index_thread_makes_no_way(tmp_path: Path, long_wait: None) -> None:
    """Half its lag bound behind (`_Indexer.courteous`), it indexes through the requests being served:
    making way, it fell behind until Adds past the bound waited for whole batches of its indexing."""
    log, index = ConversationLog(tmp_path / "log.db"), MessageIndex(tmp_path / "messages.db")
    log.append("aml", "s1", [NewMessage("user", f"Caroline: turn {i} about the walrus", TS + i) for i in range(5)],
               owner="u1", now_ms=TS)
    index._indexer.logged(MessageIndex.MAX_LAG // 2)  # (as if this process's Adds had logged that far)
    with serving():
        index.sync_later(log, wait=False)
        assert _until(lambda: index._storage.indexed_to > 0, 10)
    index.close()
    log.close()


def _until(cond: Any, seconds: float) -> bool:
    done = threading.Event()
    deadline = threading.Timer(seconds, done.set)
    deadline.start()
    try:
        while not done.is_set():
            if cond():
                return True
            done.wait(0.01)
        return bool(cond())
    finally:
        deadline.cancel()



def test_an_add_past_the_lag_bound_waits_for_the_index_threads_batch_not_its_whole_tail(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `MAX_LAG` an Add waits until the index is at its bound. While the index's thread is
    indexing, that is a wait for the thread's batches (`wait_indexed`), each of which it reports;
    waiting for the storage's lock instead was waiting for the whole tail (a thread that lets a lock
    go and takes it again at once keeps it)."""
    log, index = ConversationLog(tmp_path / "log.db"), MessageIndex(tmp_path / "messages.db")
    batch = type(index._indexer).BATCH
    log.append("aml", "s1", [NewMessage("user", f"Caroline: turn {i} about the walrus", TS + i)
                             for i in range(2 * batch + 10)], owner="u1", now_ms=TS)
    assert not index._indexer.wait_indexed(1, 30.0), "nobody is indexing: the caller must"
    storage = index._storage
    gates = [threading.Event(), threading.Event()]
    entered = [threading.Event(), threading.Event()]
    add_batch = storage._add_batch

    def gated(msgs: Any, s: str = "") -> None:
        k = next((i for i, e in enumerate(entered) if not e.is_set()), None)
        if k is not None:
            entered[k].set()
            gates[k].wait(10)
        add_batch(msgs, s)

    monkeypatch.setattr(storage, "_add_batch", gated)
    index.sync_later(log, wait=False)
    assert entered[0].wait(10)
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(index._indexer.wait_indexed(batch, 30.0)))
    waiter.start()
    gates[0].set()  # the first batch commits; the thread stops in the second
    waiter.join(10)
    assert got == [True]  # before the second batch could end (its gate is shut):
    assert entered[1].wait(10) and storage.indexed_to == batch  # it waited for one batch, not the tail
    gates[1].set()
    assert _until(lambda: storage.indexed_to == 2 * batch + 10, 10)
    index.close()
    log.close()
