"""The `serve --aml-only` process: bind, open the store (runtime/aml_only.py), serve, stop on a signal.

Leaner than runtime/daemon.py on purpose: no workspace to seed, heal or recover, no watcher, no
scheduler, no pid file (`status` of a workspace is the full daemon's business). What it shares with
it: the port is bound before anything is opened (a busy port stops it first), any address other than
loopback needs an API key, and SIGTERM / Ctrl-C stop the HTTP face first (open requests finish), then
the store, within a deadline. On SQLite it takes the workspace's daemon lock (one writer: a second
daemon, full or not, refuses to start); on PostgreSQL it takes none - that is the point.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from mateclaw_mem.runtime import malloc, pidfile
from mateclaw_mem.runtime.aml_only import AmlNode, open_node
from mateclaw_mem.runtime.net import bind, connect_url, require_key_beyond_loopback, serve_in_thread

if TYPE_CHECKING:
    import socket

    from mateclaw_mem.clock import Clock
    from mateclaw_mem.settings import Settings

log = logging.getLogger("mateclaw_mem.aml_only")
HTTP_START_TIMEOUT = 30.0
HTTP_STOP_GRACE = 5
STOP_DEADLINE = 4.0  # SIGTERM to exit, whatever is still running (a service manager waits ~5 s)
MODEL_CALL_GRACE = 3.0  # seconds from SIGTERM to cancelling the model calls still in flight


class AmlOnlyDaemon:
    def __init__(self, settings: Settings, *, host: str | None = None, port: int | None = None,
                 app_factory: Callable[[AmlNode, str], Any], clock: Clock | None = None) -> None:
        """`app_factory(node, host)` builds the HTTP face (the CLI passes api/aml_only_app.py's)."""
        self.settings = settings
        self.host = host or settings.server.host
        self.port = settings.server.port if port is None else port
        self.app_factory = app_factory
        self.clock = clock
        self.node: AmlNode | None = None
        self.url = ""
        self._stop = threading.Event()
        self._lock: ExitStack | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._deadline: threading.Timer | None = None
        self._pidfile = False
        self._budget: malloc.RssBudget | None = None

    def start(self) -> None:
        malloc.tune()  # (before the threads: their memory in one arena, large blocks given back)
        key_env = self.settings.server.api_key_env
        require_key_beyond_loopback(self.host, bool(os.environ.get(key_env)), key_env)
        sock = bind(self.host, self.port)
        try:
            if self.settings.aml.store == "sqlite":
                self._take_lock()
            t0 = time.perf_counter()
            self.node = open_node(self.settings, self.clock)
            log.info("Add/Search store: %s (%s mode), opened in %.0f ms", self.node.backend, self.node.mode,
                     (time.perf_counter() - t0) * 1000)
            self._serve(sock)
            self.node.start()
            self._budget = malloc.bound_cache(self.node.aml.index.cache, self.settings.aml.cache_bytes)
            if self.settings.aml.store == "sqlite":  # `status` of the workspace finds this daemon
                self._write_pidfile()
        except BaseException:
            sock.close()
            self.stop()
            raise

    def _take_lock(self) -> None:
        from mateclaw_mem.runtime.aml_store import daemon_lock

        self._lock = ExitStack()
        self._lock.enter_context(daemon_lock(
            self.settings, "SQLite has one writer; many Add/Search daemons need aml.store: postgresql"))

    def _write_pidfile(self) -> None:
        from mateclaw_mem import __version__

        assert self.node is not None
        state, pid = self.settings.state_dir, os.getpid()
        started = self.node.clock.now().isoformat(timespec="seconds")
        pidfile.write(state, pidfile.DaemonRecord(pid, connect_url(self.host, self.url), started, __version__))
        self._pidfile = True

    def _serve(self, sock: socket.socket) -> None:
        import uvicorn

        assert self.node is not None
        app = self.app_factory(self.node, self.host)
        config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=HTTP_STOP_GRACE)
        config.load()
        self._server = uvicorn.Server(config)
        self._thread, self.url = serve_in_thread(self._server, sock, self.host, HTTP_START_TIMEOUT)
        log.info("listening on %s (Add/Search only, auth %s); OpenAPI at %s/docs", self.url,
                 "on" if self.node.api_key else "off", self.url)

    def stop(self) -> None:
        if self._pidfile:
            pidfile.remove(self.settings.state_dir, os.getpid())
            self._pidfile = False
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(HTTP_STOP_GRACE + 5)
            self._server = None
        if self._budget is not None:
            self._budget.stop()
            self._budget = None
        if self.node is not None:
            self.node.close()
            self.node = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._stop.set()
        if self._deadline is None:
            self._deadline = threading.Timer(STOP_DEADLINE, self._forced_exit, args=(signum,))
            self._deadline.daemon = True
            self._deadline.start()
            cancel = threading.Timer(MODEL_CALL_GRACE, self._cancel_model_calls)
            cancel.daemon = True
            cancel.start()

    def _cancel_model_calls(self) -> None:
        """The fact worker's model call still running MODEL_CALL_GRACE after the signal is cancelled,
        so the stop finishes in time (its job stays queued and runs at the next start), as in the full
        daemon (runtime/daemon.py)."""
        node = self.node
        if node is not None and node.model is not None:
            log.info("cancelling the model calls still running %.1f s after the stop began", MODEL_CALL_GRACE)
            node.model.close()

    def _forced_exit(self, signum: int) -> None:
        status = 128 + signum  # not 0: the stop did not finish (runtime/daemon.py, docs/faces.md)
        log.warning("stopping took over %.1f s after %s: exiting now with status %d (every Add acknowledged is "
                    "committed)", STOP_DEADLINE, signal.Signals(signum).name, status)
        if self._pidfile:
            pidfile.remove(self.settings.state_dir, os.getpid())
        logging.shutdown()
        os._exit(status)

    def run_forever(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.start()
        if not gc.isenabled():  # the caller kept it off for the start (cli serve says why)
            gc.freeze()
            gc.enable()
        log.info("ready; Ctrl-C or SIGTERM to stop")
        try:
            while not self._stop.wait(3600):
                pass
        finally:
            log.info("stopping")
            self.stop()
            log.info("stopped")
            if self._deadline is not None:
                self._deadline.cancel()
