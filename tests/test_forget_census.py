"""The census of stores (issue 35, point 5): every SQLite table with a text column, in every database
a daemon makes on a fresh workspace once its main features ran (model mode, so the model's tables
exist too), is either answered for by a holder of runtime/holders.py or declared free of words in
its `NO_WORDS` with why. A new table without that decision fails here; so does a registered table
that no longer exists (a rename would leave the forget reaching nothing).

Like tests/test_secrets_everywhere.py's every-table scan: the databases themselves are read
(sqlite_master, PRAGMA table_info), not the code that creates them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from mateclaw_mem.conversations.aml import AmlMessage
from mateclaw_mem.runtime.holders import NO_WORDS
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from tests.support.model_server import ModelServer

AGENT = "default"
FTS5_SHADOWS = ("_data", "_idx", "_content", "_docsize", "_config")


def _text_tables(db: Path) -> dict[str, list[str]]:
    """{table: its text columns} of one database; FTS5 shadow tables count as their virtual table."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
        virtual = {n for n, sql in rows if (sql or "").upper().startswith("CREATE VIRTUAL")}
        out: dict[str, list[str]] = {}
        for name, _ in rows:
            if any(name == v + s for v in virtual for s in FTS5_SHADOWS):
                continue
            cols = conn.execute(f'PRAGMA table_info("{name}")').fetchall()
            # A column without a declared type (FTS5, fts5vocab) holds text as readily as a TEXT one.
            text = [c[1] for c in cols if not c[2] or any(t in c[2].upper() for t in ("TEXT", "CHAR", "CLOB"))]
            if text:
                out[name] = text
    conn.close()
    return out


def census(state: Path, registered: set[str]) -> tuple[list[str], list[str]]:
    """(undecided tables, registered tables that exist nowhere)."""
    seen: set[str] = set()
    undecided = []
    for db in sorted(state.glob("*.db")):
        for table, cols in _text_tables(db).items():
            name = f"{db.name}:{table}"
            seen.add(name)
            if name not in registered and name not in NO_WORDS and f"*:{table}" not in NO_WORDS:
                undecided.append(f"{name} ({', '.join(cols)})")
    stale = sorted(n for n in registered | {k for k in NO_WORDS if not k.startswith("*:")} if n not in seen)
    return undecided, stale


@pytest.fixture(scope="module")
def exercised(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A fresh workspace after the main features ran in model mode: chats and extraction, AML Add
    with facts, search, a prompt, a dream, SOUL.md, structured consolidation, an import's ledger,
    learning, the scheduler's table and a forget."""
    root = tmp_path_factory.mktemp("census")
    with ModelServer() as model:
        model.reply_json({"should_update": False, "reason": "nothing new"})
        config = {"timezone": "Europe/Berlin", "model": {"base-url": model.base_url, "model": "test-model",
                                                           "timeout-seconds": 5, "max-retries": 0,
                                                           "embedding-model": "test-embed"},
                  "mate": {"memory": {"soul-update-interval": 2, "fact": {
                      "projection-enabled": True, "forget-enabled": True, "contradiction-check-enabled": True}}}}
        cfg = root / "mateclaw.yaml"
        cfg.write_text(yaml.safe_dump(config), encoding="utf-8")
        services = Services(load_settings(cfg, root / "ws"))
        try:
            services.seed_agents()
            services.build()
            services.structured.remember(AGENT, "feedback", "short", "Keep answers short.", actor="person")
            services.extraction.record_turn(AGENT, "c1", "I walk the dog every morning at seven.", "Nice.")
            services.extraction.extract_now(AGENT, "c1")
            services.aml.add_json("r1", "ann", "s1", [AmlMessage("user", "I moved to Lisbon in May.")])
            if services.aml.facts is not None:
                services.aml.facts.run_pending()
            services.search.search("dog morning", agent=AGENT)
            services.context.build(AGENT, query="when do I walk the dog?")
            services.dreaming.dream(AGENT)
            assert services.chat_import is not None  # built: its ledger's table
            services.scheduler.tick_all()
            services.forget.forget(AGENT, None, "walk the dog", actor="person", now=True)
            holders = {t for h in services.forget.holders for t in h.tables}
            yield services.settings.state_dir, holders
        finally:
            services.close()


def test_every_table_that_can_hold_words_is_a_holder_or_declared_free_of_them(exercised: Any) -> None:
    state, registered = exercised
    undecided, stale = census(state, registered)
    assert undecided == [], ("tables with text columns that no holder of runtime/holders.py answers for and "
                             "NO_WORDS does not list:\n" + "\n".join(undecided))
    assert stale == [], "runtime/holders.py names tables no database has:\n" + "\n".join(stale)


def test_the_census_fails_on_a_new_table_and_on_a_stale_name(exercised: Any, tmp_path: Path) -> None:
    state, registered = exercised
    copy = tmp_path / "state"
    copy.mkdir()
    for db in state.glob("*.db"):
        with sqlite3.connect(db) as src, sqlite3.connect(copy / db.name) as dst:
            src.backup(dst)
        src.close()
        dst.close()
    with sqlite3.connect(copy / "log.db") as conn:
        conn.execute("CREATE TABLE scratch_notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("CREATE TABLE counters (id INTEGER PRIMARY KEY, n INTEGER)")  # no text: no decision needed
    conn.close()
    undecided, stale = census(copy, registered | {"log.db:renamed_table"})
    assert undecided == ["log.db:scratch_notes (body)"]
    assert stale == ["log.db:renamed_table"]
