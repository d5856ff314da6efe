"""The long-running process: one per workspace, started by `mateclaw-mem serve`.

It seeds the workspace, takes the daemon lock (a second daemon on the same workspace refuses to
start), starts what the configuration enables and stops cleanly on SIGTERM / Ctrl-C.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock, Timeout

from mateclaw_mem.errors import BusyError
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.workspace.store import clean_temp_files

log = logging.getLogger("mateclaw_mem.daemon")


class Daemon:
    def __init__(self, services: Services, *, host: str | None = None, port: int | None = None) -> None:
        self.services = services
        self.host = host or services.settings.server.host
        self.port = services.settings.server.port if port is None else port
        self._stop = threading.Event()
        self._lock: FileLock | None = None
        self._stoppers: list[Callable[[], None]] = []

    @property
    def lock_path(self) -> Path:
        return self.services.settings.state_dir / "daemon.lock"

    def start(self) -> None:
        settings = self.services.settings
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = FileLock(str(self.lock_path))
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise BusyError(
                f"another mateclaw-mem daemon is already running on workspace {settings.workspace.resolve()}"
            ) from None
        removed = clean_temp_files(settings.workspace)
        if removed:
            log.info("removed %d temp file(s) left by an interrupted write", removed)
        created = self.services.store.ensure_agent(settings.default_agent)
        if created:
            log.info("seeded agent %r: %s", settings.default_agent, ", ".join(created))
        mode = self.services.mode
        log.info("workspace %s", settings.workspace.resolve())
        log.info("config %s", settings.config_path or "(built-in defaults)")
        if mode == "rules":
            log.info("mode: rules (no model configured; deterministic extraction and consolidation)")
        else:
            log.info("mode: model %s at %s", settings.model.model, settings.model.base_url)

    def add_stopper(self, fn: Callable[[], None]) -> None:
        self._stoppers.append(fn)

    def request_stop(self, *_: object) -> None:
        self._stop.set()

    def wait(self) -> None:
        # Event.wait with a timeout keeps the main thread responsive to signals without busy polling.
        while not self._stop.wait(3600):
            pass

    def stop(self) -> None:
        for fn in reversed(self._stoppers):
            try:
                fn()
            except Exception:
                log.exception("error while stopping")
        self.services.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        log.info("stopped")

    def run_forever(self) -> None:
        self.start()
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        log.info("ready; Ctrl-C or SIGTERM to stop")
        try:
            self.wait()
        finally:
            self.stop()
