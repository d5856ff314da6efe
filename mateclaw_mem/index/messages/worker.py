"""A thread of the message index's own, started by the first call that has work for it: the merger
of the postings (storage._Merger) and the indexer of the log's tail (index._Indexer).

Their steps run with a short switch interval (`handing_off`). One interpreter lock serves the HTTP
face and these threads. A request arriving while a step runs Python waits for that lock until the
step drops it: at the interpreter's default switch interval, up to 5 ms - for an Add the daemon
answers in ~0.7 ms once it has the lock. A step hands it over at each SQLite call too, but takes it
straight back before a waiting thread has woken. Over HTTP, 1,000 users x 300 turns (scripts/bench/
aml_scale.py's spread Adds, one daemon, the floors' time left between Adds, load ~2.5): Add p50
1.45 ms at 5 ms, 1.28 at 0.5 ms, 1.11-1.19 at 0.2 ms; 0.78 with no indexing at all. (Tried and
dropped: steps waiting while a request is in flight - inside the app an Add already took 0.66 ms;
the wait was before it reached the app.)
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

STEP_SWITCH = 0.0002  # seconds: the interpreter's switch interval while a background step runs

_switch = threading.Lock()
_steps = 0  # background steps running now, on any index's threads
_restore: float | None = None  # the interval before the first of them, to restore after the last


@contextmanager
def handing_off() -> Iterator[None]:
    """Run a background step with the switch interval at most `STEP_SWITCH` (the module's text says
    why); the interval before it comes back once no step runs - unless someone else (a daemon's
    start) set another meanwhile, which is left as it is."""
    global _steps, _restore
    with _switch:
        if not _steps:
            before = sys.getswitchinterval()
            _restore = before if before > STEP_SWITCH else None
            if _restore is not None:
                sys.setswitchinterval(STEP_SWITCH)
        _steps += 1
    try:
        yield
    finally:
        with _switch:
            _steps -= 1
            if not _steps and _restore is not None:
                if abs(sys.getswitchinterval() - STEP_SWITCH) < 1e-9:
                    sys.setswitchinterval(_restore)
                _restore = None


class Worker:
    """`_run` on a daemon thread named `name`, started by the first `_wake` (nothing starts while
    nobody writes); `stop` ends it and waits for the step under way. Subclasses keep their state
    under `_cv` and wait on it, and run each step in `handing_off()`."""

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
