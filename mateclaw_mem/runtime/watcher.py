"""Keeps the search index fresh while the daemon runs: hand edits, other processes, missed events.

- A watchdog observer on the workspace. Changed, created, moved and deleted `.md` files are
  re-indexed once their events stop (`Coalescer`): a file is due `quiet_seconds` (50 ms) after its
  last event, a new event restarting the wait, but never later than `max_wait_seconds` (0.5 s)
  after its first, so a file written without pause is still indexed twice a second. A save is a
  few events (truncate, write, close; or an editor's temp file renamed into place): they become one
  ingest of the final content. 50 ms is also the store's settling age: `WorkspaceStore.read`
  re-reads a file changed in the last 50 ms until two reads agree (so a truncating save caught
  half-way is never indexed as the final version), and a file quiet that long is read once,
  without that wait - which is what keeps a burst at disk speed.
- Bursts (a `git checkout` of 1,000 files): every file is one pending entry (a second event for it
  only moves its deadline), and due files are ingested in batches of up to `BATCH` files per
  transaction (`FileIndex.ingest_many`); the batch after it picks up whatever came due meanwhile.
  A new folder asks for a reconcile (its first files may predate its watch), and that reconcile
  waits until the burst is over (`RECONCILE_QUIET`, 0.3 s, without any event; at most
  `RECONCILE_MAX_WAIT`, 3 s): mid-burst it would re-read, one by one, files whose events are queued.
- The daemon's own writes arrive first through the store listener (`FileIndex.on_write`), so when
  their watchdog echo comes the file's mtime and size already match the index: nothing is read.
- Ignored: editor swap and temp files (`.name.tmp` from atomic writes, `*.swp`, `*~`, vim's `4913`,
  emacs' `.#name`), anything in a hidden folder (`.mateclaw/`, `.git/`), anything not `.md`.
- A periodic reconcile (`search.reconcile-interval-seconds`, stat only; a deep one at start) catches
  whatever the observer missed. One worker thread sleeps on a condition until the next due file,
  reconcile or health check: no polling loop, no CPU while nothing changes.
- A dead observer (e.g. inotify limits) is restarted, logged as an error, counted in `status()`,
  and followed by a reconcile for what it missed - never silent. "Dead" includes the threads
  behind it: watchdog's emitters and its one shared inotify reader, which a folder swapped for a
  symbolic link has been seen to kill with a KeyError while the observer thread itself lived on.

`subscribe(fn(agent, owner, rel, deleted))` tells other services about changes this process did not
make itself (hand edits, other processes), e.g. prompt lineage bookkeeping.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from mateclaw_mem.index.files.index import FileIndex
from mateclaw_mem.index.reconcile import reconcile

log = logging.getLogger("mateclaw_mem.watcher")

ChangeListener = Callable[[str, "str | None", str, bool], None]
_RECONCILE = "<reconcile>"
BATCH = 200  # files per ingest transaction in a burst: bounded memory, searches see progress
RECONCILE_QUIET = 0.3
RECONCILE_MAX_WAIT = 3.0


class Coalescer:
    """Pending paths and when each is due. Not thread-safe (the watcher holds its condition); time
    is passed in, so the rules can be checked without waiting."""

    def __init__(self, *, quiet: float, max_wait: float) -> None:
        self.quiet = quiet
        self.max_wait = max_wait
        self._first: dict[str, float] = {}  # path -> when its first pending event came
        self._due: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, path: str) -> bool:
        return path in self._due

    def add(self, path: str, now: float, *, quiet: float | None = None, max_wait: float | None = None) -> None:
        """An event for `path`: due `quiet` from now (restarting the wait), but never later than
        `max_wait` after its first pending event (both default to the coalescer's)."""
        first = self._first.setdefault(path, now)
        wait = self.quiet if quiet is None else quiet
        cap = self.max_wait if max_wait is None else max_wait
        self._due[path] = min(now + wait, first + cap)

    def next_due(self) -> float | None:
        return min(self._due.values(), default=None)

    def pop_due(self, now: float) -> list[str]:
        """The paths due at `now`, in the order their first events came; they are no longer pending."""
        due = [p for p, at in self._due.items() if at <= now]
        for p in due:
            del self._due[p]
            del self._first[p]
        return due


def ignored(path: str) -> bool:
    """True for paths that are never memory files (temp, swap, backup, hidden)."""
    p = Path(path)
    name = p.name
    if not name.endswith(".md"):
        return True  # *.swp, *~, 4913, .tmp and every other non-Markdown file
    return any(part.startswith((".", "#")) for part in p.parts[-8:]) or name.startswith(".#")


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        self.watcher.events += 1
        if event.event_type in ("opened", "closed_no_write"):
            return
        if event.is_directory:
            # A folder created, moved or deleted (a new agent, memory/ removed): files inside it may
            # have no events of their own (created before the folder was watched), so reconcile.
            if event.event_type in ("created", "moved", "deleted"):
                self.watcher._schedule(_RECONCILE)
            return
        paths = [event.src_path]
        dest = getattr(event, "dest_path", "")
        if dest:
            paths.append(dest)
        for raw in paths:
            path = raw.decode() if isinstance(raw, bytes) else str(raw)
            if not ignored(self.watcher._relative(path)):
                self.watcher._schedule(path)


class Watcher:
    def __init__(
        self,
        index: FileIndex,
        root: Path,
        *,
        reconcile_interval: float = 300.0,
        quiet_seconds: float = 0.05,
        max_wait_seconds: float = 0.5,
        health_interval: float = 5.0,
        on_reconcile: Callable[[], None] | None = None,
        live: bool = True,
    ) -> None:
        self.index = index
        self.root = Path(root)
        self.reconcile_interval = reconcile_interval
        # `search.watch: false`: no file observer (a network share without inotify, or a workspace too
        # big for the watch limit). This process's own writes still reach the index through the store's
        # listeners; a hand save is found after the next periodic reconcile (reconcile_interval).
        self.live = live
        self.health_interval = health_interval
        self._on_reconcile = on_reconcile
        self._listeners: list[ChangeListener] = []
        self._cond = threading.Condition()
        self._pending = Coalescer(quiet=quiet_seconds, max_wait=max_wait_seconds)
        self._observer: Any = None
        self._handler: _Handler | None = None
        self._watches: dict[str, Any] = {}  # top-level folder -> its recursive watch
        self._worker: threading.Thread | None = None
        self._stopping = threading.Event()
        self._busy = False
        self.state = "stopped"
        self.restarts = 0
        self.last_error: str | None = None
        self.last_restart: float | None = None  # unix time of the last restart
        self.restart_reason: str | None = None  # our own words only: shown by /health
        self.last_event_at: float | None = None
        self.last_reconcile: dict | None = None
        self.ingested = 0
        self.events = 0  # file events the observer delivered (hidden folders are not watched at all)

    # -- public ----------------------------------------------------------------------------------

    def subscribe(self, fn: ChangeListener) -> None:
        """`fn(agent, owner, rel, deleted)` after a change this process did not write is indexed.

        A write of this process that lands while a reconcile is scanning can be reported too:
        listeners should be idempotent on the file's content hash."""
        self._listeners.append(fn)

    def start(self) -> None:
        if self._worker is not None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        self._stopping.clear()
        if not self.live:
            self.state = f"reconcile only (search.watch: false; every {self.reconcile_interval:g} s)"
        else:
            self._start_live()
        with self._cond:
            self._busy = True  # the start-up reconcile: not idle until it is done
        self._worker = threading.Thread(target=self._run, name="index-watcher", daemon=True)
        self._worker.start()

    def _start_live(self) -> None:
        _forget_dead_inotify_reader()
        try:
            self._start_observer()
        except OSError as exc:  # e.g. the inotify watch limit: watch on through reconcile, retry
            self.state = "failed"
            self.last_error = f"file observer could not start: {exc}"
            log.error("file observer could not start: %s (retrying; reconcile keeps the index fresh)", exc)

    def stop(self) -> None:
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        if self._worker is not None:
            self._worker.join(timeout=10)
            self._worker = None
        self._stop_observer()
        self.state = "stopped"

    def status(self) -> dict:
        with self._cond:
            pending = len(self._pending)
        return {
            "state": self.state,
            "restarts": self.restarts,
            "last_restart": self.last_restart,
            "restart_reason": self.restart_reason,
            "last_error": self.last_error,
            "pending": pending,
            "ingested": self.ingested,
            "events": self.events,
            "last_reconcile": self.last_reconcile,
        }

    def idle(self) -> bool:
        """Nothing queued and nothing being processed (tests wait on this, with their own timeout)."""
        with self._cond:
            return not self._pending and not self._busy

    # -- observer --------------------------------------------------------------------------------

    def _start_observer(self) -> None:
        # The top level alone, and each visible folder in it recursively - not the root recursively:
        # the hidden `.mateclaw/` holds the databases, and every SQLite page an AML Add wrote came
        # back as inotify events to read, build and ignore (7% of the daemon's CPU under Adds).
        observer = Observer()
        self._handler = _Handler(self)
        self._watches = {}
        observer.schedule(self._handler, str(self.root), recursive=False)
        observer.daemon = True
        observer.start()
        self._observer = observer
        self._sync_watches()
        self.state = "running"

    def _sync_watches(self) -> None:
        """One recursive watch per visible top-level folder: new folders watched, gone ones (or ones
        whose emitter died with them) dropped. Run on start, with every reconcile (a new folder asks
        for one) and with the health check."""
        observer = self._observer
        if observer is None or not observer.is_alive():  # a dead observer is restarted whole
            return
        try:
            folders = {c.name for c in self.root.iterdir()
                       if not c.name.startswith((".", "#")) and c.is_dir() and not c.is_symlink()}
        except OSError:
            folders = set()
        alive = {id(e.watch) for e in getattr(observer, "emitters", ()) if e.is_alive()}
        for name, watch in list(self._watches.items()):
            if name not in folders or id(watch) not in alive:
                with contextlib.suppress(KeyError):  # watchdog dropped it already
                    observer.unschedule(watch)
                del self._watches[name]
        for name in sorted(folders - set(self._watches)):
            try:
                self._watches[name] = observer.schedule(self._handler, str(self.root / name), recursive=True)
            except OSError as exc:  # gone again, or out of inotify watches: reconcile still covers it
                log.warning("could not watch %s: %s", name, exc)

    def _stop_observer(self) -> None:
        observer, self._observer = self._observer, None
        self._watches = {}
        if observer is not None:
            try:
                observer.stop()
                observer.join(timeout=5)
            except Exception:
                log.exception("error while stopping the file observer")

    def _check_health(self) -> None:
        if not self.live:
            return  # no observer to keep alive
        self._sync_watches()  # a folder removed took its emitter with it: that is no death
        dead = _dead_part(self._observer)
        if dead is None:
            return
        self.restarts += 1
        self.last_restart = time.time()
        self.restart_reason = f"{dead} stopped unexpectedly; restarted"
        self.last_error = f"file observer: {self.restart_reason}"
        log.error("%s died; restarting the file observer (restart %d) and reconciling the index", dead,
                  self.restarts)
        self._stop_observer()
        _forget_dead_inotify_reader()
        try:
            self._start_observer()
        except Exception as exc:
            self.state = "failed"
            self.last_error = f"file observer could not restart: {exc}"
            log.error("file observer could not restart: %s (retrying; reconcile keeps the index fresh)", exc)
            return
        self._schedule(_RECONCILE, delay=0)

    # -- queue -----------------------------------------------------------------------------------

    def _relative(self, path: str) -> str:
        try:
            return Path(path).relative_to(self.root).as_posix()
        except ValueError:
            return path

    def _schedule(self, path: str, *, delay: float | None = None) -> None:
        with self._cond:
            now = time.monotonic()
            if path == _RECONCILE:
                quiet = RECONCILE_QUIET if delay is None else delay
                self._pending.add(path, now, quiet=quiet, max_wait=RECONCILE_MAX_WAIT)
            else:
                self._pending.add(path, now, quiet=delay)
                if _RECONCILE in self._pending:  # still a burst: the reconcile waits for its end
                    self._pending.add(_RECONCILE, now, quiet=RECONCILE_QUIET, max_wait=RECONCILE_MAX_WAIT)
            self.last_event_at = time.time()
            self._cond.notify_all()

    def _run(self) -> None:
        now = time.monotonic()
        next_reconcile = now + self.reconcile_interval
        next_health = now + self.health_interval
        try:
            self._do_reconcile(deep=True)  # whatever changed while no daemon was watching
        finally:
            with self._cond:
                self._busy = False
        while not self._stopping.is_set():
            with self._cond:
                now = time.monotonic()
                due = self._pending.pop_due(now)
                if not due and now < next_reconcile and now < next_health:
                    first = self._pending.next_due()
                    wake = min(next_reconcile, next_health, first if first is not None else next_health)
                    self._cond.wait(timeout=max(0.0, wake - now))
                    continue
                self._busy = True
            try:
                self._process(due)
                now = time.monotonic()
                if now >= next_health:
                    next_health = now + self.health_interval
                    self._check_health()
                if now >= next_reconcile:
                    next_reconcile = now + self.reconcile_interval
                    self._do_reconcile(deep=False)
            except Exception as exc:  # keep watching; say what went wrong
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("index watcher error")
            finally:
                with self._cond:
                    self._busy = False

    def _process(self, due: list[str]) -> None:
        """Index what came due: the files in batches, then a reconcile for anything without events."""
        reconcile_too = _RECONCILE in due
        if reconcile_too:
            due.remove(_RECONCILE)
        keys = [where for where in map(self.index.locate, map(Path, due)) if where is not None]
        for start in range(0, len(keys), BATCH):
            for result in self.index.ingest_many(keys[start : start + BATCH]):
                if result.changed:
                    self.ingested += 1
                    self._notify(result.agent, result.owner, result.rel, result.deleted)
        if reconcile_too:
            self._do_reconcile(deep=False)

    def _do_reconcile(self, *, deep: bool) -> None:
        self._sync_watches()  # first: what the scan finds, later events of the new folder add to
        try:
            report = reconcile(self.index, deep=deep)
        except Exception as exc:
            self.last_error = f"reconcile failed: {type(exc).__name__}: {exc}"
            log.exception("index reconcile failed")
            return
        self.last_reconcile = {"at": self.index.last_sync_ms, "deep": deep, **report.to_dict()}
        if report.touched:
            log.info("reconcile: %d added, %d changed, %d removed", len(report.added), len(report.changed),
                     len(report.removed))
        for agent, owner, rel in report.added + report.changed:
            self._notify(agent, owner, rel, False)
        for agent, owner, rel in report.removed:
            self._notify(agent, owner, rel, True)
        if self._on_reconcile is not None:
            self._on_reconcile()

    def _notify(self, agent: str, owner: str | None, rel: str, deleted: bool) -> None:
        for fn in list(self._listeners):
            try:
                fn(agent, owner, rel, deleted)
            except Exception:
                log.exception("watcher listener failed for %s/%s", agent, rel)


def _inotify_reader() -> Any:
    """watchdog's one inotify reader thread, shared by every observer in the process (None when
    inotify is not in use). Private to watchdog, so looked up defensively: if it moves, the check
    falls back to the observer and emitter threads."""
    try:
        from watchdog.observers import inotify_c
    except ImportError:  # not Linux
        return None
    return getattr(getattr(inotify_c, "InotifyFD", None), "_instance", None)


def _dead_part(observer: Any) -> str | None:
    """Which part of the observer is no longer running, or None when all of it is."""
    if observer is None or not observer.is_alive():
        return "the observer thread"
    if not all(e.is_alive() for e in getattr(observer, "emitters", ())):
        return "an event emitter thread"
    reader = _inotify_reader()
    if reader is not None and not reader.is_alive():
        return "the inotify reader thread"
    return None


def _forget_dead_inotify_reader() -> None:
    """A dead shared reader would be handed to the new observer again: drop it so a fresh one is
    made (watchdog creates it when the instance is None)."""
    reader = _inotify_reader()
    if reader is None or reader.is_alive():
        return
    from watchdog.observers import inotify_c

    with inotify_c.InotifyFD._global_lock:
        if inotify_c.InotifyFD._instance is reader:
            inotify_c.InotifyFD._instance = None
