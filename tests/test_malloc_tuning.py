"""runtime/malloc.tune: a block of 1 MB and more comes from mmap even after a larger one was freed
(glibc's default raises that size to the largest freed, and a search's freed arrays then stay in the
process), so what a search frees goes back to the system."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

_PROBE = """
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
out = []

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
