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
import sys

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
