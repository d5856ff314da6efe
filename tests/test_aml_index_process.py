"""The message index's indexing in a child process (`aml.index-process`, messages/index_process.py).

Real processes, real files: the child is `python -m mateclaw_mem.index.messages.index_process`
writing the same messages.db, and the parent is a real `MessageIndex` (the last test: a real daemon).
What must hold: a stream of Adds is indexed by the child, not by the daemon's interpreter; an Add past
the lag bound waits for the child rather than indexing itself; the daemon's search cache is told
what the child rewrote (not dropped at every Add); a child that dies hands the indexing back; the
child ends when idle, when the index closes and when its parent is killed.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.aml import AmlMessage, AmlService
from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.index.messages.index import MessageIndex

TS = 1683554160000
WAIT = 60.0
linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc for the child")


def wait_until(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT} s: {what}")
        time.sleep(0.01)
    return value


def gone(pid: int) -> bool:
    """Exited (a zombie nobody reaped yet counts: it runs nothing)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


class Setup:
    def __init__(self, tmp: Path) -> None:
        self.log = ConversationLog(tmp / "log.db")
        self.index = MessageIndex(tmp / "messages.db", index_process=True)
        self.index._indexer.BUSY = 0.0  # a child at the first Add (the daemon waits for a stream of them)
        self.index._indexer.IDLE = 60.0  # (and keeps it while a loaded machine runs the test)
        self.svc = AmlService(self.log, self.index, ManualClock(datetime(2024, 1, 1, tzinfo=UTC)))
        self.n = 0

    def add(self, text: str = "Caroline: we went camping by the lake", *, user: str = "u1", turns: int = 1) -> None:
        msgs = [AmlMessage("user", f"{text} {self.n}-{k}", TS + 100 * self.n + k) for k in range(turns)]
        self.svc.add_json(f"r{self.n}", user, f"{user}:s1", msgs)
        self.n += 1

    def last_id(self) -> int:
        return int(self.log._conn.execute("SELECT MAX(id) FROM messages").fetchone()[0])

    def child(self) -> Any:
        return wait_until(lambda: (c := self.index._indexer._child) is not None and c.ready and c, "a child ready")

    def indexed(self) -> None:
        """Until the index holds every logged message (written by whichever process)."""
        wait_until(lambda: self.index.watermark() >= self.last_id(), "the index caught up with the log")

    def close(self) -> None:
        self.index.close()
        self.log.close()


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    s = Setup(tmp_path)
    try:
        yield s
    finally:
        s.close()


def test_a_stream_of_adds_is_indexed_by_the_child_not_the_daemon(setup: Setup) -> None:
    setup.add()
    child = setup.child()
    setup.indexed()
    mine = setup.index._storage.writes  # commits through the parent's own connection
    for _ in range(40):
        setup.add(turns=5)
    setup.add("Melanie: the zebra painted a violet kite")
    setup.indexed()
    assert setup.index._storage.writes == mine, "the parent indexed what the child should have"
    # (The lag bound reads the child's reports, which follow its commit.)
    wait_until(lambda: setup.index._storage.indexed_to >= setup.last_id(), "the child's report of its watermark")
    assert child._proc is not None and not gone(child._proc.pid)
    hits = setup.index.search("aml", "u1", "violet zebra kite", limit=3)
    assert hits and "violet kite" in hits[0].content


def test_an_add_past_the_lag_bound_waits_for_the_child(setup: Setup) -> None:
    setup.add()
    setup.child()
    setup.indexed()
    setup.index.MAX_LAG = 10
    mine = setup.index._storage.writes
    for _ in range(30):
        setup.add(turns=20)  # 20 turns: every Add is past the bound as it is logged
        assert setup.index._indexer.logged_to - setup.index._storage.indexed_to <= 10
    assert setup.index._storage.writes == mine, "an Add indexed in the parent instead of waiting for the child"


def _okey(index: MessageIndex, owner: str) -> tuple[int, int]:
    with sqlite3.connect(index.path) as db:
        okey, version = db.execute("SELECT okey, version FROM powners WHERE owner = ?", (owner,)).fetchone()
    return okey, version


def test_the_daemons_search_cache_is_told_what_the_child_rewrote(setup: Setup) -> None:
    for k in range(30):
        setup.add(f"Caroline: the lake house painting number {k}", turns=3)
    setup.child()
    setup.indexed()
    setup.index.search("aml", "u1", "lake house painting", limit=5)
    okey, _ = _okey(setup.index, "u1")
    kept = {k for k in setup.index.cache._d if k[0] == "t" and k[1] == okey}
    assert kept, "the search cached no postings"
    setup.add("Melanie: a xylophone and a quartz")  # words the cached terms do not include
    setup.indexed()
    _, version = _okey(setup.index, "u1")
    wait_until(lambda: setup.index.cache._known.get(okey, (None, -1))[1] == version,
               "the child's write told to the parent's cache")
    hits = setup.index.search("aml", "u1", "xylophone", limit=3)
    assert hits and "xylophone" in hits[0].content
    # Without the child's message, the search would have found the owner at a version its cache did
    # not know, and dropped every entry of it.
    assert kept <= set(setup.index.cache._d), "the parent's cache dropped postings the child's Add left alone"


@linux_only
def test_a_killed_child_hands_the_indexing_back(setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    setup.add()
    child = setup.child()
    setup.indexed()
    os.kill(child._proc.pid, signal.SIGKILL)
    wait_until(lambda: setup.index._indexer._child is None, "the parent to see its child die")
    mine = setup.index._storage.writes
    setup.add("Melanie: after the kill, a marmalade sandwich")
    setup.indexed()
    assert setup.index._storage.writes > mine, "nobody indexed after the child died"
    assert setup.index._indexer._child is None  # (another only after RETRY s)
    assert any("index process ended" in r.getMessage() for r in caplog.records)
    assert "marmalade" in setup.index.search("aml", "u1", "marmalade", limit=1)[0].content


def test_the_child_ends_when_idle_and_when_the_index_closes(setup: Setup) -> None:
    ix = setup.index._indexer
    setup.add()
    first = setup.child()._proc
    ix.IDLE = 0.3  # (only now: a child that ended before the test saw it ready would never be seen)
    with ix._cv:
        ix._cv.notify_all()  # (the thread waits out the IDLE it read)
    wait_until(lambda: first.poll() is not None, "the idle child to end")
    assert first.returncode == 0
    wait_until(lambda: ix._child is None, "the parent to forget the idle child")
    ix.IDLE = 60.0
    setup.add()
    second = setup.child()._proc
    assert second.pid != first.pid
    setup.index.close()
    assert second.poll() == 0, "close() left the child running"


def test_the_idle_time_counts_from_the_last_add_not_from_the_thread_waking(setup: Setup) -> None:
    """An Add wakes the child, not the indexing thread: the child's idle time is measured from the
    last Add (waiting IDLE from the thread's own last wake-up kept a child up to twice IDLE)."""
    ix = setup.index._indexer
    assert ix.idle_left() is None  # (no child)
    setup.add()
    setup.child()
    setup.add("Melanie: one more, through the child")
    left = ix.idle_left()
    assert left is not None and ix.IDLE - 5.0 < left <= ix.IDLE
    ix._last_want -= ix.IDLE - 1.0  # (as if the last Add had come IDLE - 1 s ago)
    left = ix.idle_left()
    assert left is not None and 0.0 < left <= 1.0


def test_a_search_ends_a_child_that_has_indexed_every_add(setup: Setup) -> None:
    """Searches after a stream of Adds (an import, then questions): the child, caught up, ends at the
    first search `SEARCH_QUIET` s after the last Add, not `IDLE` (60 s here) later - while it lives its
    memory is taken from the daemon's search cache."""
    ix = setup.index._indexer
    setup.add()
    first = setup.child()._proc
    setup.indexed()
    wait_until(lambda: setup.index._storage.indexed_to >= setup.last_id(), "the child's report of its watermark")
    assert setup.index.search("aml", "u1", "camping lake", limit=1)
    wait_until(lambda: first.poll() is not None, "the child to end after the search")
    assert first.returncode == 0
    wait_until(lambda: ix._child is None, "the parent to forget the child")
    setup.add("Melanie: a stream of Adds again")  # (BUSY 0 here: the next Add starts another)
    assert setup.child()._proc.pid != first.pid
    setup.indexed()
    assert "stream of Adds again" in setup.index.search("aml", "u1", "stream again", limit=1)[0].content


def test_a_search_leaves_a_child_that_is_behind_and_an_add_keeps_it(setup: Setup) -> None:
    ix = setup.index._indexer
    setup.add()
    setup.child()
    setup.indexed()
    wait_until(lambda: setup.index._storage.indexed_to >= setup.last_id(), "the child's report of its watermark")
    ix.SEARCH_QUIET = 60.0  # (the thread would end it meanwhile otherwise)
    ix.logged_to = setup.index._storage.indexed_to + 5  # an Add it has not indexed yet
    ix.searched()
    assert not ix._searched
    left = ix.idle_left()
    assert left is not None and left > ix.IDLE - 5.0
    ix.logged_to = setup.index._storage.indexed_to
    ix.searched()
    assert ix._searched
    setup.add("Melanie: another Add")  # the stream goes on: the child keeps going for IDLE s
    assert not ix._searched
    left = ix.idle_left()
    assert left is not None and left > ix.IDLE - 5.0
    assert ix._child is not None


_PARENT = textwrap.dedent("""
    import sys, time
    from datetime import UTC, datetime
    from pathlib import Path
    from mateclaw_mem.clock import ManualClock
    from mateclaw_mem.conversations.aml import AmlMessage, AmlService
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.messages.index import MessageIndex
    tmp = Path(sys.argv[1])
    index = MessageIndex(tmp / "messages.db", index_process=True)
    index._indexer.BUSY = 0.0
    svc = AmlService(ConversationLog(tmp / "log.db"), index, ManualClock(datetime(2024, 1, 1, tzinfo=UTC)))
    n = 0
    while (c := index._indexer._child) is None or not c.ready:
        svc.add(f"r{n}", "u1", "s1", [AmlMessage("user", f"Caroline: turn {n}", 1683554160000 + n)])
        n += 1
        time.sleep(0.01)
    print(c._proc.pid, flush=True)
    time.sleep(600)
""")


def rss_anon(pid: int) -> int:
    """The process's own memory (its heap, arenas, relocated library pages), 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return 0
    return next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("RssAnon:")), 0)


@linux_only
def test_a_quiet_child_gives_back_its_page_caches_and_free_heap(setup: Setup) -> None:
    """Between the end of a stream and its end (the parent's idle time) the child holds only what it
    cannot give back: the daemon's budget counts what it holds as the daemon's (runtime/malloc.py)."""
    setup.add(turns=20)
    pid = setup.child()._proc.pid
    busy = 0
    for n in range(150):  # 3,000 messages, words enough to grow the pages the child reads and writes
        setup.add(" ".join(f"w{(n * 37 + k) % 5000}" for k in range(30)), turns=20)
        busy = max(busy, rss_anon(pid))  # (while it indexes: it gives back only after a quiet second)
    setup.indexed()
    wait_until(lambda: 0 < rss_anon(pid) < busy - (1 << 20), "the quiet child handing a MiB back")


@linux_only
def test_the_child_ends_when_its_parent_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, str(tmp_path)], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        assert not gone(pid)
        parent.kill()
        parent.wait()
        wait_until(lambda: gone(pid), "the orphaned child to end")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[1]) == pid and "index_process" in Path(stat.parent / "cmdline").read_text(errors="replace"):
            out.append(int(stat.parent.name))
    return out


@linux_only
def test_the_daemon_indexes_a_stream_of_adds_in_a_child_and_ends_it_on_stop(tmp_path: Path) -> None:
    from tests.test_daemon_e2e import Daemon

    daemon = Daemon(tmp_path).start()
    assert daemon.proc is not None
    children: list[int] = []
    try:
        with daemon.client() as client:
            n = 0
            while not children:  # Adds back to back until the daemon hands their indexing to a child
                assert n < 5_000, "no child process after 5,000 Adds"
                # (20 turns an Add, as a leaderboard client sends: its indexing is most of the daemon's work.
                # With one turn an Add the indexing thread stayed under its BUSY share on a fast run: no child in 20,000.)
                r = client.post("/v1/aml/add", json={
                    "request_id": f"r{n}", "user_id": "u1", "session_id": "u1:s1",
                    "messages": [{"role": "user", "timestamp": TS + 20 * n + k,
                                  "content": f"Caroline: turn {n}-{k} by the lake"} for k in range(20)]})
                assert r.status_code == 200, r.text
                n += 1
                if n % 10 == 0:
                    children = _children(daemon.proc.pid)
            r = client.post("/v1/aml/add", json={"request_id": "last", "user_id": "u1", "session_id": "u1:s1",
                                                 "messages": [{"role": "user", "content": "Melanie: a kumquat"}]})
            assert r.status_code == 200, r.text
            found = client.post("/v1/aml/search", json={"query": "kumquat", "user_id": "u1", "top_k": 1}).json()
            assert "kumquat" in found["data"][0]["content"]  # acknowledged, so searchable (read your writes)
    finally:
        assert daemon.stop() == 0
    assert all(gone(pid) for pid in children), "the daemon's stop left its index process running"


@linux_only
def test_index_process_false_keeps_the_indexing_in_the_daemon(tmp_path: Path) -> None:
    """`aml.index-process: false`: the same stream of Adds starts no child (the daemon's thread indexes)."""
    from tests.test_daemon_e2e import Daemon

    (tmp_path / "mateclaw.yaml").write_text("timezone: UTC\naml:\n  index-process: false\n", encoding="utf-8")
    daemon = Daemon(tmp_path).start()
    assert daemon.proc is not None
    seen: list[int] = []
    try:
        with daemon.client() as client:
            for n in range(1500):
                r = client.post("/v1/aml/add", json={
                    "request_id": f"r{n}", "user_id": "u1", "session_id": "u1:s1",
                    "messages": [{"role": "user", "timestamp": TS + n, "content": f"Caroline: turn {n} by the lake"}]})
                assert r.status_code == 200, r.text
                if n % 50 == 0:
                    seen += _children(daemon.proc.pid)
            found = client.post("/v1/aml/search", json={"query": "turn 1499", "user_id": "u1", "top_k": 1}).json()
            assert "turn 1499" in found["data"][0]["content"]
    finally:
        assert daemon.stop() == 0
    assert seen == []


@linux_only
def test_a_search_right_after_an_add_waits_for_the_child_instead_of_indexing_beside_it(setup: Setup) -> None:
    """Indexing beside the child, the search would find the child's next version before the child's
    message about it, and drop the owner's cache (a cold search after every Add of a stream)."""
    import threading

    setup.add()
    child = setup.child()
    setup.indexed()
    mine = setup.index._storage.writes
    os.kill(child._proc.pid, signal.SIGSTOP)  # (idle: it holds no lock of messages.db)
    try:
        setup.add("Melanie: we bought a quince tree")
        got: list[Any] = []
        search = threading.Thread(target=lambda: got.extend(setup.svc.search("quince", "u1", 1)))  # (catches up)
        search.start()
        search.join(0.5)
        assert search.is_alive(), "the search indexed the Add itself instead of waiting for the child"
    finally:
        os.kill(child._proc.pid, signal.SIGCONT)
    search.join(WAIT)
    assert got and "quince" in got[0].content
    assert setup.index._storage.writes == mine


def test_a_childs_write_found_by_a_search_first_keeps_what_that_search_cached(tmp_path: Path) -> None:
    """The child's message about version v+1 may come after a search here read v+1 and cached it:
    those entries are of v+1 already and stay (the message is not a reason to drop them)."""
    from mateclaw_mem.index.messages.index_process import apply_wrote
    from mateclaw_mem.index.messages.view_cache import ByteCache

    cache = ByteCache(1 << 20)
    cache.check("g", 7, 4)
    cache.put(("t", 7, "lake"), b"at four", 16, ("g", 4))
    cache.check("g", 7, 5)  # a search reads the owner at 5 (the child's commit), before its message
    cache.put(("t", 7, "lake"), b"at five", 16, ("g", 5))
    apply_wrote(cache, [7, 4, 5, ["lake"], [], False, [], None])
    assert cache.get(("t", 7, "lake"), ("g", 5)) == b"at five"
    apply_wrote(cache, [7, 5, 6, ["lake"], [], False, [], None])  # (the next write does drop it)
    assert cache.get(("t", 7, "lake"), ("g", 6)) is None


def test_the_child_tells_a_write_only_once_it_is_committed() -> None:
    """Told before its commit, the daemon's cache would take the old version's entries for the new."""
    from mateclaw_mem.index.messages.index_process import _Relay

    sent: list[dict[str, Any]] = []
    relay = _Relay(sent.append)
    relay.wrote(3, 1, 2, {"kite"}, {0}, False, {11: None}, {"kite": 5})
    assert sent == []
    relay.committed()
    assert sent == [{"wrote": [3, 1, 2, ["kite"], [0], False, [11], {"kite": 5}]}]
    relay.committed()
    assert len(sent) == 1


def test_a_child_that_cannot_start_leaves_the_indexing_to_the_daemon(
        setup: Setup, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(sys, "executable", str(Path(setup.index.path).parent / "no-such-python"))
    for _ in range(5):
        setup.add("Melanie: we planted a medlar tree")
    setup.indexed()
    assert setup.index._indexer._child is None
    assert any("index process could not start" in r.getMessage() for r in caplog.records)
    assert "medlar" in setup.svc.search("medlar", "u1", 1)[0].content
