"""Optional dense retrieval: chunk embeddings beside the FTS index, ranked by cosine similarity.

Off unless `model.embedding-model` is set. Vectors are stored per (chunk text hash, model name):
a rebuild keeps them, identical text is embedded once, and a new embedding model finds none of
its own - the old model's vectors are stale and never compared with the new model's (status shows
them). Missing vectors are embedded on demand, at most `max_embed_per_search` per search, so the
first search on a big workspace does not stall on thousands of embeddings; the rest follow on later
searches or through `backfill`.

Brute force in Python over the scope's vectors: fine for personal workspaces (thousands of chunks),
not meant for the 100k-section case (the keyword index covers that).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Sequence

from mateclaw_mem.index.files.index import FileIndex

EmbedFn = Callable[[list[str]], list[list[float]]]


def pack(vec: list[float]) -> bytes:
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return array("f", (x / norm for x in vec)).tobytes()


def unpack(blob: bytes) -> array:
    out = array("f")
    out.frombytes(blob)
    return out


class DenseRetriever:
    def __init__(
        self, index: FileIndex, embed: EmbedFn, model: str, *, batch: int = 64, max_embed_per_search: int = 256
    ) -> None:
        self.index = index
        self.embed = embed
        self.model = model
        self.batch = batch
        self.max_embed_per_search = max_embed_per_search

    def _embed_missing(self, items: list[tuple[int, str, str]], cap: int | None) -> int:
        have = self.index.vectors([sha for _, sha, _ in items], self.model)
        todo: dict[str, str] = {}
        for _, sha, text in items:
            if sha not in have and sha not in todo:
                todo[sha] = text[:8000]  # a chunk is at most ~1.5k chars; messages can be longer
        pending = list(todo.items())[:cap] if cap is not None else list(todo.items())
        for i in range(0, len(pending), self.batch):
            part = pending[i : i + self.batch]
            vectors = self.embed([text for _, text in part])
            self.index.put_vectors(self.model, [(sha, pack(v)) for (sha, _), v in zip(part, vectors, strict=True)])
        return len(pending)

    def backfill(self, *, agent: str, owners: Sequence[str | None], kinds: Sequence[str]) -> int:
        """Embed every chunk of a scope (owner None: shared chunks) that has no vector for the current model."""
        return self._embed_missing(self.index.scope_chunks(agent=agent, owners=owners, kinds=kinds), None)

    def rank(
        self, query: str, *, agent: str, owners: Sequence[str | None], kinds: Sequence[str], limit: int
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine) best first. Raises whatever the embedding call raises (ModelError)."""
        items = self.index.scope_chunks(agent=agent, owners=owners, kinds=kinds)
        self._embed_missing(items, self.max_embed_per_search)
        q = unpack(pack(self.embed([query])[0]))
        have = self.index.vectors([sha for _, sha, _ in items], self.model)
        scored = []
        for cid, sha, _ in items:
            blob = have.get(sha)
            if blob is None:
                continue
            v = unpack(blob)
            if len(v) != len(q):
                continue  # same model name, different dimension: a misconfiguration; skip, never crash
            scored.append((cid, sum(a * b for a, b in zip(q, v, strict=True))))
        scored.sort(key=lambda x: -x[1])
        return scored[:limit]
