"""runtime/malloc.tune: a block of 1 MB and more comes from mmap even after a larger one was freed
(glibc's default raises that size to the largest freed, and a search's freed arrays then stay in the
process), so what a search frees goes back to the system."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

# What both probes begin with: tuned or not (argv[1]), and glibc's malloc, free and mallinfo2.
_LIBC = """
import ctypes, sys, threading
sys.path.insert(0, {root!r})
from mateclaw_mem.runtime import malloc
tuned = malloc.tune() if sys.argv[1] == "tune" else None

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                  "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
"""

_PROBE = _LIBC + """out = []

def work():
    libc.free(libc.malloc(8 << 20))  # a large block freed: glibc's default now serves up to 8 MB from its arenas
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(2 << 20)
    out.append(libc.mallinfo2().hblkhd - before)  # bytes mmapped for it (0: it came from an arena)
    libc.free(block)

t = threading.Thread(target=work)
t.start()
t.join()
print(tuned, out[0] >= 2 << 20)
"""


def _probe(mode: str) -> list[str]:
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", _PROBE.format(root=root), mode], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_freed_large_block_does_not_keep_the_next_ones_out_of_mmap() -> None:
    assert _probe("plain") == ["None", "False"]  # glibc's default: the 2 MB block is taken from an arena
    assert _probe("tune") == ["True", "True"]


_TOP = _LIBC + """
before = libc.mallinfo2().arena
blocks = [libc.malloc(64 << 10) for _ in range(48)]  # 3 MB in blocks under both mmap thresholds
grown = libc.mallinfo2().arena - before
for b in reversed(blocks):
    libc.free(b)
print(grown >= 5 << 19, libc.mallinfo2().arena - before >= 5 << 19)  # (2.5 MB: some came from free room)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
@pytest.mark.parametrize(("mode", "kept"), [("plain", "False"), ("tune", "True")])
def test_what_is_freed_at_the_top_of_the_heap_is_kept(mode: str, kept: str) -> None:
    """A search's arrays under 1 MB, freed: glibc's default gives the heap's top back at once (and the
    next search faults it in again); tuned, up to 4 MB of it stays for the next."""
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", _TOP.format(root=root), mode], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", kept]


_HEAP = 64 << 20  # glibc's HEAP_MAX_SIZE on 64-bit: a thread arena's heap is reserved at this alignment


def thread_arenas(pid: int) -> int:
    """glibc arenas beside the main one in process `pid`: each begins a heap reserved as 64 MiB at a
    64 MiB boundary (/proc/<pid>/maps), whose header (/proc/<pid>/mem) points at the arena just after it
    and at no earlier heap. The header is what tells it from numpy's OpenBLAS buffer, also 64 MiB of
    anonymous memory: the kernel places that at a 2 MiB boundary, so one start in 32 lands on a 64 MiB
    one (a CI run counted it as an arena)."""
    rows = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        rows.append((start, end, fields[1], len(fields) < 6))  # (anonymous: no path)
    found = 0
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for k, (start, end, perms, anon) in enumerate(rows):
            if not (anon and perms.startswith("rw") and start % _HEAP == 0):
                continue
            nxt = rows[k + 1] if k + 1 < len(rows) else None
            stop = nxt[1] if nxt and nxt[0] == end and nxt[2] == "---p" else end
            if stop - start != _HEAP:
                continue
            mem.seek(start)
            ar_ptr, prev = struct.unpack("<QQ", mem.read(16))  # heap_info: the arena, the heap before this one
            found += prev == 0 and start < ar_ptr < start + 4096
    return found


_ARENAS = """
import ctypes, sys, threading
sys.path.insert(0, {root!r})
import numpy  # noqa: F401  (its OpenBLAS buffer: 64 MiB of anonymous memory that is not an arena)
from mateclaw_mem.runtime import malloc
if sys.argv[1] == "tune":
    malloc.tune()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
ready, done = threading.Barrier(4), threading.Event()

def work():
    libc.malloc(4096)
    ready.wait()
    done.wait()

threads = [threading.Thread(target=work) for _ in range(3)]
for t in threads:
    t.start()
ready.wait()
print("ready", flush=True)
sys.stdin.read()
done.set()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator, /proc")
@pytest.mark.parametrize(("mode", "arenas"), [("plain", 3), ("tune", 0)])
def test_thread_arenas_counts_what_glibc_made(mode: str, arenas: int) -> None:
    """The count the daemon's test relies on: three threads that allocate at once get three arenas of
    their own by glibc's default, none once the allocator is tuned, and numpy's buffer is never one."""
    root = str(Path(__file__).resolve().parents[1])
    proc = subprocess.Popen([sys.executable, "-c", _ARENAS.format(root=root), mode], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert thread_arenas(proc.pid) == arenas
    finally:
        proc.communicate("", timeout=60)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator, /proc")
def test_the_daemons_threads_share_one_arena(tmp_path: Path) -> None:
    """`serve` sets the allocator before its first thread: the page check it begins before its imports
    ran on four threads, each of which got an arena of its own that later threads then shared in turn
    (measured: 17.6 MB of RSS over the idle daemon after 100k messages of Adds, 10.9 with one arena)."""
    from tests.test_daemon_e2e import Daemon

    (tmp_path / "mateclaw.yaml").write_text("timezone: UTC\n", encoding="utf-8")
    daemon = Daemon(tmp_path).start()
    assert daemon.proc is not None
    try:
        with daemon.client() as client:
            for n in range(40):  # (threads of the HTTP lane and the index allocate)
                r = client.post("/v1/aml/add", json={"request_id": f"r{n}", "user_id": "u1", "session_id": "s1",
                                                     "messages": [{"role": "user", "content": f"turn {n} by the lake"}]})
                assert r.status_code == 200, r.text
            assert client.post("/v1/aml/search", json={"query": "lake", "user_id": "u1", "top_k": 5}).json()["data"]
        assert thread_arenas(daemon.proc.pid) == 0
    finally:
        assert daemon.stop() == 0
