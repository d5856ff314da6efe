"""A thread of the message index's own, started by the first call that has work for it: the merger
of the postings (storage._Merger) and the indexer of the log's tail (index._Indexer)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_on_worker = threading.local()


class _Serving:
    """Requests being served on this process's threads that a worker's indexing makes way for."""

    # A worker waits for them at most WAIT s per document, and at most BUDGET s of every WINDOW s:
    # it holds the index's lock meanwhile, and a search waiting for that lock (or an Add past the
    # index's lag bound) must not wait on a stream of Adds - at worst its wait doubles.
    WAIT, BUDGET, WINDOW = 0.01, 0.05, 0.1

    def __init__(self) -> None:
        self.n = 0
        self.cv = threading.Condition()

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self.cv:
            self.n += 1
        try:
            yield
        finally:
            with self.cv:
                self.n -= 1
                if not self.n:
                    self.cv.notify_all()


# `with serving():` around a request's work that waits on no worker (an Add answered on the event
# loop): the workers' indexing pauses at its next document until it is done.
serving = _Serving()


def give_way() -> None:
    """Between two documents of a worker's indexing: the interpreter is handed to any thread waiting
    for it, at once, and while a request is being `serving()`d the worker waits for it (at most
    `_Serving.WAIT`). Otherwise a request's thread, back from a SQLite call or woken by its socket,
    waited for the worker's pure Python until the interpreter's switch interval (5 ms) forced a
    switch, at every such point: Adds sent in a burst beside the indexing took 1.7-2.0x the floor's
    p50 (`scripts/bench/aml_scale.py --sizes 1000`; without any indexing 1.3x). A lower switch
    interval did not help. On any other thread (a search catching up, a rebuild, the index process)
    this does nothing, nor on a worker that is not `courteous()` at the moment."""
    worker: Worker | None = getattr(_on_worker, "worker", None)
    if worker is None or not worker.courteous():
        return
    if serving.n:
        now = time.monotonic()
        if now - _on_worker.window > serving.WINDOW:
            _on_worker.window, _on_worker.paused = now, 0.0
        left = serving.BUDGET - _on_worker.paused
        if left > 0:
            with serving.cv:
                serving.cv.wait_for(lambda: not serving.n, min(serving.WAIT, left))
            _on_worker.paused += time.monotonic() - now
            return
    time.sleep(0)


class Worker:
    """`_run` on a daemon thread named `name`, started by the first `_wake` (nothing starts while
    nobody writes); `stop` ends it and waits for the step under way. Subclasses keep their state
    under `_cv` and wait on it."""

    name = "aml-worker"

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    def _wake(self) -> bool:
        """Start the thread if need be and wake it; False once stopped. The caller holds `_cv`."""
        if self._stop:
            return False
        if self._thread is None:
            self._thread = threading.Thread(target=self._run_here, name=self.name, daemon=True)
            self._thread.start()
        self._cv.notify()
        return True

    def _run_here(self) -> None:
        _on_worker.worker, _on_worker.window, _on_worker.paused = self, 0.0, 0.0
        self._run()

    def courteous(self) -> bool:
        """Whether `give_way` makes way now (False: the work is urgent, e.g. far behind)."""
        return True

    def _run(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
