"""`mateclaw-mem serve` as a subprocess for the benchmarks: started with its output in a log file,
ready when it logs the URL it listens on."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

_LISTENING = re.compile(r"listening on (http://\S+)")


def start_daemon(cmd: list[str], log: Path, *, env: dict[str, str] | None = None, cwd: Path | None = None,
                 timeout: float = 60.0) -> tuple[subprocess.Popen[bytes], str | None]:
    """Start `cmd` and wait for its "listening on URL" line: (process, URL), or (process, None) if it
    exited or did not listen within `timeout` (the caller decides whether that is the finding)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd or log.parent, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        m = _LISTENING.search(log.read_text(errors="replace"))
        if m:
            return proc, m.group(1)
        time.sleep(0.05)
    return proc, None
