"""Inside index/ "no owner" is None; "" (the columns' spelling) arrives only from outside and means
the same. Owner folders are the workspace's business: the index names files the way the store does."""

from __future__ import annotations

from pathlib import Path

import pytest

from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.index.reconcile import reconcile
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings

TS = 1683554160000


def test_the_message_index_takes_none_and_empty_alike_and_answers_none(tmp_path: Path) -> None:
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    try:
        log.append("aml", "s1", [NewMessage("user", "Caroline: my pottery class starts Monday", TS)], now_ms=TS)
        log.append("aml", "s2", [NewMessage("user", "Melanie: pottery is not for me", TS)], owner="bob", now_ms=TS)
        index.sync(log)
        shared = index.search("aml", None, "pottery class", limit=5)
        assert [h.content for h in shared] == ["Caroline: my pottery class starts Monday"]
        assert [h.owner for h in shared] == [None]
        assert index.search("aml", "", "pottery class", limit=5) == shared
        assert [h.owner for h in index.search("aml", "bob", "pottery", limit=5)] == ["bob"]
    finally:
        index.close()
        log.close()


@pytest.fixture
def isolated(tmp_path: Path, clock) -> Services:
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\nowner-isolation: true\n", encoding="utf-8")
    svc = Services(load_settings(cfg, tmp_path / "workspace"), clock)
    svc.store.ensure_agent("default")
    yield svc
    svc.close()


def test_files_are_keyed_by_none_or_their_owner_and_named_as_the_store_names_them(isolated: Services) -> None:
    svc = isolated
    svc.store.write("default", "memory/notes.md", "# Notes\n\n## Bikes\n\nthe red bicycle\n", expected_sha=None,
                    actor="person")
    svc.store.write("default", "memory/notes.md", "# Notes\n\n## Bikes\n\nalice's blue bicycle\n",
                    expected_sha=None, actor="person", owner="alice@example.org")
    report = reconcile(svc.file_index, deep=True)
    keys = set(svc.file_index.indexed_files("default"))
    assert ("default", None, "memory/notes.md") in keys
    assert ("default", "alice@example.org", "memory/notes.md") in keys
    assert not any(owner == "" for _, owner, _ in keys)
    assert not any(f.owner == "" for f in svc.file_index.disk_files("default"))
    folder = svc.store.agent_key("default", "alice@example.org")
    assert report.to_dict()["checked"] == len(keys)
    # Touch the owner's file behind the index's back: the report names it by its real folder.
    path = svc.store.path("default", "memory/notes.md", "alice@example.org")
    path.write_text("# Notes\n\n## Bikes\n\nalice's green bicycle\n", encoding="utf-8")
    changed = reconcile(svc.file_index, deep=True)
    assert changed.changed == [("default", "alice@example.org", "memory/notes.md")]
    assert changed.to_dict()["changed"] == [f"{folder}/memory/notes.md"]
    # "" from a caller is no owner: the same row as None, not a second one.
    assert svc.file_index.ingest("default", "", "memory/notes.md", force=True).owner is None
    assert set(svc.file_index.indexed_files("default")) == keys
    shared = svc.search.search("bicycle", owner=None, record=False).hits
    assert [(h.owner, h.snippet.count("red")) for h in shared] == [(None, 1)]
    assert svc.search.search("bicycle", owner="", record=False).hits == shared
    both = svc.search.search("bicycle", owner="alice@example.org", record=False).hits
    assert {h.owner for h in both} == {None, "alice@example.org"}
