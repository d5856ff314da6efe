"""runtime/malloc.RssBudget: the Add/Search byte cache keeps only what the rest of the process leaves of
`aml.cache-bytes` beyond the idle daemon's RSS (issue 36: RSS never above the bound + the idle
daemon), takes it back when the rest shrinks, and does not wither away on its own evictions (the
heap they free would read as the rest's until trimmed). In a fresh interpreter: the real cache,
the real allocator, RSS read from /proc; and the daemon installs it once started."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mateclaw_mem.index.messages.index_process import private_bytes
from mateclaw_mem.runtime.daemon import Daemon
from mateclaw_mem.runtime.malloc import RssBudget
from tests.support.server import daemon_services

MIB = 1 << 20

_PROBE = """
import json, sys
import numpy as np
sys.path.insert(0, {root!r})
from mateclaw_mem.index.messages.view_cache import ByteCache
from mateclaw_mem.runtime import malloc
malloc.tune()
MIB = 1 << 20
cache = ByteCache(64 * MIB)
# idle = now. No margin learned nor slack kept (quiet=-1, slack=0): this is the budget's base rule, what
# the rest leaves (the margin has its own test below; with an eighth of the bound kept spare, the 8 MiB
# the ballast leaves here were ~2, and the churn's lower bound a coin toss under CI's load).
budget = malloc.RssBudget(48 * MIB, every=0, quiet=-1, slack=0)
if sys.argv[1] == "on":
    cache.limit = budget
out = {{}}

def fill(n, tag):
    for i in range(n):  # 100 KiB a term: from glibc's heap (below the 1 MB mmap threshold)
        cache.put(("t", 1, f"{{tag}}{{i}}"), np.full(100 * 1024 // 8, i, dtype=np.int64), 100 * 1024)

ballast = np.ones(40 * MIB // 8)  # 40 MiB the rest of the process holds (mmapped: handed back when freed)
fill(300, "a")  # 30 MiB of entries
out["with_ballast"] = cache.size
out["over_idle"] = malloc.rss_bytes() - budget.baseline
fill(600, "b")  # its own evictions go on: the heap they free is resident until trimmed
out["after_churn"] = cache.size
del ballast
fill(300, "c")
out["ballast_gone"] = cache.size
print(json.dumps(out))
"""


def _probe(mode: str) -> dict[str, int]:
    return _run(_PROBE, mode)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/statm and glibc's allocator")
def test_the_cache_keeps_what_the_rest_of_the_process_leaves_of_the_bound() -> None:
    plain = _probe("off")
    assert plain["with_ballast"] > 25 * MIB  # without the budget it keeps all 30 MiB: RSS 70 MiB over idle
    assert plain["over_idle"] > 60 * MIB
    got = _probe("on")
    assert got["with_ballast"] < 12 * MIB  # 48 - 40 (and a little counted slack)
    assert got["over_idle"] < 52 * MIB  # RSS within the bound of the idle process, give or take a page or two
    assert 2 * MIB < got["after_churn"] < 12 * MIB  # neither withered to nothing nor over the bound
    assert got["ballast_gone"] > 25 * MIB  # the rest gave back 40 MiB: the cache may hold 30 again


_SWINGS = """
import json, sys
import numpy as np
sys.path.insert(0, {root!r})
from mateclaw_mem.index.messages.view_cache import ByteCache
from mateclaw_mem.runtime import malloc
malloc.tune()
MIB = 1 << 20
cache = ByteCache(64 * MIB)
# every=0: RSS read at each store. The budget before it had a margin and slack: no read teaches it
# one (quiet=-1), and no room is kept for a rise not seen yet.
before = sys.argv[1] == "no-margin"
budget = malloc.RssBudget(48 * MIB, every=0, quiet=-1 if before else 2.0, slack=0 if before else None)
cache.limit = budget
peaks = []
for n in range(40):  # "searches": each holds 8 MiB of temporaries for a while, then stores 10 MiB more
    if n == 5:  # the kernel's high-water mark from here on (Linux: "5" resets it to the RSS now)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    temp = np.ones(8 * MIB // 8)  # mmapped and touched: resident until freed
    peaks.append(malloc.rss_bytes() - budget.baseline)  # between two reads, unseen by the budget
    for i in range(1):  # stored while the temporaries are held: that read sees them
        cache.put(("t", 1, f"{{n}}a{{i}}"), np.full(100 * 1024 // 8, i, dtype=np.int64), 100 * 1024)
    del temp
    for i in range(100):
        cache.put(("t", 1, f"{{n}}b{{i}}"), np.full(100 * 1024 // 8, i, dtype=np.int64), 100 * 1024)
print(json.dumps({{"peak": max(peaks[5:]), "high": malloc.rss_and_peak()[1] - budget.baseline, "cached": cache.size,
                  "margin": budget.margin}}))
"""


def _run(probe: str, mode: str, *args: Path) -> dict[str, int]:
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", probe.format(root=root), mode, *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/statm and glibc's allocator")
def test_the_cache_leaves_room_for_what_grows_between_two_reads() -> None:
    """What the rest of the process holds swings between reads (a search's temporaries): once a read
    has seen a swing, the cache keeps that much room, and RSS stays within the bound at its peaks."""
    plain = _run(_SWINGS, "no-margin")
    assert plain["peak"] > 52 * MIB  # filled up to the bound between swings: each swing lands on top
    got = _run(_SWINGS, "margin")
    assert 6 * MIB < got["margin"] < 16 * MIB  # the 8 MiB swing, as read
    assert got["peak"] <= 48 * MIB  # never above the bound once a swing has been seen
    assert got["high"] <= 48 * MIB  # not even between two looks (the kernel's high-water mark)
    assert plain["high"] > 52 * MIB
    assert got["cached"] > 8 * MIB  # and the cache still holds what is left of the bound beside it


_BESIDE_A_CHILD = """
import json, sys, time
from pathlib import Path
import numpy as np
sys.path.insert(0, {root!r})
from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.index.messages.index_process import IndexProcess, private_bytes
from mateclaw_mem.index.messages.view_cache import ByteCache
from mateclaw_mem.runtime import malloc
malloc.tune()
MIB = 1 << 20
tmp = Path(sys.argv[2])
ConversationLog(tmp / "log.db").close()
MessageIndex(tmp / "messages.db").close()  # (the files the child opens)
cache = ByteCache(64 * MIB)
budget = malloc.RssBudget(40 * MIB, every=0, quiet=-1, slack=0,
                          others=private_bytes if sys.argv[1] == "on" else None)
cache.limit = budget

def fill(n, tag):
    for i in range(n):
        cache.put(("t", 1, f"{{tag}}{{i}}"), np.full(100 * 1024 // 8, i, dtype=np.int64), 100 * 1024)

out = {{}}
fill(300, "a")  # 30 MiB of entries: within the bound alone
out["alone"] = cache.size
child = IndexProcess(tmp / "messages.db", tmp / "log.db", lambda msg: None, lambda *a: None)
child.start()
deadline = time.monotonic() + 60
while not child.ready and time.monotonic() < deadline:
    time.sleep(0.01)
out["child"] = private_bytes()
fill(100, "b")
out["beside"] = cache.size
out["tree"] = malloc.rss_bytes() - budget.baseline + private_bytes()  # the two processes beyond the idle one
child.stop()
out["gone"] = private_bytes()
fill(300, "c")
out["after"] = cache.size
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc's allocator")
def test_the_cache_gives_up_what_an_index_process_holds_while_it_runs(tmp_path: Path) -> None:
    """A real index process (messages/index_process.py) beside the cache: its own memory counts as the
    daemon's, so the two processes stay within the bound of the idle daemon (which has no such child),
    and the cache takes the room back once the child ends."""
    plain = _run(_BESIDE_A_CHILD, "off", tmp_path)
    assert plain["child"] > 8 * MIB  # (an interpreter with SQLite and numpy: ~18 MiB of its own)
    assert plain["tree"] > 48 * MIB  # the cache filled to the bound beside the child's 18 MiB (measured: 56)
    got = _run(_BESIDE_A_CHILD, "on", tmp_path)
    assert got["alone"] > 25 * MIB
    assert got["beside"] < plain["beside"] - 8 * MIB  # the room the child takes, given up (measured: 24 vs 39)
    assert got["tree"] < 41 * MIB  # the two within the bound, give or take a page or two (measured: 40.0)
    assert got["gone"] == 0 and got["after"] > 25 * MIB


_PEAK = """
import json, sys
import numpy as np
sys.path.insert(0, {root!r})
from mateclaw_mem.index.messages.view_cache import ByteCache
from mateclaw_mem.runtime import malloc
malloc.tune()
MIB = 1 << 20
cache = ByteCache(128 * MIB)
budget = malloc.bound_cache(cache, 64 * MIB)  # the daemon's budget ...
if sys.argv[1] == "eighth":
    budget.slack = 64 * MIB // 8  # ... or with the eighth kept before
budget.every = 0  # (RSS read at each store: the cache always as full as the budget lets it be)
peaks = []
for n in range(30):  # "searches": 10 MiB of temporaries (a common word's rows at 100k messages), then stores
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark from here: the RSS now
    temp = np.ones(10 * MIB // 8)
    del temp
    for i in range(40):
        cache.put(("t", 1, f"{{n}}b{{i}}"), np.full(100 * 1024 // 8, i, dtype=np.int64), 100 * 1024)
    peaks.append(malloc.rss_and_peak()[1] - budget.baseline)
print(json.dumps({{"peak": max(peaks[5:]), "cached": cache.size}}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/clear_refs and glibc's allocator")
def test_a_large_searchs_temporaries_on_a_full_cache_stay_within_the_bound() -> None:
    """The room the daemon's budget keeps spare (bound_cache: a fifth) holds a large search's temporaries on
    top of a full cache, so RSS stays within the bound between two reads too - the kernel's high-water mark
    reset before each "search" (/proc/self/clear_refs 5) and read after it."""
    before = _run(_PEAK, "eighth")
    assert before["peak"] > 64 * MIB  # an eighth (8 MiB) kept: the 10 MiB land past the bound
    got = _run(_PEAK, "daemon")
    assert got["peak"] <= 64 * MIB
    assert got["cached"] > 30 * MIB  # and the cache still holds the rest of the bound


_ROOM = """
import json, sys
import numpy as np
sys.path.insert(0, {root!r})
from mateclaw_mem.index.messages.view_cache import ByteCache
from mateclaw_mem.runtime import malloc
malloc.tune()
MIB = 1 << 20
cache = ByteCache(128 * MIB)
budget = malloc.bound_cache(cache, 64 * MIB)
budget.every = 0
for i in range(600):  # the cache as full as the budget lets it be
    cache.put(("t", 1, f"a{{i}}"), np.full(100 * 1024 // 8, i, dtype=np.int64), 100 * 1024)
budget.every = 3600  # (no look of its own from here)
full = cache.size
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the high-water mark from here
if sys.argv[1] == "room":
    cache.make_room(24 * MIB)  # what a merge does first (postings.merge_owner)
merge = [np.full(100 * 1024 // 8, i, dtype=np.int64) for i in range(240)]  # 24 MiB held for a moment
print(json.dumps({{"peak": malloc.rss_and_peak()[1] - budget.baseline, "full": full, "cached": cache.size}}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/clear_refs and glibc's allocator")
def test_a_merge_finds_room_made_for_it_before_it_starts() -> None:
    """A merge holds megabytes beside a full cache at once (17 MB for 24k entries at 100k messages):
    `make_room` shrinks the cache first by what RSS with it would pass the bound, and hands that
    back, so the kernel's high-water mark stays within the bound."""
    plain = _run(_ROOM, "none")
    assert plain["peak"] > 64 * MIB and plain["cached"] == plain["full"]
    got = _run(_ROOM, "room")
    assert got["peak"] <= 64 * MIB
    assert got["full"] - 30 * MIB < got["cached"] < got["full"] - 8 * MIB  # shrunk by about what was needed


_TRAIL = """
import json, sys, time
import numpy as np
sys.path.insert(0, {root!r})
from mateclaw_mem.index.messages.view_cache import ByteCache
from mateclaw_mem.runtime import malloc
malloc.tune()
MIB = 1 << 20
cache = ByteCache(128 * MIB)
if sys.argv[1] == "follow":
    budget = malloc.bound_cache(cache, 64 * MIB)
else:
    budget = malloc.RssBudget(64 * MIB, quiet=-1.0, slack=64 * MIB // malloc.SLACK)
    cache.limit = budget
budget.every = 0
for i in range(600):
    cache.put(("t", 1, f"a{{i}}"), np.full(100 * 1024 // 8, i, dtype=np.int64), 100 * 1024)
budget.every = 0.2
full = cache.size
cache.put(("t", 1, "last"), np.zeros(10), 80)  # the last store: RSS looked at just before the rest grows
rest = [np.full(100 * 1024 // 8, i, dtype=np.int64) for i in range(240)]  # 24 MiB more, and nothing stored
deadline = time.monotonic() + 10
while cache.size > full - 16 * MIB and time.monotonic() < deadline:
    time.sleep(0.05)
if sys.argv[1] != "follow":
    time.sleep(1.0)
print(json.dumps({{"full": full, "cached": cache.size, "over": malloc.rss_bytes() - budget.baseline}}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/statm and glibc's allocator")
def test_the_budget_looks_once_more_after_the_last_store() -> None:
    """The cache asks its budget at stores and writes only, at most every `every` s: what grew after the
    last ask (a merge, a search's temporaries) went unseen for as long as nothing more was stored. The
    daemon's budget looks again `every` s after the last ask, and RSS is back within the bound."""
    plain = _run(_TRAIL, "plain")
    assert plain["cached"] >= plain["full"] and plain["over"] > 64 * MIB
    got = _run(_TRAIL, "follow")
    assert got["cached"] <= got["full"] - 16 * MIB
    assert got["over"] <= 64 * MIB


def test_a_budget_is_the_bound_less_everything_beyond_idle_but_the_cache() -> None:
    budget = RssBudget(100 * MIB, baseline=0, every=3600)
    first = budget(0)  # RSS of this process beyond 0, all "everything else"
    assert 0 <= first < 100 * MIB
    assert budget(50 * MIB) == first  # read at most once an `every`: the same answer
    roomy = RssBudget(1 << 40, baseline=0, every=0, slack=0)
    assert (1 << 40) - (4 << 30) < roomy(0) < 1 << 40
    kept = RssBudget(1 << 40, baseline=0, every=0)  # an eighth of the bound kept for a swing not seen yet
    assert (1 << 40) * 7 // 8 - (4 << 30) < kept(0) <= (1 << 40) * 7 // 8


def test_the_daemon_bounds_its_cache_once_started(tmp_path: Path) -> None:
    services = daemon_services(tmp_path / "ws")
    daemon = Daemon(services)  # no HTTP: the budget is the daemon's, not its face's
    daemon.start()
    try:
        limit = services.message_index.cache.limit
        assert isinstance(limit, RssBudget)
        assert limit.bound == services.settings.aml.cache_bytes and limit.baseline > 0
        assert limit.others is private_bytes  # (its index processes' own memory counted as its own)
        trailing = [t for t in threading.enumerate() if t.name == "rss-budget"]
        assert trailing  # its look after the cache's last ask (RssBudget.follow)
    finally:
        daemon.stop()
    for t in trailing:
        t.join(10)
        assert not t.is_alive(), "the budget's thread outlived the daemon"
