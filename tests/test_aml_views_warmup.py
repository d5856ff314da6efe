"""After a restart the daemon parses the owners' AML views in the background (index/messages/
warmup.py): the most recent owners' views are in memory without any search, /health says so, and
a search then answers from them exactly as from a view parsed on demand."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import httpx
import pytest

from mateclaw_mem.conversations.aml import AmlMessage
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.runtime.daemon import Daemon
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings

LINES = ["Caroline: I went to the adoption agency meeting yesterday.", "Melanie: Luna and Oliver are my cats!",
         "Caroline: I signed up for a pottery class last week.", "Melanie: We went camping in May."]


def _daemon(ws: Path) -> Daemon:
    from mateclaw_mem.api.app import create_app

    return Daemon(Services(load_settings(None, ws)), host="127.0.0.1", port=0,
                  app_factory=lambda s, host: create_app(s, host=host))


def test_a_restarted_daemon_parses_the_recent_owners_views_before_any_search(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    first = _daemon(ws)
    first.start()
    try:
        aml = first.services.aml
        for user in ("u1", "u2", "u3"):
            for k in range(5):
                aml.add(f"{user}-{k}", user, f"s{k % 2}", [AmlMessage("user", line, 1_700_000_000_000 + k * 10 + i)
                                                          for i, line in enumerate(LINES)])
    finally:
        first.stop()

    gc.unfreeze()
    second = _daemon(ws)
    second.start()
    try:
        warmup = second.services.view_warmup
        deadline = time.monotonic() + 60  # a liveness bound, not a speed claim
        while warmup.state == "parsing" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert warmup.state == "ready (3 parsed)"
        # Parsed, they are frozen out of the cyclic GC: later full collections do not walk them.
        views = second.services.message_index._views
        collected = {id(o) for generation in (0, 1, 2) for o in gc.get_objects(generation)}
        assert views and not any(id(v) in collected for v in views.values())
        index = second.services.message_index
        assert set(index._views) == {("aml", "u1"), ("aml", "u2"), ("aml", "u3")}
        health = httpx.get(f"{second.url}/health", timeout=10).json()
        assert health["background"]["AML views"] == "ready (3 parsed)"
        warm = [(h.id, h.score) for h in index.search("aml", "u2", "pottery class cats", limit=10)]
    finally:
        second.stop()
        gc.unfreeze()
    cold = MessageIndex(second.services.settings.messages_db)  # parsed on demand, by this search
    try:
        assert warm == [(h.id, h.score) for h in cold.search("aml", "u2", "pottery class cats", limit=10)] and warm
    finally:
        cold.close()


def test_the_background_parse_stops_at_its_turn_budget_but_always_parses_the_latest_owner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mateclaw_mem.conversations.log import ConversationLog, NewMessage

    log = ConversationLog(tmp_path / "log.db")
    for k, (owner, n) in enumerate((("old", 5), ("mid", 4), ("big", 30), ("new", 3))):  # "new" is the latest
        log.append("aml", f"s-{owner}", [NewMessage("user", f"Caroline: {LINES[i % 4]}", 1_000 * k + i)
                                         for i in range(n)], owner=owner, now_ms=1_000 * k)
    index = MessageIndex(tmp_path / "m.db")
    index.sync(log)
    monkeypatch.setattr(MessageIndex, "_WARM_TURNS", 10)
    assert index.warm_recent() == 1 and set(index._views) == {("aml", "new")}  # 3 + 30 > 10: "big" is not
    monkeypatch.setattr(MessageIndex, "_WARM_TURNS", 2)
    fresh = MessageIndex(tmp_path / "m.db")
    assert fresh.warm_recent() == 1 and set(fresh._views) == {("aml", "new")}  # over the budget alone: still
    monkeypatch.setattr(MessageIndex, "_WARM_TURNS", 1_000)
    monkeypatch.setattr(MessageIndex, "_WARM_OWNERS", 3)
    third = MessageIndex(tmp_path / "m.db")
    assert third.warm_recent() == 3 and set(third._views) == {("aml", o) for o in ("new", "big", "mid")}
    for x in (index, fresh, third, log):
        x.close()
