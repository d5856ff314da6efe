"""The message index's indexing in a process of its own (`aml.index-process`), so no Add waits for it.

Indexing an Add's 20 turns and folding its postings into the segments is ~3.5 ms of pure Python,
ten times what logging them costs. On a thread of the daemon's own it held the interpreter lock
while the next requests waited: with Adds every ~2 ms (a leaderboard client, three servers in turn)
the thread never idled and an Add's p50 went from 0.95 ms (nothing indexed) to 1.7. A process has
its own interpreter: the daemon's requests run on one core while this indexes on the other.

What it does is what `MessageIndex.sync` does on the daemon's thread - the same code on the same file
(SQLite serialises the two processes' writers; the watermark is read inside each write transaction)
- and nothing is lost with it: the log holds every acknowledged message, and whatever reads the index
for an answer catches up first (`MessageIndex.catch_up`). A kill of either process at any moment
leaves the log and a consistent index (one write transaction per batch).

The protocol, one line each way (the daemon is the parent):
- parent -> child: a line per wake-up ("sync"); pokes that arrive during a sync make one more.
  End of input (the parent closed it, or died): the child finishes its step and exits.
- child -> parent: JSON lines: `{"ready": 1}` once open; `{"to": N}` after each sync (its watermark:
  the parent's lag bound reads it); `{"wrote": [...]}` per committed write, what `ByteCache.wrote` is
  told (postings.Invalidate), so the parent's search cache keeps what the write left alone instead of
  dropping the owner at the version change it would see.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from mateclaw_mem.index.messages.storage import MessageStorage, _Turn

log = logging.getLogger(__name__)

_MODULE = "mateclaw_mem.index.messages.index_process"


class LogTail:
    """The conversation log read by the child, read-only (it never writes the log, and opening
    `conversations.log.ConversationLog` would run its migrations: the daemon's to run)."""

    def __init__(self, path: Path) -> None:
        from urllib.parse import quote

        from mateclaw_mem.db import connect

        self.path = path
        self._conn = connect(Path(f"file:{quote(str(path.resolve()))}?mode=ro"), uri=True)

    def since(self, after_id: int, *, limit: int = 1000) -> list[_Turn]:
        from mateclaw_mem.index.messages.storage import _Turn

        # (The owner as stored: "" for none, which the index stores as it is: db.owner_column.)
        rows = self._conn.execute("SELECT id, agent, owner, conversation_id, role, content, ts_ms, memoryless"
                                  " FROM messages WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit)).fetchall()
        return [_Turn(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7])) for r in rows]

    def close(self) -> None:
        self._conn.close()


# ---------------------------------------------------------------------------------------- the parent

_running: set[int] = set()  # pids of this process's children while they run (`private_bytes`)


def private_bytes() -> int:
    """What this process's index processes hold of their own (/proc/<pid>/status RssAnon: their heap,
    arenas and the pages their libraries relocated; their mapped code and libraries are this process's
    pages too), 0 with none running or off Linux. ~20 us a child. The daemon's RSS budget counts it as
    the rest of the daemon (runtime/malloc.RssBudget), so the cache gives the child's memory up while
    it runs: "RSS never above aml.cache-bytes + the idle daemon" holds for the two processes together."""
    total = 0
    for pid in list(_running):
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"RssAnon:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError, IndexError):
            continue
    return total



class IndexProcess:
    """The parent's handle on one child: started by `start`, woken by `poke`, ended by `stop` (or
    by its own death). `on_line` gets each of the child's messages (on the
    reader thread), `on_exit` the child's exit (this handle, its code, whether `stop` asked for it)."""

    # How long `stop` waits for the child's step under way (a merge of a long history: a second or two).
    STOP_WAIT = 30.0

    def __init__(self, db_path: Path, log_db: Path, on_line: Callable[[dict[str, Any]], None],
                 on_exit: Callable[[IndexProcess, int | None, bool], None]) -> None:
        self.db_path, self.log_db = db_path, log_db
        self.on_line, self.on_exit = on_line, on_exit
        self._proc: subprocess.Popen[bytes] | None = None
        self._stdin: IO[bytes] | None = None
        self._stdin_lock = threading.Lock()  # (`poke` writes what `_close_input` closes)
        self._reader: threading.Thread | None = None
        self._closing = False
        self.ready = False

    def start(self) -> None:
        """Spawn the child (`python -m` this module, on the same import path as this process)."""
        import mateclaw_mem

        root = str(Path(mateclaw_mem.__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        # glibc's allocator as the daemon sets it (runtime/malloc.py: one arena, large blocks from mmap),
        # here by the variables glibc reads at start: at 100k messages of one user the child peaked at
        # 55 MB instead of 65. (Ignored by other allocators; a person's own settings win.)
        env.setdefault("MALLOC_ARENA_MAX", "1")
        env.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 20))
        self._closing = False
        self.ready = False
        self._proc = subprocess.Popen(
            [sys.executable, "-m", _MODULE, str(self.db_path), str(self.log_db)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=env, close_fds=True)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        _running.add(self._proc.pid)
        self._stdin = self._proc.stdin
        # `poke` never waits for a child that stopped reading (Windows' Python 3.11 cannot say so for
        # a pipe: there the child's reader thread keeps it drained).
        with contextlib.suppress(AttributeError, OSError):
            os.set_blocking(self._stdin.fileno(), False)
        self._reader = threading.Thread(target=self._read, args=(self._proc, self._proc.stdout),
                                        name="aml-index-reader", daemon=True)
        self._reader.start()

    def poke(self) -> bool:
        """Wake the child for a sync (a few microseconds: an Add calls this on the event loop);
        False when it is gone (the caller indexes itself)."""
        # Under the lock that closes it: a write to a descriptor closed meanwhile could land in
        # whatever file reused its number.
        with self._stdin_lock:
            if self._stdin is None:
                return False
            try:
                os.write(self._stdin.fileno(), b"sync\n")
            except BlockingIOError:  # (64 KB of pokes it has not read yet: one more adds nothing)
                pass
            except OSError:  # (its end closed: it died; `_read` reports it)
                return False
            return True

    def _close_input(self) -> None:
        with self._stdin_lock:
            stdin, self._stdin = self._stdin, None
            if stdin is not None:
                with contextlib.suppress(OSError, ValueError):
                    stdin.close()

    def stop(self) -> None:
        """End the child: its input closed, its step under way finished (killed past `STOP_WAIT` s)."""
        proc = self._proc
        if proc is None:
            return
        self._closing = True
        self._close_input()
        try:
            proc.wait(self.STOP_WAIT)
        except subprocess.TimeoutExpired:
            log.warning("the index process did not end within %g s: killed (the log holds everything it had"
                        " not indexed; the next sync does it)", self.STOP_WAIT)
            proc.kill()
            proc.wait()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(5)

    def _read(self, proc: subprocess.Popen[bytes], out: IO[bytes]) -> None:
        try:
            for line in out:
                try:
                    msg = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue  # (never written by the child; stray output of a library, say)
                if isinstance(msg, dict):
                    if msg.get("ready"):
                        self.ready = True
                    try:
                        self.on_line(msg)
                    except Exception:
                        log.exception("the index process's message could not be applied")
        except (OSError, ValueError):
            pass
        code = proc.wait()
        _running.discard(proc.pid)
        expected = self._closing
        self._close_input()
        if self._proc is proc:
            self._proc = None
        self.on_exit(self, code, expected)


def apply_wrote(cache: Any, wrote: Sequence[Any]) -> None:
    """A child's `wrote` message told to this process's cache (`ByteCache.wrote`)."""
    okey, old, new, terms, segs, speakers, docs, cuts = wrote
    cache.wrote(int(okey), int(old), int(new), terms, segs, bool(speakers), docs, cuts)


# ----------------------------------------------------------------------------------------- the child


class _Relay:
    """The child's `postings.Invalidate`: what each write rewrote, sent to the parent once it is
    committed (`committed`: a search of the parent that found the new version before it heard of it
    would drop the owner's entries; one that heard before the commit, the entries of the old one)."""

    def __init__(self, send: Callable[[dict[str, Any]], None]) -> None:
        self.send = send
        self._held: list[list[Any]] = []  # (the writer holds the storage's lock from the write to its commit)

    def wrote(self, okey: int, old_version: int, new_version: int, terms: Iterable[str], segs: Iterable[int],
              speakers: bool, docs: Iterable[int], cuts: Mapping[str, int] | None = None) -> None:
        self._held.append([okey, old_version, new_version, list(terms), list(segs), speakers, list(docs),
                           dict(cuts) if cuts else None])

    def make_room(self, nbytes: int) -> None:
        """(The parent counts this process's memory as its own while it runs: `private_bytes`.)"""

    def committed(self) -> None:
        """Send what the committed write rewrote. (A write rolled back leaves its entries to go with the
        next commit: told a version that never was, the parent's cache drops those entries, no more.)"""
        held, self._held = self._held, []
        for w in held:
            self.send({"wrote": w})


def child_main(argv: Sequence[str]) -> int:
    """Index the log's tail into `argv[0]` (messages.db) from `argv[1]` (log.db) at every line read,
    until the input ends."""
    db_path, log_db = Path(argv[0]), Path(argv[1])
    # Ctrl-C in the daemon's terminal reaches the whole process group: the daemon decides when this
    # ends (its input closed), so that a sync is never cut short by the same key that stops it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s aml-index process: %(message)s")
    from mateclaw_mem.index.messages.storage import MessageStorage

    out = sys.stdout.buffer
    out_lock = threading.Lock()

    def send(msg: dict[str, Any]) -> None:
        line = orjson.dumps(msg) + b"\n"
        with out_lock:
            out.write(line)
            out.flush()

    storage = MessageStorage(db_path, log_db)
    relay = storage.cache = _Relay(send)  # (no search runs here: the parent's cache is the one to tell)
    storage.on_commit = relay.committed
    source = LogTail(log_db)
    wake = threading.Event()
    ended = threading.Event()

    def listen() -> None:  # stdin on a thread: a poke during a sync makes one more, never a backlog
        for _ in sys.stdin.buffer:
            wake.set()
        ended.set()
        wake.set()

    threading.Thread(target=listen, name="aml-index-input", daemon=True).start()
    send({"ready": 1})
    quiet = True  # (nothing held yet to give back)
    try:
        while True:
            if not wake.wait(None if quiet else QUIET):
                _give_back(storage, source)
                quiet = True
                continue
            wake.clear()
            quiet = False
            if ended.is_set():
                return 0
            try:
                storage.sync(source, batch=_BATCH)
            except Exception:  # derived data: the next poke, or the parent's own catch-up, does it
                log.exception("indexing the conversation log's tail failed")
                time.sleep(0.5)
            send({"to": storage.indexed_to})
    except BrokenPipeError:  # the parent is gone
        return 0
    finally:
        storage.close()
        source.close()


_BATCH = 200  # log messages per write transaction (as the daemon's own thread)
# s without a wake-up after which the child gives back its page caches and the heap's free pages; the
# parent ends it later (index._Indexer.IDLE). Past the merges that follow a stream's last write (0.02-0.5 s).
QUIET = 1.0


def _give_back(storage: MessageStorage, source: LogTail) -> None:
    """SQLite's page caches emptied and glibc's free pages handed back: after 100k messages of one user's
    Adds RssAnon 33 -> 28 MB (what stays: the imports, ~16 MB in a fresh child, SQLite's statements and
    schema, Python's arenas). What the next sync reads again comes from the system's page cache."""
    import ctypes

    with storage.lock:
        storage._conn.execute("PRAGMA shrink_memory")
    source._conn.execute("PRAGMA shrink_memory")
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(ctypes.c_size_t(0))



if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
