"""glibc's allocator, set for a daemon whose searches allocate and free megabytes of arrays (issue 36:
RSS never above `aml.cache-bytes` + the idle daemon).

By default glibc gives each thread that allocates while another does its own arena (the HTTP
lane's pool, the index's threads: up to 8 per core), and after a large block is freed it raises the
size below which blocks come from an arena instead of mmap (up to 32 MB). A search's temporary
arrays then stay in each pool thread's arena once freed: measured at 100k messages of one user, 4
threads searching, the byte cache full at 67 MB, RSS 222 MB, 160 after the cache was emptied, 93 once
`malloc_trim` gave the free pages back. One arena, and blocks of 1 MB and more always from mmap
(returned when freed; smaller ones are reused): 156-161 MB, and the same search times (in-process,
one thread, interleaved: hot p50 6.9 vs 7.2-7.5 ms, ~380 page faults a search instead of ~105).
Python's own small objects are unaffected (pymalloc keeps them in its own arenas).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mateclaw_mem.index.messages.view_cache import ByteCache

log = logging.getLogger("mateclaw_mem.daemon")
M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8  # mallopt's parameters (malloc.h)
MMAP_THRESHOLD = 1 << 20


def tune() -> bool:
    """Set the allocator as above for this process (call before its threads start); False where
    it is not glibc's (nothing is changed)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (glibc's own: musl has a mallopt that does nothing)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_ARENA_MAX, 1)) and bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def rss_bytes() -> int | None:
    """This process's resident set (/proc/self/statm: ~50 us a read); None off Linux."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def trim() -> None:
    """Hand the heap's free pages back to the system (glibc's malloc_trim; ~1-5 ms with a fragmented
    heap); nothing off glibc."""
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim(0)


class RssBudget:
    """What the Add/Search byte cache may keep so that this process's RSS stays within `bound` bytes
    (`aml.cache-bytes`) of `baseline` (the idle daemon: its RSS when its start-up was done).

    The cache's own count matches what it holds (tests/test_aml_view_memory.py), but the rest of a
    search or an Add grows RSS too: SQLite's page caches, the allocator's slack, the interpreter's
    arenas after many Adds (measured at 100k messages of one user: 24 MB beside a 47 MB cache). The
    cache is the one part that can give memory back, so it gets what is left of the bound after
    everything else: `bound - (RSS - baseline - cached)`, never less than 0. What an eviction frees
    stays in glibc's heap until trimmed, and would read as "everything else" (the cache would then
    shrink again at each look): so when RSS is over the bound the heap is trimmed before it is read.

    Called by the cache on each store (view_cache.ByteCache.limit) with the bytes it holds; RSS is
    read at most every `every` seconds (~50 us a read), the heap trimmed at most as often."""

    def __init__(self, bound: int, baseline: int | None = None, *, every: float = 0.25) -> None:
        self.bound = bound
        self.baseline = baseline if baseline is not None else (rss_bytes() or 0)
        self.every = every
        self.trims = 0  # how often it had to (`status`, the bench)
        self._at = -float("inf")
        self._cap = bound
        self._lock = threading.Lock()

    def __call__(self, cached: int) -> int:
        now = time.monotonic()
        if now - self._at < self.every:
            return self._cap
        with self._lock:
            self._at = now
            rss = rss_bytes()
            if rss is None:
                return self._cap
            if rss - self.baseline > self.bound:
                trim()
                self.trims += 1
                rss = rss_bytes() or rss
            other = rss - self.baseline - cached  # everything beyond the idle daemon but the cache
            self._cap = max(0, self.bound - max(0, other))
            return self._cap


def bound_cache(cache: ByteCache, bound: int) -> RssBudget:
    """A daemon whose start-up is done: its Add/Search cache keeps RSS within `bound` of now."""
    budget = RssBudget(bound)
    cache.limit = budget
    log.info("RSS %.0f MB idle; the Add/Search cache keeps it within aml.cache-bytes (%.0f MB) of that",
             budget.baseline / 1e6, bound / 1e6)
    return budget
