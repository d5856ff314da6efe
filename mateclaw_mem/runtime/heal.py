"""A damaged database never keeps the daemon down: what each SQLite file under `.mateclaw/` holds,
and what happens when one is damaged (not a database, malformed pages).

Every damaged file is moved aside, never deleted: `<name>.damaged-<YYYYmmddTHHMMSS>` with its WAL and
shared-memory files beside it, and a note (`….json`: what was wrong, when) that `status`, `/health`
and `doctor` read. Then:

- a DERIVED file (rebuildable from the memory files or the conversation log) is rebuilt where it is
  next opened: the file index by the daemon's start-up catch-up (or a CLI search's), the message
  index from log.db when the Add/Search service is built, the fact projection here (`after_build`);
- a LOG (rows nothing else holds) is started anew, empty, with its AUTOINCREMENT counters continued
  from the damaged file where they can be read, so new rows never reuse an id; `mateclaw-mem doctor
  --salvage FILE` (runtime/salvage.py) copies the readable rows back into it.

Who checks: the daemon, at start, with `PRAGMA quick_check` (every page; before it builds anything) -
except a file just as the daemon's last clean stop left it (`CLEAN_STOP`: the same inode, size,
modification and change times, no WAL beside it), whose header and schema are read: nothing has
written it since a stop that closed it whole, and reading every page was the one part of a start that
grew with the history (~0.7 ms a MB: ~0.3 s for 300,000 messages, ~1 s for a million); their pages
are read a few seconds after the start instead (`check_skipped`); a CLI command
before it first opens a database (every page of a file up to 4 MB, the header and schema of a larger
one; `reindex` every page); `doctor`, every page, on demand. Only a process that
holds the workspace's daemon lock moves files: a running daemon has them open, and a file renamed
under it would go on receiving its writes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mateclaw_mem import db

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.memory.facts.service import FactService
    from mateclaw_mem.settings import Settings

log = logging.getLogger("mateclaw_mem.heal")


class Container(Protocol):
    """What the checks read and mark on the container (runtime/services.py `Services`, which calls them)."""

    settings: Settings
    clock: Clock
    heal_checked: bool  # this process checked its databases before opening one
    set_aside_now: list[Any]  # what this process's check set aside (SetAside records)
    heal_skipped: frozenset[str]  # files the start read only the header of (`check_skipped` reads the rest)
    heal_damaged: set[str]  # ... of which `check_skipped` found damaged

    @property
    def facts(self) -> FactService: ...


@dataclass(frozen=True)
class Database:
    name: str
    derived: bool
    holds: str
    # Tables of a log that are derived all the same: rebuilt from their source, never salvaged.
    derived_tables: tuple[str, ...] = ()


DATABASES: tuple[Database, ...] = (
    Database("index.db", True, "the file search index: the memory files' chunks and a copy of the conversation log"),
    Database("messages.db", True, "the Add/Search message index, built from the conversation log"),
    # The projection is rebuilt from PROFILE.md, MEMORY.md and structured/; the events (feedback,
    # confirmations, edits, uses, forgets) and the contradiction inbox's decisions exist only here.
    Database("facts.db", False, "fact events (feedback, confirmations, edits) and the contradiction inbox; "
             "the fact projection in it is rebuilt from the memory files", derived_tables=("facts", "facts_fts")),
    # A tombstone is what keeps a forgotten claim from being learned again: nothing else holds it.
    Database("forget.db", False, "tombstones of forgotten claims and the purges due after the undo window"),
    Database("log.db", False, "the conversation log, extraction and dream runs, model usage, retrievals, "
             "AML facts, chat imports"),
    # Bookkeeping rather than content, but nothing rebuilds it: a new one forgets queued extraction
    # work, cooldowns, how far each conversation was read, schedules' last runs, harness lineage.
    Database("state.db", False, "bookkeeping: queued extraction work, cooldowns, how far each conversation was "
             "read, schedules, harness lineage, SOUL proposals"),
)
BY_NAME = {d.name: d for d in DATABASES}
SET_ASIDE = re.compile(r"(?P<db>[a-z_]+\.db)\.damaged-(?P<stamp>\d{8}T\d{6})(?:-\d+)?")


@dataclass(frozen=True)
class SetAside:
    database: str
    moved_to: Path
    problem: str
    derived: bool


def check_all(settings: Settings, *, pages_up_to: int | None = None) -> dict[str, str]:
    """{name: what is wrong} for each damaged database (db.check), checked side by side: SQLite
    reads outside the GIL, so the start waits for the largest file, not for all of them."""
    return begin_check(settings, pages_up_to=pages_up_to)()


class Check:
    """A check begun (`begin_check`): called, what it found ({name: what is wrong}); `skipped`: the
    files it read only the header and schema of, as the last clean stop left them."""

    def __init__(self, result: Callable[[], dict[str, str]], skipped: frozenset[str]) -> None:
        self._result, self.skipped = result, skipped

    def __call__(self) -> dict[str, str]:
        return self._result()


def begin_check(settings: Settings, *, pages_up_to: int | None = None) -> Check:
    """`check_all` begun now on threads of its own; the function returned waits for its answer.
    The daemon begins it before it imports its HTTP face: reading every page of a 100k-message
    workspace (~65 MB) took 90-250 ms, and SQLite reads outside the GIL, so it runs beside the
    imports instead of after them. A file as the last clean stop left it (`untouched`) has only its
    header and schema read. It only reads: what it finds is set aside by `at_daemon_start`, under the
    daemon lock, as before."""
    paths = [settings.state_dir / d.name for d in DATABASES]
    same = untouched(settings)
    if same:
        log.info("%s as the last clean stop left them: header and schema read, not every page",
                 ", ".join(sorted(same)))
    pool = ThreadPoolExecutor(max_workers=len(paths), thread_name_prefix="db-check")
    futures = [pool.submit(db.check, p, pages_up_to=0 if p.name in same else pages_up_to) for p in paths]
    pool.shutdown(wait=False)  # the threads end with their check

    def result() -> dict[str, str]:
        found = [f.result() for f in futures]
        return {p.name: problem for p, problem in zip(paths, found, strict=True) if problem is not None}

    return Check(result, frozenset(same))


# What the daemon's last clean stop left (`mark_clean_stop`): {file name: `_identity`}.
CLEAN_STOP = "clean-stop.json"


def _identity(path: Path) -> list[int] | None:
    """What changes with any write to the file - by SQLite, an editor, a sync tool, `cp` over it:
    the change time cannot be set back by a writer - or None: no file, or a WAL beside it (pages
    committed to the WAL and not yet to the file: a process has it open, or one ended without
    closing it)."""
    try:
        st = path.stat()
    except OSError:
        return None
    if Path(f"{path}-wal").exists():
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def mark_clean_stop(settings: Settings, *, damaged: Iterable[str] = ()) -> None:
    """Remember each database as a daemon's clean stop leaves it (called once every connection is
    closed, under the daemon lock): the next start reads every page only of what changed since, and
    of the `damaged` ones (`check_skipped` found them so)."""
    bad = set(damaged)
    marks = {d.name: got for d in DATABASES
             if d.name not in bad and (got := _identity(settings.state_dir / d.name)) is not None}
    path = settings.state_dir / CLEAN_STOP
    tmp = Path(f"{path}.tmp")
    try:
        tmp.write_text(json.dumps(marks), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:  # (the next start then reads every page, as it always did)
        log.warning("could not record the clean stop (%s): the next start reads every page of every database", exc)


def untouched(settings: Settings) -> set[str]:
    """The databases just as the last clean stop left them (`mark_clean_stop`)."""
    try:
        marks = json.loads((settings.state_dir / CLEAN_STOP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    if not isinstance(marks, dict):
        return set()
    return {d.name for d in DATABASES
            if (got := _identity(settings.state_dir / d.name)) is not None and marks.get(d.name) == got}


def set_aside(settings: Settings, clock: Clock, problems: dict[str, str]) -> list[SetAside]:
    """Move each damaged database aside and say so in one log line per file; a log is started
    anew with its counters continued. The caller holds the daemon lock (see the module's doc)."""
    from mateclaw_mem.runtime import salvage

    stamp = clock.now().strftime("%Y%m%dT%H%M%S")
    out = []
    for name, problem in problems.items():
        spec = BY_NAME[name]
        path = settings.state_dir / name
        moved = db.set_aside(path, stamp)
        counters = None if spec.derived else salvage.sequences(moved)
        if counters:
            salvage.seed(path, counters)
        _note(moved, {"database": name, "problem": problem, "set_aside_at": clock.now().isoformat(timespec="seconds"),
                      "derived": spec.derived, "counters": counters})
        if spec.derived:
            log.warning("%s is damaged (%s): set aside as %s; rebuilt from %s", path, problem, moved,
                        "the memory files and the conversation log" if name == "index.db" else "the conversation log")
        else:
            log.warning("%s is damaged (%s): set aside as %s and started anew, empty; "
                        "`mateclaw-mem doctor --salvage %s` copies its readable rows back", path, problem, moved, moved)
        out.append(SetAside(name, moved, problem, spec.derived))
        if name == "log.db" and not (counters or {}).get("messages"):
            _forget_log_copies(settings, problems)
    return out


def _forget_log_copies(settings: Settings, problems: dict[str, str]) -> None:
    """The new log's message ids start again at 1 when the old ones could not be read: the indexes
    that copy the log (up to a watermark, by id) would skip every new turn below their watermark.
    They are derived: removed here, rebuilt from the new log like a damaged one."""
    for name in ("index.db", "messages.db"):
        path = settings.state_dir / name
        if name in problems or not path.exists():
            continue
        for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            p.unlink(missing_ok=True)
        log.warning("%s removed: it indexed the set-aside conversation log by message ids the new log "
                    "reuses; rebuilt from the new log", path)


def _note(moved: Path, data: dict[str, Any]) -> None:
    note = Path(f"{moved}.json")
    tmp = Path(f"{note}.tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(tmp, note)


def read_note(moved: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(f"{moved}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_salvage(moved: Path, result: dict[str, Any], at: str) -> None:
    """Remember a salvage's counts beside the file (`status` says it was done, and what it got); a
    second salvage copies only what the first could not, so the rows copied add up."""
    note = read_note(moved)
    before = note.get("salvaged") or {}
    copied = int(before.get("copied", 0)) + result["copied"]
    _note(moved, {**note, "salvaged": {"at": at, "readable": result["read"], "copied": copied}})


# -- who checks ----------------------------------------------------------------------------------


def at_daemon_start(services: Container, begun: Check | None = None) -> list[SetAside]:
    """The daemon's check, before it builds anything (it holds the daemon lock): every page, but of
    the files as the last clean stop left them (`check_skipped` reads theirs once the daemon runs).
    `begun`: the same check begun earlier (`begin_check` on the same settings), waited for here."""
    services.heal_checked = True
    check = begun or begin_check(services.settings)
    problems = check()
    healed = set_aside(services.settings, services.clock, problems) if problems else []
    services.set_aside_now = healed
    services.heal_skipped = check.skipped - problems.keys()
    return healed


def check_skipped(services: Container, *, delay: float = 5.0) -> threading.Thread | None:
    """Every page of the files the start read only the header of, on a thread of its own `delay` s
    after the daemon is up (SQLite reads outside the GIL; a million messages is ~1 s of one core).
    A bad page that no file time shows (a failing disk) is found a few seconds after the start rather
    than never: named in the log, and the clean-stop mark dropped, so the next start reads every page
    and sets the file aside (a file in use is never moved)."""
    names = sorted(services.heal_skipped)
    if not names:
        return None
    state_dir = services.settings.state_dir
    found = services.heal_damaged

    def run() -> None:
        if delay:
            time.sleep(delay)
        for name in names:
            problem = db.check(state_dir / name)
            if problem is None:
                continue
            found.add(name)  # (this daemon's clean stop leaves it unmarked)
            (state_dir / CLEAN_STOP).unlink(missing_ok=True)  # (and a crash leaves no mark at all)
            log.error("%s is damaged (%s); unchanged since the last clean stop, it was not read page by page at"
                      " start: restart the daemon to set it aside (%s)", state_dir / name, problem,
                      "rebuilt from its source" if BY_NAME[name].derived else
                      "then `mateclaw-mem doctor --salvage` copies back what can be read")

    thread = threading.Thread(target=run, name="db-check-later", daemon=True)
    thread.start()
    return thread


# A CLI command reads every page of a file up to this size, only the header and schema (<1 ms) of a
# larger one: quick_check took 32-55 ms on the 14 MB index.db of 10,000 sections (2 shared cores),
# too much to add to every `search`. The daemon's start, `reindex` and `doctor` read every page.
CLI_PAGES_UP_TO = 4 * 1024 * 1024


def before_first_open(services: Container, *, every_page: bool = False) -> None:
    """A CLI command's check, before this process opens its first database (`every_page`: of every
    file, whatever its size - `reindex`, which is about to read them all anyway). A damaged file is
    moved aside unless a daemon runs (it has the file open): then the error names the file and
    what to do."""
    services.heal_checked = True
    problems = check_all(services.settings, pages_up_to=None if every_page else CLI_PAGES_UP_TO)
    if not problems:
        return
    with workspace_lock(services.settings) as daemon:
        if daemon is not None:
            name, problem = next(iter(problems.items()))
            raise db.DamagedDatabaseError(services.settings.state_dir / name,
                                          f"{problem}; {daemon} has it open: restart the daemon, which sets it "
                                          "aside at start")
        services.set_aside_now = set_aside(services.settings, services.clock, problems)
    after_build(services)


@contextmanager
def workspace_lock(settings: Settings) -> Iterator[str | None]:
    """Hold the daemon lock for a set-aside outside the daemon: yields None, or who holds it
    ("the daemon (pid N)") without taking it - that process has the files open."""
    from filelock import FileLock, Timeout

    from mateclaw_mem.runtime import pidfile

    settings.state_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(settings.state_dir / "daemon.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        record, _ = pidfile.live_record(settings.state_dir)
        yield f"the daemon (pid {record.pid})" if record is not None else "a running daemon"
        return
    try:
        yield None
    finally:
        lock.release()


def after_build(services: Container) -> None:
    """What a rebuild needs beyond opening the new file: the fact projection is refilled from the
    memory files (nothing else reprojects an unchanged file). The indexes refill themselves (the
    daemon's catch-up; the message index syncs with the log when the Add/Search service is built)."""
    names = {s.database for s in services.set_aside_now}
    if "facts.db" in names and services.settings.mate.memory.fact.projection_enabled:
        done = services.facts.rebuild()
        log.info("fact projection rebuilt: %d facts from %d files", done["facts"], done["files"])


# -- what was set aside (status, /health, doctor) -------------------------------------------------


def report(settings: Settings, *, full_paths: bool = True) -> list[dict[str, Any]]:
    """Every set-aside database still on disk: which, when, why, and how to recover from it.
    `full_paths=False` (/health, open without a key) names files relative to the workspace."""
    out = []
    state = settings.state_dir
    try:
        names = sorted(os.listdir(state))
    except OSError:
        return []
    for fname in names:
        m = SET_ASIDE.fullmatch(fname)
        if m is None or m["db"] not in BY_NAME:
            continue
        spec = BY_NAME[m["db"]]
        path = state / fname
        shown = str(path) if full_paths else f"{state.name}/{fname}"
        note = read_note(path)
        entry: dict[str, Any] = {
            "database": spec.name,
            "file": shown,
            "set_aside_at": note.get("set_aside_at") or _stamp(m["stamp"]),
            "kind": "derived" if spec.derived else "log",
            "problem": note.get("problem"),
            "holds": spec.holds,
        }
        if spec.derived:
            entry["recover"] = "nothing to recover: rebuilt; delete the file when you like"
        elif note.get("salvaged"):
            s = note["salvaged"]
            entry["salvaged"] = s
            entry["recover"] = (f"salvaged on {s['at']}: {s['copied']} rows copied back ({s['readable']} readable); "
                                "delete the file when you no longer need it")
        else:
            entry["recover"] = f"mateclaw-mem doctor --salvage {shown}"
        out.append(entry)
    return out


def _stamp(stamp: str) -> str:
    return datetime.strptime(stamp, "%Y%m%dT%H%M%S").isoformat()
