"""Searchable once acknowledged, with the Add indexed after its answer (issue 36: Add p50).

On SQLite an Add answers once its messages are committed to log.db; the message index's own thread
indexes them afterwards (`MessageIndex.sync_later`) and every search first catches the index up with
the log (`MessageIndex.catch_up`). These tests hold that promise: an Add's messages are found by the
very next search - of the same client, or of another client that saw the acknowledgement - over the
real HTTP face (fast lane, event loop and pool), one client and several at once; and with the
indexing thread stopped, the search alone indexes them. Durability (kill -9 after the 200, the index
behind) is in tests/test_aml_durability.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.aml import AmlMessage, AmlService
from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.index.messages.index import MessageIndex
from tests.support.server import serve_api

TS = 1683554160000
FILLER = ("we went camping by the lake and painted the sunset; the kids loved the pottery class and the"
          " museum of dinosaurs, then a long walk with the puppy")


def _add_body(client_no: int, n: int, user: str, turns: int = 20) -> dict[str, object]:
    # One turn carries the marker; the rest is LoCoMo-sized filler, so indexing has real work to do.
    return {"request_id": f"c{client_no}-{n}", "user_id": user, "session_id": f"{user}:s{client_no}",
            "messages": [{"role": "user", "timestamp": TS + n * 100 + k,
                          "content": (f"{('Caroline', 'Melanie')[k % 2]}: "
                                      + (_marker(client_no, n) + " " if k == turns // 2 else "") + FILLER)}
                         for k in range(turns)]}


def _marker(client_no: int, n: int) -> str:
    return f"zq{client_no}x{n}"


def _hits(client: httpx.Client, user: str, marker: str) -> int:
    r = client.post("/v1/aml/search", json={"query": f"{marker} lake", "user_id": user, "top_k": 5})
    assert r.status_code == 200, r.text
    return sum(marker in item["content"] for item in r.json()["data"])


@pytest.fixture
def api(tmp_path: Path) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path / "ws", mcp=False)


def test_each_add_is_found_by_the_next_search_one_client(api: httpx.Client) -> None:
    missed = []
    for n in range(60):
        r = api.post("/v1/aml/add", json=_add_body(0, n, "solo"))
        assert r.status_code == 200, r.text
        if _hits(api, "solo", _marker(0, n)) != 1:
            missed.append(n)
    assert missed == [], f"acknowledged Adds not found by the next search: {missed}"


def test_concurrent_clients_find_their_own_and_each_others_acknowledged_adds(api: httpx.Client) -> None:
    """Eight clients at once, two per user: each searches for its Add right after the 200, and for
    the latest Add another client of its user had acknowledged before this search began."""
    clients, rounds = 8, 15
    acknowledged: dict[int, int] = {}  # client -> its last acknowledged n
    guard = threading.Lock()
    failures: list[str] = []

    def run(c: int) -> None:
        user, peer = f"pair-{c // 2}", c ^ 1
        with httpx.Client(base_url=str(api.base_url), timeout=60) as mine:
            for n in range(rounds):
                r = mine.post("/v1/aml/add", json=_add_body(c, n, user))
                if r.status_code != 200:
                    failures.append(f"client {c} Add {n}: {r.status_code} {r.text[:200]}")
                    return
                with guard:
                    acknowledged[c] = n
                    seen = acknowledged.get(peer)
                if (k := _hits(mine, user, _marker(c, n))) != 1:
                    failures.append(f"client {c}: its own Add {n} found {k} times right after the 200")
                if seen is not None and (k := _hits(mine, user, _marker(peer, seen))) != 1:
                    failures.append(f"client {c}: client {peer}'s acknowledged Add {seen} found {k} times")

    threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    assert sorted(acknowledged.items()) == [(c, rounds - 1) for c in range(clients)]


def test_with_the_indexing_thread_stopped_a_search_indexes_the_add_itself(tmp_path: Path) -> None:
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    try:
        svc = AmlService(log, index, ManualClock(datetime(2024, 1, 1, tzinfo=UTC)))
        index._indexer.stop()  # as if it never got the CPU: everything rests on the search's catch-up
        for n in range(5):
            svc.add_json(f"r{n}", "u1", "s1", [AmlMessage("user", f"Caroline: the {_marker(9, n)} was lovely", TS + n)])
            assert index.watermark() < log.since(0)[-1].id  # logged, not indexed
            found = svc.search(_marker(9, n), "u1", 5)
            assert found and _marker(9, n) in found[0].content and sum(_marker(9, n) in i.content for i in found) == 1
            assert index.watermark() == log.since(0)[-1].id
    finally:
        index.close()
        log.close()


def test_adds_run_at_most_max_lag_ahead_of_the_index(tmp_path: Path) -> None:
    """Deferred, not unbounded: with the indexing thread stopped, each Add indexes what would put the
    index more than MAX_LAG messages behind before it answers; one on the event loop that would have
    to is declined (`add_json_now` None: the lane runs it in its pool, where it may wait)."""
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    try:
        svc = AmlService(log, index, ManualClock(datetime(2024, 1, 1, tzinfo=UTC)))
        index._indexer.stop()
        turns = [AmlMessage("user", f"Caroline: turn {k} of {FILLER}", TS + k) for k in range(20)]
        lags, declined = [], 0
        for n in range(40):
            if svc.add_json_now(f"r{n}", "u1", "s1", turns) is None:
                declined += 1
                svc.add_json(f"r{n}", "u1", "s1", turns)
            lags.append(log.since(0, limit=100_000)[-1].id - index.watermark())
        assert max(lags) <= MessageIndex.MAX_LAG
        assert lags[:5] == [20, 40, 60, 80, 100]  # deferred while under the bound
        assert declined >= 40 - MessageIndex.MAX_LAG // 20  # every Add past the bound went to a thread
        assert svc.search("turn", "u1", 5)  # a search catches up on the rest
        assert index.watermark() == log.since(0, limit=100_000)[-1].id
    finally:
        index.close()
        log.close()
