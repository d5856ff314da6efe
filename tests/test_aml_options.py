"""Search `options` (multiple choice) over HTTP: a secondary query that helps, never more than top_k
results, and the question leads even when the options hold more words than a query may search by."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mateclaw_mem.index.tokenizer import MAX_QUERY_TERMS
from tests.support.aml_stores import STORES, serve_store

TS = 1683554160000
WORDS = [f"q{chr(97 + i // 26)}{chr(97 + i % 26)}xv" for i in range(MAX_QUERY_TERMS + 16)]  # rare, made-up words


@pytest.fixture(params=STORES)
def client(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[httpx.Client]:
    yield from serve_store(request, tmp_path, monkeypatch)  # SQLite (the daemon) and PostgreSQL (--aml-only)


def _add(client: httpx.Client, texts: list[str]) -> None:
    body = {"request_id": "r", "user_id": "u1", "session_id": "s", "messages": [
        {"role": "user", "timestamp": TS + i, "content": t} for i, t in enumerate(texts)]}
    assert client.post("/v1/aml/add", json=body).status_code == 200


def _search(client: httpx.Client, query: str, top_k: int, options: list[str] | None = None) -> list[dict[str, Any]]:
    body: dict[str, Any] = {"query": query, "user_id": "u1", "top_k": top_k}
    if options is not None:
        body["options"] = options
    r = client.post("/v1/aml/search", json=body)
    assert r.status_code == 200, r.text
    return r.json()["data"]


def test_options_lift_the_turn_they_name_and_never_exceed_top_k(client: httpx.Client) -> None:
    _add(client, ["Caroline: we went to the lake by train", "Caroline: we went to the lake by bus",
                  "Mel: the weather was fine", "Caroline: we went to the lake by bicycle"])
    question = "How did Caroline get to the lake?"

    def rank_of_bicycle(items: list[dict[str, Any]]) -> int:
        return next(n for n, i in enumerate(items, 1) if i["content"].endswith("by bicycle"))

    plain = _search(client, question, 4)
    chosen = _search(client, question, 4, ["by car", "by bicycle", "on foot", "by ship"])
    assert rank_of_bicycle(chosen) < rank_of_bicycle(plain)
    for top_k in (1, 2, 3):
        assert len(_search(client, question, top_k, ["train", "bus", "bicycle", "weather fine"])) == top_k


def test_the_question_leads_past_the_query_term_limit(client: httpx.Client) -> None:
    # The question's words occur in several turns (a lower idf than the options' words, each said once):
    # cutting the query to its rarest terms kept the options' words and dropped every one of the question's.
    _add(client, ["Caroline: my puppy Biscuit adores the seaside",
                  *(f"Caroline: Biscuit the puppy adores the seaside, part {i} of the story" for i in range(3)),
                  *(f"Mel: nothing about dogs here, just {w}" for w in WORDS)])
    options = [" ".join(WORDS[i::4]) for i in range(4)]  # more words than a query may search by
    got = _search(client, "Which place does Biscuit the puppy adore?", 5, options)
    assert len(got) == 5
    assert all("Biscuit" in i["content"] for i in got[:4]), got  # the four turns the question is about first
