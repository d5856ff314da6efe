"""Reading a memory file: one snapshot (text and hash), and a settled read that never plans on a
save in progress."""

from __future__ import annotations

import os
import time
from pathlib import Path

from mateclaw_mem.errors import InvalidInputError, InvalidPathError
from mateclaw_mem.workspace.records import Snapshot, sha256

SETTLE_SECONDS = 0.25  # how long a read waits for a file someone else is writing right now


def snapshot(rel: str, path: Path) -> Snapshot:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Snapshot(rel, path, "", "", False)
    except IsADirectoryError:
        raise InvalidPathError(f"{rel} is a folder, not a file") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{rel} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    return Snapshot(rel, path, text, sha256(data), True)


def settled(rel: str, path: Path, *, written_sha: str | None) -> Snapshot:
    """A read that does not build on a save in progress. A person's `open('w')` empties the file
    before it writes; a file changed by someone else in the last moments is read again until two
    reads agree, so a machine never plans on a truncated version. `written_sha` is what this
    process last wrote there (its own fresh mtime is no reason to wait)."""
    snap = snapshot(rel, path)
    deadline = time.monotonic() + SETTLE_SECONDS
    while snap.exists and written_sha != snap.sha:
        try:
            age = time.time() - os.stat(path).st_mtime
        except OSError:
            break
        if age > 0.05 and snap.text:
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
        again = snapshot(rel, path)
        if again.sha == snap.sha and again.text:
            return again
        snap = again
    return snap
