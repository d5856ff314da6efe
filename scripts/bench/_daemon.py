"""`mateclaw-mem serve` as a subprocess for the benchmarks: started with its output in a log file,
ready when it logs the URL it listens on (`until_ready`: when it logs that its start is done, the
routes it builds after listening and its background parts started)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

_LISTENING = re.compile(r"listening on (http://\S+)")
_READY = "ready; Ctrl-C or SIGTERM to stop"


def start_daemon(cmd: list[str], log: Path, *, env: dict[str, str] | None = None, cwd: Path | None = None,
                 timeout: float = 60.0, until_ready: bool = False) -> tuple[subprocess.Popen[bytes], str | None]:
    """Start `cmd` and wait for its "listening on URL" line: (process, URL), or (process, None) if it
    exited or did not listen within `timeout` (the caller decides whether that is the finding)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd or log.parent, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        text = log.read_text(errors="replace")
        m = _LISTENING.search(text)
        if m and (not until_ready or _READY in text):
            return proc, m.group(1)
        time.sleep(0.005)  # (a restart is timed to its first answer through this wait: 50 ms added up to 50)
    return proc, None


def children(pid: int) -> list[int]:
    """The processes `pid` started that still run (a daemon's index process, aml.index-process): each of
    its threads lists those it started (Linux /proc; [] elsewhere)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(p) for p in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out
