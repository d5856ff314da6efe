"""A thread of the message index's own, started by the first call that has work for it: the merger
of the postings (storage._Merger) and the indexer of the log's tail (index._Indexer)."""

from __future__ import annotations

import threading


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
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        self._cv.notify()
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
