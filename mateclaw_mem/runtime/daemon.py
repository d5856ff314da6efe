"""The long-running process: one per workspace, started by `mateclaw-mem serve`.

It binds its port (a busy port stops it before the workspace is touched), takes the daemon lock (a
second daemon on the same workspace refuses to start), seeds the workspace, builds what AML
searches and /health read (`BEFORE_LISTENING`), starts the HTTP API (uvicorn, with MCP mounted at
`/mcp`), then builds every other service and the routes after `/health`, the agents' and the AML
contract's (api/deferred.py: AML searches are answered meanwhile, every other request waits for it),
then starts the extraction workers, the file watcher and the scheduler (`Services.start`), writes
`.mateclaw/daemon.json` (pid and URL, for `status`), and stops them cleanly, in reverse order, on
SIGTERM / Ctrl-C: running extractions finish, queued ones are kept.

Nothing here polls: the main thread sleeps on an Event that the signal handler sets, the watcher
sleeps on OS file events, the scheduler on its next fire time, the workers on their queue.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout

from mateclaw_mem.errors import BusyError, ConfigError
from mateclaw_mem.runtime import heal, malloc, pidfile, recovery
from mateclaw_mem.runtime.net import bind, connect_url, require_key_beyond_loopback, serve_in_thread
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.workspace.atomic import clean_temp_files

if TYPE_CHECKING:
    import socket

log = logging.getLogger("mateclaw_mem.daemon")

# (services, host) -> an ASGI app
AppFactory = Callable[[Services, str], Any]

HTTP_START_TIMEOUT = 30.0
HTTP_STOP_GRACE = 5  # seconds uvicorn waits for open requests before closing them
# Seconds from SIGTERM / Ctrl-C to exit whatever is running: a service manager waits about 5 s before
# its SIGKILL, and a facts rebuild of a 100,000-heading file kept the daemon up for minutes. What is
# cut short is left as a crash leaves it (every write is atomic, every database transactional, queued
# work persisted), so the next start picks it up.
STOP_DEADLINE = 3.5
MODEL_CALL_GRACE = 2.5  # seconds from SIGTERM to cancelling the model calls still in flight
_BUILD_SWITCH_INTERVAL = 0.0001  # seconds: how often the later routes' build lets a request run
# The services built before the daemon listens: what an AML search and /health read, and what the app
# reads as it is composed (api/app.py). The rest (the memory services, ~80% of the build, mostly their
# imports) is built just after it listens, while searches are answered (Services.build says how).
BEFORE_LISTENING = frozenset({"api_key", "store", "log", "model", "embeddings", "model_probe", "message_index",
                              "aml", "lineage", "transfer"})


class Daemon:
    def __init__(
        self,
        services: Services,
        *,
        host: str | None = None,
        port: int | None = None,
        app_factory: AppFactory | None = None,
        checked: heal.Check | None = None,
    ) -> None:
        """`app_factory` builds the HTTP face (the CLI passes `api.app.create_app`): runtime sits
        below the faces, so it is handed the app rather than importing it. None = no HTTP.
        `checked`: the databases' page check, begun before the imports (`heal.begin_check`)."""
        self.services = services
        self._checked = checked
        self.app_factory = app_factory
        self.http = app_factory is not None
        self.host = host or services.settings.server.host
        self.port = services.settings.server.port if port is None else port
        self.url = ""
        self._stop = threading.Event()
        self._lock: FileLock | None = None
        self._stoppers: list[tuple[str, Callable[[], None]]] = []
        self._server: Any = None
        self._server_thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._stopping = ""  # the part `stop` is waiting for, for the forced exit's log line
        self._deadline: threading.Timer | None = None

    @property
    def lock_path(self) -> Path:
        return self.services.settings.state_dir / "daemon.lock"

    def start(self) -> None:
        malloc.tune()  # (before the threads: their memory in one arena, large blocks given back)
        self._check_auth()
        # The port first: "address in use" must stop us before anything touches the workspace.
        self._sock = self._bind() if self.http else None
        try:
            self._take_lock()
        except BaseException:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
            raise
        try:
            self._start_parts()
        except BaseException:
            self.stop()
            raise

    def _bind(self) -> socket.socket:
        try:
            return bind(self.host, self.port)
        except ConfigError:
            # Most often this workspace's own daemon holds the port: say that, as the lock would.
            record, _ = pidfile.live_record(self.services.settings.state_dir)
            if record is not None:
                raise BusyError(f"another mateclaw-mem daemon (pid {record.pid}) is already running on workspace "
                                f"{self.services.settings.workspace} at {record.url}") from None
            raise

    def _take_lock(self) -> None:
        settings = self.services.settings
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = FileLock(str(self.lock_path))
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            self._lock = None
            raise BusyError(
                f"another mateclaw-mem daemon is already running on workspace {settings.workspace.resolve()}"
            ) from None

    def _check_auth(self) -> None:
        if self.http:
            require_key_beyond_loopback(self.host, bool(self.services.api_key),
                                        self.services.settings.server.api_key_env)

    def _start_parts(self) -> None:
        settings = self.services.settings
        # Before anything opens a database: a damaged one is set aside (runtime/heal.py), never fatal.
        heal.at_daemon_start(self.services, self._checked)
        removed = clean_temp_files(settings.workspace)
        if removed:
            log.info("removed %d temp file(s) left by an interrupted write", removed)
        for agent, created in self.services.seed_agents().items():
            if created:
                log.info("seeded agent %r: %s", agent, ", ".join(created))
        log.info("workspace %s", settings.workspace.resolve())
        log.info("config %s", settings.config_path or "(built-in defaults)")
        if self.services.mode == "rules":
            log.info("mode: rules (no model configured; deterministic extraction and consolidation)")
        else:
            log.info("mode: model %s at %s", settings.model.model, settings.model.base_url)

        sock, self._sock = self._sock, None  # bound in start(), before the workspace was touched
        # Then every service, built in one order on this thread while no worker exists (an index
        # left by another tokenizer version is rebuilt here, not inside the first request), then
        # the background work: workers (they resume persisted work), then the sources of new work
        # (watcher, scheduler). Services.BUILD_ORDER and START_ORDER say which, in which order.
        t0 = time.perf_counter()
        # With HTTP, only what answers AML searches and /health before it listens; the rest right after.
        self.services.build(BEFORE_LISTENING if sock is not None else None)
        heal.after_build(self.services)
        recovery.at_start(self.services)  # operations a crash interrupted, finished before any worker runs
        log.info("services built in %.0f ms%s", (time.perf_counter() - t0) * 1000,
                 " (the rest once it listens)" if sock is not None else "")
        # Then the HTTP face, before the background work: what a request can reach before the rest is
        # built exists (LaneApp holds the others until then), and the watcher's catch-up with the disk
        # (CPU-bound) and the scheduler's first heartbeat would otherwise share the GIL with uvicorn's start. A request
        # that comes before a worker runs is not lost: pending work is in state.db and start()
        # resumes it; /health says "catching up" until the watcher's first reconcile is done.
        # Stopped after the HTTP API (stoppers run newest first): no request meets a stopping worker.
        self.add_stopper("background work", self.services.stop)
        if sock is not None:
            server = self._prepare_http()
            if getattr(server.config.app, "deferred", None) is None:
                self.services.build()  # an app that holds no request for the rest gets it before it listens
            self._start_http(server, sock)
            self._finish_app(server.config.app)
        t1 = time.perf_counter()
        self.services.start()
        log.info("background work started in %.0f ms", (time.perf_counter() - t1) * 1000)
        for job, when in self.services.scheduler.next_runs().items():
            log.info("next run: %s at %s", job, when or "never (disabled)")
        if self.services.model_probe is not None:  # does the model answer? In the background, once
            self.services.model_probe.start()
            self.add_stopper("model probe", self.services.model_probe.stop)
        log.info("start-up took %.0f ms (the index catches up in the background; /health says when it has)",
                 (time.perf_counter() - t0) * 1000)
        self._bound_memory()
        self._write_pidfile()
        heal.check_skipped(self.services)

    def _bound_memory(self) -> None:
        """From now on the Add/Search cache keeps RSS within `aml.cache-bytes` of what the daemon
        takes now, idle (runtime/malloc.RssBudget)."""
        budget = malloc.bound_cache(self.services.message_index.cache, self.services.settings.aml.cache_bytes)
        self.add_stopper("RSS budget", budget.stop)

    def _write_pidfile(self) -> None:
        from mateclaw_mem import __version__

        state_dir = self.services.settings.state_dir
        pid = os.getpid()
        started = self.services.clock.now().isoformat(timespec="seconds")
        pidfile.write(state_dir, pidfile.DaemonRecord(pid, self._connect_url() or None, started, __version__))
        self.add_stopper("pid file", lambda: pidfile.remove(state_dir, pid))

    def _connect_url(self) -> str:
        return connect_url(self.host, self.url)

    def _prepare_http(self) -> Any:
        """The app and its uvicorn server, loaded but not serving yet."""
        import uvicorn

        assert self.app_factory is not None
        t0 = time.perf_counter()
        app = self.app_factory(self.services, self.host)
        # Our MCP endpoint is stateless: the SDK's "Terminating session: None" (INFO) would be one line per call.
        for name in ("mcp.server.streamable_http", "mcp.server.streamable_http_manager"):
            logging.getLogger(name).setLevel(logging.WARNING)
        config = uvicorn.Config(
            app,
            log_config=None,  # keep our logging set-up
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=HTTP_STOP_GRACE,
        )
        config.load()  # imports the protocol and lifespan modules now; `run` skips a loaded config
        log.info("HTTP API composed in %.0f ms", (time.perf_counter() - t0) * 1000)
        return uvicorn.Server(config)

    def _start_http(self, server: Any, sock: socket.socket) -> None:
        self._server = server
        self.add_stopper("HTTP API", self._stop_http)
        self._server_thread, self.url = serve_in_thread(server, sock, self.host, HTTP_START_TIMEOUT)
        log.info("listening on %s (auth %s); OpenAPI at %s/docs; MCP at %s/mcp",
                 self.url, "on" if self.services.api_key else "off", self.url, self.url)

    def _finish_app(self, app: Any) -> None:
        """The services and routes left to build once it listens (`app.deferred`, api/deferred.py):
        built now, before the background work competes for the interpreter; requests for them wait."""
        deferred = getattr(app, "deferred", None)
        if deferred is None:
            return
        # The build is pure Python: at the default 5 ms switch interval a request arriving meanwhile
        # (the first /health) waited up to 5 ms at each of its many thread hand-offs, ~100 ms in all.
        switch = sys.getswitchinterval()
        sys.setswitchinterval(min(switch, _BUILD_SWITCH_INTERVAL))
        t0 = time.perf_counter()
        try:
            deferred.finish(first=lambda pause: self.services.build(pause=pause))
        finally:
            sys.setswitchinterval(switch)
        log.info("the other services and HTTP routes built in %.0f ms (%d request(s) waited for them)",
                 (time.perf_counter() - t0) * 1000, deferred.held)

    def _stop_http(self) -> None:
        if self._server is None or self._server_thread is None:
            return
        self._server.should_exit = True
        self._server_thread.join(HTTP_STOP_GRACE + 5)
        self._server = None

    def add_stopper(self, label: str, fn: Callable[[], None]) -> None:
        self._stoppers.append((label, fn))

    def request_stop(self, *_: object) -> None:
        self._stop.set()

    def _on_signal(self, signum: int, _frame: object) -> None:
        """SIGTERM / SIGINT: stop in order, and exit by STOP_DEADLINE whatever is still running (the
        timer is a thread of its own: it fires even while this main thread is busy starting)."""
        self.request_stop()
        if self._deadline is None:
            self._deadline = threading.Timer(STOP_DEADLINE, self._forced_exit, args=(signum,))
            self._deadline.daemon = True
            self._deadline.start()
            cancel = threading.Timer(MODEL_CALL_GRACE, self._cancel_model_calls)
            cancel.daemon = True
            cancel.start()

    def _cancel_model_calls(self) -> None:
        """Model calls still running MODEL_CALL_GRACE after the signal are cancelled, so the stop
        finishes in time: a local model takes tens of seconds an extraction, a hung one for ever, and
        the workers' stop waits for the run in flight. A cancelled run stays pending and resumes at
        the next start, as a run cut short by a crash does; the stop itself is clean (exit 0, the
        clean-stop mark written: the next start skips the page-by-page check).

        So do the chat proxy's answers still streaming or awaited: the HTTP server's stop waits for
        every open response, and a chat client reading a long answer held the stop to its deadline.
        Each ends with an error that says why, in OpenAI's shape (a stream's last event, else a 503),
        which every OpenAI SDK raises as such; what a stream had said is learnt as from any stream."""
        if self.services.built("model") and self.services.model is not None:
            log.info("cancelling the model calls still running %.1f s after the stop began", MODEL_CALL_GRACE)
            self.services.model.close()
        proxy = self.services.chat_proxy if self.services.built("chat_proxy") else None
        if proxy is not None and proxy.upstream is not None:
            ended = proxy.upstream.end_calls()
            if ended:
                log.info("ended %d chat proxy answer(s) still open %.1f s after the stop began", ended,
                         MODEL_CALL_GRACE)

    def _forced_exit(self, signum: int) -> None:
        waiting = self._stopping or "the start"
        # Not 0: whoever waits on the stop (a supervisor, a script) must see that it did not finish.
        # 128 + the signal, as a shell reports a process that signal ended (docs/faces.md).
        status = 128 + signum
        log.warning("stopping took over %.1f s after %s (still waiting for %s): exiting now with status %d; work "
                    "in flight is left as a crash leaves it and is picked up at the next start", STOP_DEADLINE,
                    signal.Signals(signum).name, waiting, status)
        pidfile.remove(self.services.settings.state_dir, os.getpid())
        logging.shutdown()
        os._exit(status)

    def wait(self) -> None:
        # Event.wait with a timeout keeps the main thread responsive to signals without busy polling.
        while not self._stop.wait(3600):
            pass

    def stop(self) -> None:
        while self._stoppers:
            label, fn = self._stoppers.pop()
            self._stopping = label
            try:
                fn()
                log.info("%s stopped", label)
            except Exception:
                log.exception("error while stopping the %s", label)
        if self._sock is not None:  # bound, never handed to uvicorn
            self._sock.close()
            self._sock = None
        self.services.close()
        if self._lock is not None:
            # (Every database closed, under the lock.)
            heal.mark_clean_stop(self.services.settings, damaged=self.services.heal_damaged)
            self._lock.release()
            self._lock = None
        log.info("stopped")

    def run_forever(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.start()
        if not gc.isenabled():  # the caller kept it off for the start (cli serve says why)
            gc.freeze()  # the start-up's objects (and its few hundred garbage ones) are never walked again
            gc.enable()
        log.info("ready; Ctrl-C or SIGTERM to stop")
        try:
            self.wait()
        finally:
            log.info("stopping")
            self.stop()
            if self._deadline is not None:
                self._deadline.cancel()
