"""The intent journal: no multi-file operation is ever left half done by a crash.

An operation that changes several files (a snapshot import, an undo of a run, a month-archive roll,
a SOUL proposal applied, a contradiction resolved, a forget, a chat import) opens a journal before
its first change and closes it after its last:

    with store.journal.operation("import", batch, steps, finish={...}):
        ... the operation's own writes, through the store, under `batch` ...

A journal is a folder `.mateclaw/journal/<id>/`: `intent.json` (the operation, its batch, every
planned change as (file, hash before, where in `data` its new bytes are), and what is left to finish
outside the files), `data` (every planned file's new bytes, one after another), files a finisher
needs (`s-<name>`: a chat import's conversations), and `writes.jsonl`, where the store notes each
change of the batch (hash before, hash after) right before it puts it in place - what a machine write
really put there (ceilings and pins may change a planned text) is known even when the process dies
between the rename and the history record. It is written under a hidden name, fsynced, and renamed
into place before the first change; it is removed (intent first) when the operation ends.

At the next start (`recover`: the daemon's start, a CLI command's first database) a journal whose
operation is dead is finished - rolled forward: every planned change is durable in the journal, so
every operation can be completed, and finishing is what the person asked for (rolling a forget back
would bring forgotten words back). Per planned file, under the store's compare-and-swap:

- it holds the planned bytes, or bytes the store noted for this batch: done already;
- it holds the hash it had before the operation: the change is made now;
- anything else: the person edited it after the crash (they never take our lock), so it is left
  alone and reported - a replay never writes over a hand edit.

Then the operation's `finish` (a tombstone marked done, a proposal marked applied, a pair closed) is
handed to the handler registered for it. What was done is appended to `recovered.jsonl`, which
`status`, `/health` and the Memory Browser's health page show.

Who is alive: the operation holds an exclusive `flock` on its journal's `lock` file for as long as it
runs; the kernel drops it when the process dies (kill -9 included). Recovery takes the same lock
without waiting, so a running operation (in this process or another) is never "recovered", and two
processes never recover the same journal.

Tests (and scripts/bench/half_operations.py) put a crash at a chosen point with the environment
variable MATECLAW_MEM_CRASH_AT=`<op>:<point>` (`begin`, `write:<n>` before the n-th change, `end`):
the process kills itself with SIGKILL there, in the real code path.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import MateclawError
from mateclaw_mem.workspace.atomic import write_plain
from mateclaw_mem.workspace.journal_replay import DATA, how, noted, replay
from mateclaw_mem.workspace.records import Step

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store_port import StorePort

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: liveness falls back to the pid recorded
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

INTENT = "intent.json"
NEW, DONE = ".new", ".done"  # hidden folders: a journal being written / being removed
WRITES = "writes.jsonl"
LOCK = "lock"
RECOVERED = "recovered.jsonl"
CRASH_ENV = "MATECLAW_MEM_CRASH_AT"
KEEP_REPORTS = 50  # recovered.jsonl keeps this many lines
STALE_S = 60.0  # a journal folder without a lock older than this is a begin that died before its lock
Finisher = Callable[[dict[str, Any]], str]


@dataclass
class _Live:
    id: str
    op: str
    folder: Path
    lock_fd: int
    # (agent folder, file) -> the hash planned for it: a change that lands exactly that needs no note
    planned: dict[tuple[str, str], str] = field(default_factory=dict)
    has_steps: bool = False
    writes: int = 0
    mutex: threading.Lock = field(default_factory=threading.Lock)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _lock(path: Path, *, wait: bool) -> int | None:
    """An exclusive flock on `path` (created), or None when someone holds it and `wait` is False."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    if fcntl is None:
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def crash_point(op: str, point: str) -> None:
    """Die here, as kill -9 would, when MATECLAW_MEM_CRASH_AT names this point (tests, the bench)."""
    want = os.environ.get(CRASH_ENV)
    if want and want in (f"{op}:{point}", f"*:{point}"):
        os.kill(os.getpid(), signal.SIGKILL)


class Journal:
    def __init__(self, folder: Path, *, key: Callable[[str, str | None], str] | None = None) -> None:
        self.folder = folder
        self._key = key or (lambda agent, owner: agent)  # the store's agent folder of (agent, owner)
        self._live: dict[str, _Live] = {}  # batch -> the open journal of that batch, in this process
        self._guard = threading.Lock()

    # -- the operation's side -----------------------------------------------------------------------

    @contextlib.contextmanager
    def operation(self, op: str, batch: str, steps: Sequence[Step] = (), *,
                  finish: dict[str, Any] | None = None,
                  staged: dict[str, Path | bytes] | None = None) -> Iterator[str]:
        """Open the journal (durable before the body's first change), close it after the body. An
        error the operation raises (an Exception) means it handled its own failure (an import undoes
        itself): the journal is dropped. A kill, or KeyboardInterrupt/SystemExit mid-way, leaves it for
        `recover`. `staged`: files copied into the journal (a chat export) for the finisher."""
        live = self.begin(op, batch, steps, finish=finish, staged=staged)
        try:
            yield live.id
        except Exception:
            self._close(batch, live)
            raise
        except BaseException:
            self._release(batch, live)
            raise
        crash_point(op, "end")
        self._close(batch, live)

    def begin(self, op: str, batch: str, steps: Sequence[Step], *, finish: dict[str, Any] | None = None,
              staged: dict[str, Path | bytes] | None = None) -> _Live:
        jid = f"{op}-{uuid.uuid4().hex[:12]}"
        # Made under a hidden name and renamed into place whole: a journal under its own name always
        # has its intent and lock (a kill while it is being written leaves a `.…new` folder, no change).
        tmp = self.folder / f".{jid}{NEW}"
        tmp.mkdir(parents=True, exist_ok=False)
        lock_fd = _lock(tmp / LOCK, wait=True)
        assert lock_fd is not None
        planned = []
        # Every planned file's new bytes in one file, one fsync: an import of 300 files stages in one write.
        with open(tmp / DATA, "wb") as data:
            for step in steps:
                at = None
                if step.data is not None:
                    at = [data.tell(), len(step.data)]
                    data.write(step.data)
                planned.append({"agent": step.agent, "owner": step.owner, "rel": step.rel, "before": step.before,
                                "after": step.after, "at": at, "actor": step.actor, "reason": step.reason})
            data.flush()
            os.fsync(data.fileno())
        copies = {}
        for name, source in (staged or {}).items():
            copies[name] = f"s-{name}"
            if isinstance(source, bytes):
                write_plain(tmp / copies[name], source)
            else:
                _copy_durably(source, tmp / copies[name])
        intent = {"id": jid, "op": op, "batch": batch, "pid": os.getpid(), "steps": planned,
                  "finish": finish or {}, "staged": copies}
        write_plain(tmp / INTENT, json.dumps(intent, ensure_ascii=False).encode("utf-8"))
        _fsync_dir(tmp)
        folder = self.folder / jid
        os.rename(tmp, folder)
        _fsync_dir(self.folder)
        live = _Live(jid, op, folder, lock_fd, has_steps=bool(steps),
                     planned={(self._key(st.agent, st.owner), st.rel): st.after for st in steps})
        with self._guard:
            self._live[batch] = live
        crash_point(op, "begin")
        return live

    def note(self, batch: str | None, key: str, rel: str, before: str, after: str) -> None:
        """The store, right before it puts a change of `batch` in place: what it is about to write."""
        if batch is None:
            return
        with self._guard:
            live = self._live.get(batch)
        if live is None:
            return
        with live.mutex:
            # Only a change the plan does not already name needs the fsynced note (a ceiling or a pin
            # rule changed a machine's text, a ceiling's archive): replay knows the planned ones.
            # A journal without planned files (a forget) is finished by its finisher, not replayed.
            if live.has_steps and live.planned.get((key, rel)) != after:
                line = json.dumps({"key": key, "rel": rel, "before": before, "after": after}) + "\n"
                fd = os.open(live.folder / WRITES, os.O_WRONLY | os.O_CREAT | os.O_APPEND
                             | getattr(os, "O_CLOEXEC", 0), 0o600)
                try:
                    os.write(fd, line.encode("utf-8"))
                    os.fsync(fd)
                finally:
                    os.close(fd)
            live.writes += 1
            n = live.writes
        crash_point(live.op, f"write:{n}")

    def end(self, batch: str) -> None:
        """Close the journal `begin` opened for `batch`, if one is open in this process: for an
        operation whose changes span calls (a dream's files, then its diary entry and run record,
        memory/dreaming/apply.py) and cannot sit inside one `operation` block."""
        with self._guard:
            live = self._live.get(batch)
        if live is not None:
            self._close(batch, live)

    def leave(self, batch: str) -> None:
        """Let go of the journal `begin` opened for `batch` without closing it: an operation that
        failed mid-way and cannot undo itself (an AML user's delete, conversations/aml_users.py) is
        left for `recover` - the heartbeat's sweep in this process, or the next start - to finish."""
        with self._guard:
            live = self._live.get(batch)
        if live is not None:
            self._release(batch, live)

    def is_open(self, batch: str) -> bool:
        """Whether this process has a journal open for `batch`."""
        with self._guard:
            return batch in self._live

    def staged_path(self, jid: str, name: str) -> Path:
        return self.folder / jid / f"s-{name}"

    def _close(self, batch: str, live: _Live) -> None:
        _remove(live.folder)
        self._release(batch, live)

    def _release(self, batch: str, live: _Live) -> None:
        with self._guard:
            self._live.pop(batch, None)
        with contextlib.suppress(OSError):
            os.close(live.lock_fd)

    # -- the next start ----------------------------------------------------------------------------

    def unfinished(self) -> list[dict[str, Any]]:
        """Journals on disk: operations running now (`running`) or dead and not yet recovered."""
        out = []
        for folder in self._folders():
            intent = _read_intent(folder)
            if intent is None:
                continue
            fd = _lock(folder / LOCK, wait=False)
            if fd is not None:
                os.close(fd)
            out.append({"operation": intent.get("op"), "run": intent.get("batch"), "journal": folder.name,
                        "files": len(intent.get("steps") or []), "running": fd is None})
        return out

    def unfinished_dead(self) -> list[dict[str, Any]]:
        """The unfinished journals whose operation is no longer running (what `recover` would finish)."""
        return [u for u in self.unfinished() if not u["running"]]

    def _folders(self) -> list[Path]:
        """The journals (hidden folders: one being written, or removed, are cleared on the way)."""
        try:
            found = sorted(p for p in self.folder.iterdir() if p.is_dir())
        except OSError:
            return []
        for p in found:
            if p.name.startswith(".") and (p.name.endswith(DONE) or _dead(p)):
                shutil.rmtree(p, ignore_errors=True)
        return [p for p in found if not p.name.startswith(".")]

    def recover(self, store: StorePort | None, finishers: dict[str, Finisher], *, at: str,
                before_replay: dict[str, Finisher] | None = None,
                only: Collection[str] | None = None) -> list[dict[str, Any]]:
        """Finish every operation whose process died (see the module's doc). Returns what was done,
        one entry per journal, also appended to recovered.jsonl. `before_replay[op]` gets the
        operation's `finish` before its files are replayed (a contradiction pair held, as while it
        was being resolved). `only`: these operations alone, the others left for a later recovery
        (`serve --aml-only`, which has no store, finishes its AML deletes: `store` None)."""
        done = []
        for folder in self._folders():
            intent = _read_intent(folder)
            if intent is None:  # closed (its intent removed first) but not yet removed
                if _dead(folder):
                    shutil.rmtree(folder, ignore_errors=True)
                continue
            if only is not None and intent.get("op") not in only:
                continue
            fd = _lock(folder / LOCK, wait=False)
            if fd is None:
                continue  # its operation is running
            try:
                if _read_intent(folder) is None:  # closed while we waited for the lock
                    continue
                entry = self._finish(store, folder, intent, finishers, at, before_replay or {})
            finally:
                os.close(fd)
            done.append(entry)
            if entry["outcome"] != "failed":
                _remove(folder)
        if done:
            self._report(done)
        return done

    def _finish(self, store: StorePort | None, folder: Path, intent: dict[str, Any],
                finishers: dict[str, Finisher], at: str, before_replay: dict[str, Finisher]) -> dict[str, Any]:
        done_by_batch = noted(folder / WRITES)
        if (prepare := before_replay.get(intent.get("op", ""))) is not None and intent.get("finish"):
            prepare(intent["finish"])
        files: list[dict[str, Any]] = []
        for planned in intent.get("steps") or []:
            assert store is not None, "an operation with files is recovered with the store (`only` keeps the others)"
            files.append(replay(store, folder, intent["batch"], planned, done_by_batch))
        made = sum(f["state"] == "written now" for f in files)
        left = [f for f in files if f["state"].startswith("left")]
        finish_note, error = "", None
        finisher = finishers.get(intent.get("op", ""))
        if intent.get("finish") and finisher is not None:
            try:
                finish_note = finisher({**intent["finish"], "journal": folder.name, "staged": {
                    name: str(folder / path) for name, path in (intent.get("staged") or {}).items()}})
            except Exception as exc:  # kept for the next start; status says why
                error = exc.message if isinstance(exc, MateclawError) else f"{type(exc).__name__}: {exc}"
                log.warning("journal %s: finishing %s failed (%s); tried again at the next start",
                            folder.name, intent.get("op"), error)
        elif intent.get("finish"):
            error = f"nothing here finishes a {intent.get('op')!r} operation"
        outcome = "failed" if error else ("completed" if made or finish_note else "already complete")
        entry = {"at": at, "operation": intent.get("op"), "run": intent.get("batch"), "journal": folder.name,
                 "outcome": outcome, "how": how(outcome, files, finish_note, error),
                 "files": {"planned": len(files), "written_now": made, "already_done": len(files) - made - len(left),
                           "left_alone": len(left)}}
        if left:
            entry["left_alone"] = [{"file": f["file"], "why": f["state"].removeprefix("left alone: ")} for f in left]
        if error:
            entry["error"] = error
        log.warning("interrupted %s (run %s) %s at start: %s", entry["operation"], entry["run"], outcome,
                    entry["how"])
        return entry

    def _report(self, entries: list[dict[str, Any]]) -> None:
        path = self.folder / RECOVERED
        lines = []
        with contextlib.suppress(OSError):
            lines = path.read_text(encoding="utf-8").splitlines()
        lines += [json.dumps(e, ensure_ascii=False) for e in entries]
        write_plain(path, ("\n".join(lines[-KEEP_REPORTS:]) + "\n").encode("utf-8"))

    def recovered(self, last: int = 10) -> list[dict[str, Any]]:
        """The latest recoveries, newest first (status, /health, the health page)."""
        try:
            lines = (self.folder / RECOVERED).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return []
        out = []
        for line in reversed(lines):
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict):
                    out.append(entry)
            if len(out) == last:
                break
        return out


def _remove(folder: Path) -> None:
    """The intent first (from then on there is nothing to finish), then the folder, renamed aside so
    that a kill mid-way leaves a `.…done` folder anyone may clear."""
    with contextlib.suppress(FileNotFoundError):
        (folder / INTENT).unlink()
    _fsync_dir(folder)
    aside = folder.with_name(f".{folder.name}{DONE}")
    try:
        os.rename(folder, aside)
    except OSError:
        aside = folder
    shutil.rmtree(aside, ignore_errors=True)


def _dead(folder: Path) -> bool:
    """Whether nobody holds this journal folder: its lock is free, or it has no lock and is older than
    STALE_S (a process may be between its mkdir and its lock)."""
    if (folder / LOCK).exists():
        fd = _lock(folder / LOCK, wait=False)
        if fd is None:
            return False
        os.close(fd)
        return True
    try:
        return time.time() - folder.stat().st_mtime >= STALE_S
    except OSError:
        return False


def _copy_durably(source: Path, dest: Path) -> None:
    with open(source, "rb") as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())


def _read_intent(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / INTENT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # no intent: closed; a torn one cannot exist (written by rename)
    return data if isinstance(data, dict) and "op" in data else None
