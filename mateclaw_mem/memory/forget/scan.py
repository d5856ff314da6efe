"""The proof of a forget: every byte under the workspace root searched for the claim's words, with a
positive control that shows the search would have found them.

What is searched: every file under the root (memory files, history copies and their records,
SQLite databases with their WAL and SHM files, provenance, locks - everything), and the decompressed
stream of every gzip file (month archives, and history copies of them, recognised by their magic
bytes rather than their names). The claim is looked for in each spelling a store may have kept:

- its tokens (NFKC, any case) with up to 16 non-word characters between them, so markdown, list
  markers, punctuation and JSON escapes (`\\n`, `\\u00e9`) in between still match;
- its JSON-escaped spelling (`ensure_ascii`: "\\u6211\\u559d…") when it has non-ASCII characters;
- the search index's tokens (stems, CJK bigrams), as `messages.db` stores them space-joined.

The positive control: before the walk, a fresh random phrase is planted under the state dir in a
plain file, a gzip file and an SQLite database whose only copy is in its WAL; the same walk, with
the same patterns built the same way, must find it in all three, else the scan proves nothing and
says so (`control.ok` false). The control folder is removed afterwards.

Not searched: bytes outside the workspace root (SQLite's temp files, the OS page cache, freed disk
blocks of files replaced by an atomic rename), and text split by an SQLite overflow-page boundary.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import secrets
import shutil
import sqlite3
import zlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mateclaw_mem.db import locked_by_sqlite, read_apart
from mateclaw_mem.index.tokenizer import tokenize
from mateclaw_mem.memory.forget.matching import tokens

CONTROL_DIR = "forget-scan-control"
GZIP_MAGIC = b"\x1f\x8b"
MAX_GUNZIP = 512 * 1024 * 1024  # past this a gzip member is not ours to unpack
CHUNK = 8 * 1024 * 1024  # bytes searched at once: a 1 GB log.db is never held whole
OVERLAP = 64 * 1024  # longer than any spelling of a claim (2,000 characters, 16 separators between tokens)
_SEP = r"(?:[\W_]|\\u[0-9a-fA-F]{4}|\\[nrt]){0,16}"


def patterns(phrase: str) -> list[re.Pattern[str]]:
    """The regular expressions one phrase is searched with (see the module's list)."""
    raw = tokens(phrase)
    out = [_joined([re.escape(t) for t in raw])]
    escaped = [json.dumps(t)[1:-1] for t in raw]
    if escaped != raw:
        out.append(_joined([re.escape(t) for t in escaped]))
    stems = [t for t in tokenize(phrase) if t.strip()]
    if stems and stems != raw:
        out.append(_joined([re.escape(t) for t in stems]))
    return out


def _joined(parts: list[str]) -> re.Pattern[str]:
    return re.compile(_SEP.join(parts), re.IGNORECASE)


def count(text: str, pats: list[re.Pattern[str]], limit: int | None = None) -> int:
    """Occurrences in one decoded text (those starting before `limit`): the most any one spelling
    finds (they overlap)."""
    end = len(text) if limit is None else limit
    return max((sum(1 for m in p.finditer(text) if m.start() < end) for p in pats), default=0)


def occurrences(path: Path, pats: list[re.Pattern[str]]) -> int:
    """Occurrences in one file's raw bytes (0 when it cannot be read)."""
    try:
        with _raw(path) as fh:
            return _stream(fh.read, {"p": pats})[0]["p"]
    except OSError:
        return 0


def _raw(path: Path) -> AbstractContextManager[IO[bytes]]:
    # A database this process has open is read by a child (db.read_apart says why: closing our own
    # descriptor of it would drop SQLite's locks, and another process would delete its WAL).
    return read_apart(path) if locked_by_sqlite(path) else open(path, "rb")


def _stream(read: Callable[[int], bytes], searches: dict[str, list[re.Pattern[str]]], cap: int | None = None,
            chunk: int = CHUNK, overlap: int = OVERLAP) -> tuple[dict[str, int], int]:
    """Counts per label over a byte stream read in windows of CHUNK bytes that overlap by OVERLAP (a
    match across a window's end is found in the next one, and counted once: only matches starting
    before the overlap count, but in the last window); returns the counts and the bytes read."""
    counts = dict.fromkeys(searches, 0)
    window = read(chunk)
    total = len(window)
    while True:
        nxt = b"" if cap is not None and total >= cap else read(chunk)
        total += len(nxt)
        last = not nxt
        text = window.decode("utf-8", "surrogateescape")
        limit = None if last else len(window[:-overlap].decode("utf-8", "surrogateescape"))
        for label, pats in searches.items():
            counts[label] += count(text, pats, limit)
        if last:
            return counts, total
        window = window[-overlap:] + nxt


@dataclass
class Found:
    files: int = 0
    bytes: int = 0
    gunzipped: int = 0
    hits: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # phrase label -> [{"file", "count"}]


def walk(root: Path, searches: dict[str, list[re.Pattern[str]]], *, chunk: int = CHUNK, overlap: int = OVERLAP
         ) -> Found:
    """Every file under `root` (links not followed), each searched with every labelled pattern set;
    a gzip file's stream is searched too (up to MAX_GUNZIP bytes unpacked)."""
    found = Found(hits={label: [] for label in searches})
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder) / name
            if path.is_symlink() or not path.is_file():
                continue
            try:
                with _raw(path) as fh:
                    first = fh.read(2)
                    counts, size = _stream(_after(first, fh.read), searches, chunk=chunk, overlap=overlap)
                    packed = first == GZIP_MAGIC
            except OSError:
                continue
            found.files += 1
            found.bytes += size
            if packed and (inner := _gunzipped(path, searches, chunk, overlap)) is not None:
                found.gunzipped += 1
                counts = {label: counts[label] + inner[label] for label in counts}
            rel = path.relative_to(root).as_posix()
            for label, n in counts.items():
                if n:
                    found.hits[label].append({"file": rel, "count": n})
    return found


def _after(first: bytes, read: Callable[[int], bytes]) -> Callable[[int], bytes]:
    """`read` with `first` (bytes already read: a pipe cannot seek back) given out first."""
    head = [first]

    def again(n: int) -> bytes:
        if head:
            return head.pop() + read(max(n - len(first), 0))
        return read(n)

    return again


def _gunzipped(path: Path, searches: dict[str, list[re.Pattern[str]]], chunk: int, overlap: int
               ) -> dict[str, int] | None:
    try:
        with gzip.open(path, "rb") as fh:
            return _stream(fh.read, searches, cap=MAX_GUNZIP, chunk=chunk, overlap=overlap)[0]
    except (OSError, EOFError, zlib.error):
        return None  # not a whole gzip stream after all: its raw bytes were searched


class Control:
    """The planted phrase: a plain file, a gzip file and an SQLite row only in its WAL (the
    connection stays open, with automatic checkpoints off, until `remove`)."""

    KINDS = ("text", "gzip", "sqlite-wal")

    def __init__(self, state_dir: Path) -> None:
        self.phrase = f"forget scan control {secrets.token_hex(8)} planted here"
        self.dir = state_dir / CONTROL_DIR
        shutil.rmtree(self.dir, ignore_errors=True)  # one a crashed scan left behind
        self.dir.mkdir(parents=True)
        (self.dir / "control.md").write_text(self.phrase + "\n", encoding="utf-8")
        (self.dir / "control.md.gz").write_bytes(gzip.compress((self.phrase + "\n").encode("utf-8"), mtime=0))
        self._conn = sqlite3.connect(str(self.dir / "control.db"), isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA wal_autocheckpoint=0")
        self._conn.execute("CREATE TABLE t (text TEXT)")
        self._conn.execute("INSERT INTO t VALUES (?)", (self.phrase,))

    def kinds_found(self, root: Path, hits: list[dict[str, Any]]) -> list[str]:
        where = {h["file"] for h in hits}
        base = self.dir.relative_to(root).as_posix()
        files = {"text": f"{base}/control.md", "gzip": f"{base}/control.md.gz", "sqlite-wal": f"{base}/control.db-wal"}
        return [kind for kind in self.KINDS if files[kind] in where]

    def remove(self) -> None:
        self._conn.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def prove(root: Path, state_dir: Path, claim: str) -> dict[str, Any]:
    """The byte scan of a receipt: where the claim still is (hits outside the control folder), and
    whether the control was found in every kind of container it was planted in."""
    control = Control(state_dir)
    try:
        found = walk(root, {"claim": patterns(claim), "control": patterns(control.phrase)})
        kinds = control.kinds_found(root, found.hits["control"])
    finally:
        control.remove()
    base = control.dir.relative_to(root).as_posix() + "/"
    hits = [h for h in found.hits["claim"] if not h["file"].startswith(base)]
    return {"files": found.files, "bytes": found.bytes, "gunzipped": found.gunzipped,
            "occurrences": sum(h["count"] for h in hits), "found": hits,
            "control": {"planted": list(Control.KINDS), "found": kinds, "ok": kinds == list(Control.KINDS)}}
