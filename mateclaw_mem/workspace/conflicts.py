"""Machine writers among themselves, and what they met of a person: the per-file lock the store's
writers share (threads and processes), and the log of hand saves that met a write at its final step.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from filelock import FileLock, Timeout

from mateclaw_mem.errors import BusyError


class FileLocks:
    """A thread lock for this process plus a file lock for other processes, per memory file."""

    def __init__(self, lock_dir: Path, *, timeout: float) -> None:
        self.lock_dir = lock_dir
        self.timeout = timeout
        self._guard = threading.Lock()
        self._local: dict[str, threading.RLock] = {}
        self._files: dict[str, FileLock] = {}

    @contextlib.contextmanager
    def hold(self, path: Path) -> Iterator[None]:
        key = str(path.absolute())
        with self._guard:
            local = self._local.setdefault(key, threading.RLock())
            if key not in self._files:
                self.lock_dir.mkdir(parents=True, exist_ok=True)
                name = hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]
                self._files[key] = FileLock(str(self.lock_dir / f"{name}.lock"))
            flock = self._files[key]
        if not local.acquire(timeout=self.timeout):
            raise BusyError(f"{path.name} is locked by another writer; try again")
        try:
            try:
                flock.acquire(timeout=self.timeout)
            except Timeout:
                raise BusyError(f"{path.name} is locked by another process; try again") from None
            try:
                yield
            finally:
                flock.release()
        finally:
            local.release()


class ConflictLog:
    """`conflicts.jsonl`: one line each time a save by someone else met a write at its final step
    (the save was kept: put back and re-planned on, or kept in history). `status` reads it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, at: datetime, file: str, actor: str, outcome: str) -> None:
        entry = {"at": at.isoformat(timespec="seconds"), "file": file, "actor": actor, "outcome": outcome}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError), open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def report(self, last: int = 5) -> dict[str, object]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError:
            lines = []
        recent = []
        for line in lines[-last:]:
            with contextlib.suppress(ValueError):
                recent.append(json.loads(line))
        return {"count": len(lines), "recent": recent}
