"""The owners' message views parsed in the background once the daemon has started.

A long history's view takes seconds to parse (2-3 s at 30,000 turns of one user), and until it is in
memory that owner's first search waits for it. The daemon starts this after it listens: the owners
with the latest messages, up to 8 of them and 60,000 turns in all (`MessageIndex.warm_recent`), outside
the index lock - Adds and searches go on meanwhile; a search of an owner being parsed waits only for
the rest of that parse.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mateclaw_mem.index.messages.index import MessageIndex

log = logging.getLogger(__name__)


class ViewWarmup:
    def __init__(self, index: MessageIndex, on_done: Callable[[], None] | None = None) -> None:
        self.index = index
        self.on_done = on_done  # called once the views are parsed (the daemon freezes them out of the GC)
        self.state = "not started"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self.state = "parsing"
            self._thread = threading.Thread(target=self._run, name="aml-views", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)  # a parse checks between batches; folding one in is in memory
        if self.state == "parsing":
            self.state = "stopped"

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            done = self.index.warm_recent(self._stop)
        except Exception as exc:  # the views are parsed on first search anyway: say so, go on
            if not self._stop.is_set():
                log.warning("could not parse the AML views in the background (%s); searches parse them", exc)
                self.state = f"failed ({type(exc).__name__}); searches parse them"
            return
        if not self._stop.is_set():
            if done and self.on_done is not None:
                self.on_done()
            self.state = f"ready ({done} parsed)"
            if done:
                log.info("AML views: %d owner(s) parsed in %.0f ms", done, (time.perf_counter() - t0) * 1000)
