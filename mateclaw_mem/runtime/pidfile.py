"""`.mateclaw/daemon.json`: which process serves this workspace, and where, so `status` can ask it.

Written by the daemon once it listens (atomically), removed when it stops. A file whose pid is not
alive is stale (a crash, a power cut) and ignored: reading never deletes or writes anything, the
next daemon simply overwrites it.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

FILE_NAME = "daemon.json"
HEALTH_TIMEOUT = 1.5  # seconds; a daemon that cannot answer /health that fast is reported as such


class DaemonRecord(NamedTuple):  # not a dataclass: `dataclasses` (inspect, ast) is ~8 ms of `status`
    pid: int
    url: str | None  # None: the daemon runs without HTTP
    started_at: str
    version: str

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "url": self.url, "started_at": self.started_at, "version": self.version}


def path_in(state_dir: Path) -> Path:
    return state_dir / FILE_NAME


def write(state_dir: Path, record: DaemonRecord) -> Path:
    path = path_in(state_dir)
    tmp = path.with_name(f".{FILE_NAME}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record.to_dict()), encoding="utf-8")
    os.replace(tmp, path)
    return path


def remove(state_dir: Path, pid: int) -> None:
    """Remove the file if it is still ours (a second daemon never got this far, but be sure)."""
    path = path_in(state_dir)
    record = read(state_dir)
    if record is not None and record.pid == pid:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def read(state_dir: Path) -> DaemonRecord | None:
    try:
        raw = json.loads(path_in(state_dir).read_text(encoding="utf-8"))
        return DaemonRecord(int(raw["pid"]), raw.get("url") or None, str(raw.get("started_at", "")),
                            str(raw.get("version", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, half-written by a crash, or not ours: no daemon to ask


def alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it is just not ours to signal
    return True


def live_record(state_dir: Path) -> tuple[DaemonRecord | None, DaemonRecord | None]:
    """(the live daemon's record, a stale record) — at most one of them is set."""
    record = read(state_dir)
    if record is None:
        return None, None
    return (record, None) if alive(record.pid) else (None, record)


def probe(state_dir: Path, timeout: float = HEALTH_TIMEOUT) -> dict[str, Any]:
    """What `status` says about the daemon: running (with its /health report), not answering, or
    not running (a stale file named)."""
    record, stale = live_record(state_dir)
    if record is None:
        out: dict[str, Any] = {"running": False}
        if stale is not None:
            out["stale_pid_file"] = {"pid": stale.pid, "started_at": stale.started_at}
        return out
    out = {"running": True, **record.to_dict()}
    if record.url is None:
        return out
    import urllib.error  # here: `status` beside a daemon reads the record without them (daemon_status.py)
    import urllib.request

    try:
        # No proxy: the daemon is on this machine, and an http_proxy from the shell must not see it.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"{record.url}/health", timeout=timeout) as resp:
            health = json.loads(resp.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        out["health_error"] = f"{record.url}/health did not answer: {reason}"
        return out
    if isinstance(health, dict):
        if health.get("pid") not in (None, record.pid):
            # Another process answers on that port: the recorded daemon is gone and its port reused.
            out["health_error"] = f"{record.url} is answered by pid {health.get('pid')}, not {record.pid}"
            return out
        out["health"] = health
    return out
