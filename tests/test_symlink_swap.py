"""A folder swapped with a symbolic link while writes go through: nothing lands outside.

Acceptance test for issue 13, point 7. One thread keeps replacing an agent's `memory/` folder with a
symbolic link to a folder outside the workspace (and putting the real folder back), while 1,000
writes to files in that folder go through the real HTTP API on a real uvicorn server. Afterwards:
no file and no temp file outside the workspace, no 5xx, no dropped connection; every refusal is a
4xx with a reason, and every write that was acknowledged is in the real folder.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.server import serve_api

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="swaps with renameat2 (Linux)")

WRITES = 1000
CLIENTS = 4
FILES = "/api/v1/agents/default/workspace/memory/file"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path / "ws", mcp=False)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> None:
    """Swap two names atomically: `memory` is always there, either the real folder or the link."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


def _swap_until(stop: threading.Event, folder: Path, outside: Path, swaps: list[int]) -> None:
    link = folder.parent / ".memory-link"  # hidden: neither a memory file nor an agent
    os.symlink(outside, link)
    while not stop.is_set():
        _exchange(folder, link)  # `memory` now leads outside the workspace...
        time.sleep(0.0002)  # (a breath in each state: a tight loop would only starve the writers)
        _exchange(folder, link)  # ...and is the real folder again
        time.sleep(0.0002)
        swaps[0] += 1
    os.unlink(link)
    assert folder.is_dir() and not folder.is_symlink()


def _everything_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_a_folder_swapped_with_a_link_during_1000_writes_receives_nothing_outside(
    client: httpx.Client, tmp_path: Path
) -> None:
    workspace = client.services.store.root  # type: ignore[attr-defined]
    folder = workspace / "default" / "memory"
    folder.mkdir(exist_ok=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    base_url = str(client.base_url)

    def write_all(worker: int) -> list[tuple[str, int | str, str]]:
        out: list[tuple[str, int | str, str]] = []
        with httpx.Client(base_url=base_url, timeout=30) as own:  # its own keep-alive connection
            for n in range(worker, WRITES, CLIENTS):
                rel = f"memory/note-{n}.md"
                try:
                    r = own.put(FILES, json={"path": rel, "content": f"# note {n}\n\nwritten during a swap\n"})
                except httpx.TransportError as exc:  # a dropped connection: never acceptable
                    out.append((rel, "dropped", type(exc).__name__))
                    continue
                reason = r.json().get("detail", {}).get("reason", "") if r.status_code >= 400 else ""
                out.append((rel, r.status_code, reason))
        return out

    stop = threading.Event()
    swaps = [0]
    swapper = threading.Thread(target=_swap_until, args=(stop, folder, outside, swaps), daemon=True)
    swapper.start()
    try:
        with ThreadPoolExecutor(CLIENTS) as pool:
            results = [x for chunk in pool.map(write_all, range(CLIENTS)) for x in chunk]
    finally:
        stop.set()
        swapper.join(timeout=30)

    statuses = Counter(status for _, status, _ in results)
    assert swaps[0] > 0, "the swapper never ran"
    assert len(results) == WRITES
    assert _everything_under(outside) == [], f"files outside the workspace ({statuses})"
    assert statuses["dropped"] == 0, f"dropped connections: {statuses}"
    server_errors = [(rel, s, why) for rel, s, why in results if isinstance(s, int) and s >= 500]
    assert server_errors == [], f"5xx answers: {server_errors[:5]} ({statuses})"
    refused = [(rel, s, why) for rel, s, why in results if isinstance(s, int) and 400 <= s < 500]
    assert all(why for _, _, why in refused), f"a 4xx without a reason: {refused[:5]}"
    acknowledged = {rel for rel, s, _ in results if s == 200}
    assert acknowledged, f"no write went through at all: {statuses}"
    on_disk = {f"memory/{p.name}" for p in folder.iterdir()}
    assert acknowledged <= on_disk, f"acknowledged but not in the workspace: {sorted(acknowledged - on_disk)[:5]}"
    temp_files = [p for p in folder.parent.rglob(".*.tmp")]
    assert temp_files == [], f"temp files left behind: {temp_files[:5]}"
