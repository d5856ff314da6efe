"""An embeddings client for the benches: `model.*`-style settings and an optional on-disk cache.

The cache (SQLite, keyed by model, mode and text) makes a second run with another weight take
seconds instead of re-embedding a whole corpus; a run that measures latency should embed queries
live (`cache_queries=False`), which is the default."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from types import SimpleNamespace

from mateclaw_mem.index.dense import Embedder
from mateclaw_mem.llm.client import ModelClient
from mateclaw_mem.settings import ModelSettings


def bench_embedder(
    base_url: str, model: str, *, query_prefix: str = "", passage_prefix: str = "", input_type: bool = False,
    cache: Path | None = None, cache_queries: bool = False,
) -> Embedder:
    # Embeddings-only settings (no chat model): the configuration this bench also exercises.
    section = ModelSettings(base_url=base_url, embedding_model=model, timeout_seconds=600)
    client = ModelClient.from_settings(SimpleNamespace(model=section))
    db = sqlite3.connect(str(cache), check_same_thread=False) if cache else None
    if db is not None:
        db.execute("CREATE TABLE IF NOT EXISTS e (k TEXT PRIMARY KEY, v BLOB NOT NULL)")

    def embed(texts: list[str], kind: str | None) -> list[list[float]]:
        if db is None or (kind == "query" and not cache_queries) or (kind is None and len(texts) == 1):
            return client.embed(texts, input_type=kind)
        keys = [hashlib.sha256(f"{model}|{kind}|{t}".encode()).hexdigest() for t in texts]
        have = dict(db.execute(f"SELECT k, v FROM e WHERE k IN ({','.join('?' * len(keys))})", keys).fetchall())
        todo = [i for i, k in enumerate(keys) if k not in have]
        if todo:
            new = client.embed([texts[i] for i in todo], input_type=kind)
            rows = [(keys[i], _blob(v)) for i, v in zip(todo, new, strict=True)]
            db.executemany("INSERT OR REPLACE INTO e VALUES (?, ?)", rows)
            db.commit()
            have.update(rows)
        return [_floats(have[k]) for k in keys]

    return Embedder(embed, model, query_prefix, passage_prefix, input_type)


def _blob(v: list[float]) -> bytes:
    from array import array

    return array("f", v).tobytes()


def _floats(b: bytes) -> list[float]:
    from array import array

    out = array("f")
    out.frombytes(b)
    return list(out)


def random_embedder(dim: int = 384) -> Embedder:
    """A deliberately bad embedding model: vectors from a hash of the text (like the test server's),
    unrelated to meaning. Fusion with it should leave the keyword figures where they are."""
    import math

    def one(text: str) -> list[float]:
        raw: list[float] = []
        seed = text.encode()
        while len(raw) < dim:
            seed = hashlib.sha256(seed).digest()
            raw += [(b - 127.5) / 127.5 for b in seed]
        norm = math.sqrt(sum(x * x for x in raw[:dim])) or 1.0
        return [x / norm for x in raw[:dim]]

    return Embedder(lambda texts, kind: [one(t) for t in texts], "random", input_type=True)
