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

What is freed at the top of the heap is kept up to 4 MB (`TRIM_THRESHOLD`; glibc's default gives back
all but 128 KB at each free): a search's arrays under 1 MB were otherwise faulted in afresh by every
search. At 100k messages of one user, in-process, 2-3 runs each: the same questions again p50 4.6-5.6 ->
4.4-4.7 ms, p95 6.7-8.3 -> 5.6-6.0; the first pass 8.0-8.2 -> 7.2-7.3 ms; RSS the same (113 MB). 2 MB gave
a little less, 16 MB no more (and is more a swing between two looks of the RSS budget, which counts what
the heap keeps as the rest of the daemon and trims it when RSS nears the bound).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from mateclaw_mem.index.messages.view_cache import ByteCache

log = logging.getLogger("mateclaw_mem.daemon")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # mallopt's parameters (malloc.h)
MMAP_THRESHOLD = 1 << 20
TRIM_THRESHOLD = 4 << 20


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
    return (bool(mallopt(M_ARENA_MAX, 1)) and bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
            and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)))


def rss_bytes() -> int | None:
    """This process's resident set (/proc/self/statm: ~50 us a read); None off Linux."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def rss_and_peak() -> tuple[int, int] | None:
    """This process's resident set and its high-water mark (/proc/self/status: VmRSS, VmHWM; ~10 us
    a read); None off Linux."""
    rss = peak = None
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    peak = int(line.split()[1]) * 1024
                elif line.startswith(b"VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                    break  # (after VmHWM)
    except (OSError, ValueError, IndexError):
        return None
    return None if rss is None or peak is None else (rss, peak)


def trim() -> None:
    """Hand the heap's free pages back to the system (glibc's malloc_trim; ~1-5 ms with a fragmented
    heap); nothing off glibc."""
    malloc_trim = _malloc_trim()
    if malloc_trim is not None:
        malloc_trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, looked up once: a search that trims (up to every other one at 100k messages
    of one user) made a fresh CDLL and function pointer each time (0.5% of a warm search's samples)."""
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int
    return cast("Callable[[int], int]", malloc_trim)


class RssBudget:
    """What the Add/Search byte cache may keep so that this process's RSS stays within `bound` bytes
    (`aml.cache-bytes`) of `baseline` (the idle daemon: its RSS when its start-up was done).

    The cache's own count matches what it holds (tests/test_aml_view_memory.py), but the rest of a
    search or an Add grows RSS too: SQLite's page caches, the allocator's slack, the interpreter's
    arenas after many Adds (measured at 100k messages of one user: 24 MB beside a 47 MB cache). The
    cache is the one part that can give memory back, so it gets what is left of the bound after
    everything else, `margin` and `slack`: `bound - margin - slack - (RSS - baseline - cached)`, never
    less than 0.

    RSS is read only now and then, and between two reads everything else swings unseen: a search's
    temporaries, the heap they leave in pieces (handed back by a trim at one read, faulted in again by
    the next searches). `margin` is the largest swing lately (halving every `half_life` seconds): how
    far everything else stood at a read above the reads either side of it, or went between two reads
    above both (where RSS set a new high-water mark between them, the kernel's mark says how high).
    A rise that stays, or a fall, is no swing: `other` counts it from the next read on. `slack` (an
    eighth of the bound) is room for a swing larger than any seen yet - a search's working set at
    100k messages of one user is up to ~11 MB, and the first one of that size would otherwise go over.
    Without them the cache filled what a read left, and at 100k messages RSS read after a search was up
    to 5 MB over the bound, its high-water mark 12 MB. A read after a quiet spell (more than `quiet`
    seconds after the one before) teaches the margin nothing. What an eviction frees stays in glibc's
    heap until trimmed, and would read as everything else (the cache would then shrink again at each
    look): so when RSS is over what the cache's limit aims at, the heap is trimmed before RSS is read
    again. What a trim cannot hand back (Python's own small-object arenas, SQLite's page caches) stays
    counted as everything else.

    Called by the cache on each store and each write (view_cache.ByteCache.limit) with the bytes it
    holds; RSS is read at most every `every` seconds (~10 us a read), the heap trimmed at most as often."""

    def __init__(self, bound: int, baseline: int | None = None, *, every: float = 0.25, half_life: float = 300.0,
                 quiet: float = 2.0, slack: int | None = None, others: Callable[[], int] | None = None) -> None:
        self.bound = bound
        self.others = others
        self.baseline = baseline if baseline is not None else (rss_bytes() or 0)
        self.every, self.half_life, self.quiet = every, half_life, quiet
        self.slack = bound // 8 if slack is None else slack
        self.trims = 0  # how often it had to (`status`, the bench)
        self.margin = 0
        self._other: int | None = None  # everything else at the last read (after its trim)
        self._high = 0  # ... and before its trim
        self._before = 0  # everything else at the read before the last (after its trim)
        self._peak = 0  # the process's RSS high-water mark at the last read
        self._cached = 0  # what the cache held then
        self._at = -float("inf")
        self._cap = bound
        self._lock = threading.Lock()
        self._cache: ByteCache | None = None  # (`follow`)
        self._asked = threading.Event()  # the cache asked since the trailing look (`follow`)
        self._asked_at = 0.0

    def follow(self, cache: ByteCache) -> None:
        """Look once more `every` s after the cache last asked (a thread of its own), the cache shrunk
        to what that look leaves and what it freed handed back. The cache asks at its stores and
        writes only, at most every `every` s: a search's last store, then a merge or the search's own
        temporaries, and RSS stood over the bound for as long as nothing more was stored (at 100k
        messages of one user, after 200 more turns and a first search, with `make_room`'s: see there)."""
        self._cache = cache
        threading.Thread(target=self._trail, name="rss-budget", daemon=True).start()

    def stop(self) -> None:
        """The thread `follow` started ends (the cache is no longer followed)."""
        self._cache = None
        self._asked.set()

    def _trail(self) -> None:
        while True:
            self._asked.wait()
            while (left := self._asked_at + self.every - time.monotonic()) > 0:
                time.sleep(left)
            self._asked.clear()
            cache = self._cache
            if cache is None:
                return
            self.settle(cache)

    def make_room(self, cache: ByteCache, nbytes: int) -> None:
        """Before work that holds `nbytes` beside the cache for a moment (a merge, `ByteCache.make_room`):
        a look now, and where RSS with that work would pass the bound, the cache shrunk by the
        difference and what it freed handed back first. A merge after 200 turns at 100k messages of one
        user took RSS up to 17 MB up at once, with the cache at its limit: up to 2.3 MB over the bound in
        7 of 12 runs; with room for 512 B an entry, 3.8 MB in 3 of 7; with 1 KB, none in 6."""
        self._look_now(cache)
        if self._other is None:
            return
        need = self._other + cache.size + nbytes - self.bound
        if need > 0:
            self._shrink(cache, max(0, cache.size - need))

    def settle(self, cache: ByteCache) -> None:
        """A look now, however recent the last; the cache shrunk to what it leaves, and what that
        freed handed back to the system."""
        self._shrink(cache, self._look_now(cache))

    def _look_now(self, cache: ByteCache) -> int:
        """`self(cache.size)` whatever the time since the last look (not counted as the cache's ask)."""
        with self._lock:
            self._at = -float("inf")
        return self(cache.size, asked=False)

    def _shrink(self, cache: ByteCache, cap: int) -> None:
        if cache.shrink_to(cap):
            trim()
            self.trims += 1

    def __call__(self, cached: int, *, asked: bool = True) -> int:
        now = time.monotonic()
        if asked and self._cache is not None:
            self._asked_at = now
            if not self._asked.is_set():
                self._asked.set()
        if now - self._at < self.every:
            return self._cap
        with self._lock:
            since, self._at = now - self._at, now
            got = rss_and_peak()
            if got is None:
                return self._cap
            beside = self.others() if self.others is not None else 0  # (counted as this process's own)
            rss, peak = got[0] + beside, got[1] + beside
            level = rss - self.baseline - cached  # everything beyond the idle daemon but the cache
            if rss - self.baseline > self.bound - self.margin - self.slack:
                trim()
                self.trims += 1
                rss = (rss_bytes() or rss - beside) + beside
            other = max(0, rss - self.baseline - cached)
            if self._other is not None:
                self.margin = int(self.margin * 0.5 ** (since / self.half_life))
                if since <= self.quiet:
                    # A swing: how far the rest stood at the last read above the reads either side of
                    # it, or went between this read and the last (a new high-water mark) above both.
                    # A rise that stays, or a fall, is no swing: `other` counts it.
                    swing = self._high - max(self._before, other)
                    if peak > self._peak:  # (the cache then taken at the more it held at the two reads)
                        at_peak = peak - self.baseline - max(cached, self._cached)
                        swing = max(swing, at_peak - max(self._other, other))
                    self.margin = max(self.margin, swing)
            self._before = other if self._other is None else self._other
            self._other, self._high, self._peak, self._cached = other, level, peak, cached
            self._cap = max(0, self.bound - self.margin - self.slack - other)
            return self._cap


# The daemon's room for a swing, a fifth of the bound (RssBudget's default is an eighth). At 100k messages
# of one user a search's VmHWM over the RSS before it is p50 0.6 MB, p95 3.1-3.4, max 9.8-10.9, and between
# two reads RSS sits ~2.6 MB above what the last one left (heap pieces the next trim hands back): with an
# eighth 1 of 200 searches took RSS past the bound (max 69.4-69.8 MB over the idle daemon, bound 67.1), with
# a fifth none (max 66.1-66.3); the cache holds ~5 MB less (daemon CPU per search +0.5-0.8 ms).
SLACK = 5


def bound_cache(cache: ByteCache, bound: int) -> RssBudget:
    """A daemon whose start-up is done: its Add/Search cache keeps RSS within `bound` of now.

    With a fifth of the bound kept spare (`SLACK`), not the margin learned from swings (`quiet` -1): under
    concurrent searches their temporaries add up, the learned margin left the cache next to nothing and
    every search read what it needed from disk - `scripts/bench/aml_add.py` (2,000 Adds of 20 turns, then
    searches), 4 / 16 clients: 59 / 62 searches/s with it, 90 / 80 without it, 89-99 / 86-89 with this
    morning's budget (no room kept). One user at 100k, one search at a time (scripts/bench/aml_scale.py at
    7730807, load ~1.2): RSS after the searches 57.5 MB over the idle daemon, its high-water mark 64.0,
    against the 67.1 MB default; the same questions again p50 12.1 ms.

    While an index process runs (a stream of Adds, `aml.index-process`) its own memory counts as the
    daemon's (`index_process.private_bytes`): the idle daemon has no such process, so the bound holds for
    the two together, and the cache gives up what the child holds until it ends."""
    from mateclaw_mem.index.messages.index_process import private_bytes

    budget = RssBudget(bound, quiet=-1.0, others=private_bytes, slack=bound // SLACK)
    cache.limit = budget
    cache.room = lambda nbytes: budget.make_room(cache, nbytes)
    budget.follow(cache)
    log.info("RSS %.0f MB idle; the Add/Search cache keeps it within aml.cache-bytes (%.0f MB) of that",
             budget.baseline / 1e6, bound / 1e6)
    return budget
