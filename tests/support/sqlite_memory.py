"""SQLite's own count of what it allocated (sqlite3_memory_used) around some work, in a fresh interpreter:
the page caches a connection fills are that process's alone (tests/test_log_memory.py,
tests/test_index_page_cache.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# A probe is this, then its own code, which prints `lib.sqlite3_memory_used() - before` (`{root}`: the repo).
PRELUDE = """
import ctypes, ctypes.util, sys
from pathlib import Path
sys.path.insert(0, {root!r})
import sqlite3  # (loaded first: the library found below is the one it uses)
lib = ctypes.CDLL(ctypes.util.find_library("sqlite3"))
lib.sqlite3_memory_used.restype = ctypes.c_int64
"""


def grown(probe: str, *args: str) -> int:
    """Run `PRELUDE` + `probe` with these arguments; the bytes it printed."""
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", PRELUDE.format(root=root) + probe, *args],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)
