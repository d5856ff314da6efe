"""Turn vectors for AML search (`messages.db`, table `vectors`), fused into the ranking by
`index.dense.fuse` (see there for why a weighted sum). Off unless embeddings are configured: the
model-free ranking is then untouched.

Vectors are keyed by (text hash, vector key), so a rebuild keeps them and a forget, which rewrites
a turn's text, simply leaves the old vector unused. Each owner's vectors are kept in memory beside
its view (the same LRU bound) and read from SQLite only for turns that have none yet; the daemon's
`Backfill` embeds new turns in the background, never a search."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mateclaw_mem.db import immediate
from mateclaw_mem.index.dense import DENSE_EXTRA, Embedder, Gate, Matrix, fuse, text_sha
from mateclaw_mem.index.messages.docfields import TEXT

if TYPE_CHECKING:
    from mateclaw_mem.index.messages.storage import MessageStorage

log = logging.getLogger(__name__)

_SCHEMA = """CREATE TABLE IF NOT EXISTS vectors (sha TEXT NOT NULL, model TEXT NOT NULL, vec BLOB NOT NULL,
PRIMARY KEY (sha, model)) WITHOUT ROWID;"""
_SCAN = 512  # documents looked at per backfill step


class _Owner:
    def __init__(self) -> None:
        self.blobs: dict[int, bytes] = {}  # doc id -> vector, for the text it had when read
        self.texts: dict[int, str] = {}
        self.matrix: Matrix | None = None


class MessageVectors:
    def __init__(self, storage: MessageStorage, embedder: Embedder, weight: float, *, max_owners: int = 64) -> None:
        self.storage = storage
        self.embedder = embedder
        self.weight = weight
        self.max_owners = max_owners
        self.extra = DENSE_EXTRA  # turns the dense side may add beyond the lexical list
        self.gate = Gate()  # shut until the model's cosines prove to mean something (index/dense.py)
        self._owners: OrderedDict[tuple[str, str | None], _Owner] = OrderedDict()
        self._lock = threading.Lock()  # the per-owner caches (searches already hold the index lock)
        self._cursor = 0  # backfill: documents up to this id have been looked at
        self._covered = 0  # ... and this many of them have a vector
        self._rescan = False
        self.last_complete: bool | None = None  # whether the last search had every vector
        with storage.lock:
            storage._conn.execute(_SCHEMA)

    @property
    def model(self) -> str:
        return self.embedder.key

    def _read(self, shas: Sequence[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        conn = self.storage._conn
        with self.storage.lock:
            for i in range(0, len(shas), 500):
                part = list(shas[i : i + 500])
                marks = ",".join("?" * len(part))
                out.update(conn.execute(f"SELECT sha, vec FROM vectors WHERE model = ? AND sha IN ({marks})",
                                        (self.model, *part)).fetchall())
        return out

    # -- search ------------------------------------------------------------------------------------

    def query(self, text: str) -> bytes:
        return self.embedder.query(text)

    def fuse(self, agent: str, owner: str | None, docs: dict[int, str], q: bytes, lexical: list[tuple[float, int]],
             limit: int) -> list[tuple[float, int]]:
        """`lexical` ((score, turn id) best first) fused with the cosines of the owner's turns
        (`docs`: turn id -> its text)."""
        matrix = self._matrix(agent, owner, docs)
        if matrix is None or not len(matrix):
            return lexical
        cosine = list(zip(matrix.ids, matrix.scores(q), strict=True))
        pairs = [(i, s) for s, i in lexical]
        weight = self.weight * (self.gate.update(pairs, cosine) if self.weight < 1 else 1.0)  # 1: dense only
        if weight <= 0:
            return lexical  # the gate is shut: exactly the model-free ranking
        fused = fuse(pairs, cosine, weight, extra=self.extra)
        return [(s, i) for i, s in fused[:limit]]

    def _matrix(self, agent: str, owner: str | None, docs: dict[int, str]) -> Matrix | None:
        with self._lock:
            key = (agent, owner)
            cache = self._owners.get(key)
            if cache is None:
                cache = self._owners[key] = _Owner()
                while len(self._owners) > self.max_owners:
                    self._owners.popitem(last=False)
            self._owners.move_to_end(key)
            stale = [i for i, t in cache.texts.items() if docs.get(i) != t]
            for i in stale:  # gone or rewritten (a forget): its old vector must not count
                cache.blobs.pop(i, None)
                cache.texts.pop(i, None)
            todo = {i: t for i, t in docs.items() if i not in cache.texts}
            if todo:
                shas = {i: text_sha(t) for i, t in todo.items()}
                found = self._read(list(set(shas.values())))
                for i, sha in shas.items():
                    if sha in found:
                        cache.blobs[i] = found[sha]
                        cache.texts[i] = todo[i]
                if len(cache.blobs) < len(docs):
                    self._rescan = True  # rewritten turns sit below the backfill cursor
            if stale or todo or cache.matrix is None:
                ids = sorted(cache.blobs)
                cache.matrix = Matrix(ids, [cache.blobs[i] for i in ids])
            self.last_complete = len(cache.blobs) >= len(docs)
            return cache.matrix

    # -- backfill ----------------------------------------------------------------------------------

    def backfill_step(self, limit: int = 64) -> int:
        """Embed up to `limit` documents (any owner) without a vector; 0 when none is left."""
        if self._rescan:
            self._rescan, self._cursor, self._covered = False, 0, 0
        done = 0
        while done < limit:
            with self.storage.lock:
                rows = self.storage._conn.execute(
                    f"SELECT d.id, COALESCE({TEXT}, '') AS content FROM docs d WHERE d.id > ? ORDER BY d.id LIMIT ?",
                    (self._cursor, _SCAN)).fetchall()
            if not rows:
                return done
            shas = [text_sha(r["content"]) for r in rows]
            have = self._read(list(set(shas)))
            todo: dict[str, str] = {}
            take = 0
            for r, sha in zip(rows, shas, strict=True):
                if sha not in have and sha not in todo:
                    if len(todo) >= limit - done:
                        break
                    todo[sha] = r["content"]
                take += 1
            if todo:
                blobs = self.embedder.passages(list(todo.values()))
                with immediate(self.storage._conn, self.storage.lock) as conn:
                    conn.executemany("INSERT OR REPLACE INTO vectors (sha, model, vec) VALUES (?, ?, ?)",
                                     [(sha, self.model, b) for sha, b in zip(todo, blobs, strict=True)])
                self.storage.committed(documents=False)
            self._cursor = rows[take - 1]["id"] if take else self._cursor
            self._covered += take
            done += len(todo)
        return done

    def progress(self) -> tuple[int, int]:
        with self.storage.lock:
            total = self.storage._conn.execute("SELECT COUNT(*) FROM docs").fetchone()[0]
        return min(self._covered, total), total
