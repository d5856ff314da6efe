"""`aml export|import` through a real PostgreSQL (issue 40): SQLite -> PostgreSQL -> SQLite gives the same
search answers (ids, text, scores, times, images) and the same replayed Add bytes at every step; a hostile
file leaves the database empty; a database out of reach is exit 8 with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.conversations.aml import AmlMessage
from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.runtime.aml_store import export_to, import_from, store_report
from tests.support.model_server import ModelServer
from tests.support.postgres import PostgresServer
from tests.test_aml_transfer import _dump, _empty, _mutations, answers, open_store, populate, store_settings


def test_sqlite_to_postgresql_and_back_answers_the_same(tmp_path: Path, pg_database: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MATECLAW_PG_DSN", pg_database)
    source = open_store(store_settings(tmp_path, "sqlite-a"))
    try:
        adds = populate(source)
        before = answers(source, adds)
    finally:
        source.close()
    first = export_to(source.settings, str(tmp_path / "a.jsonl.gz"))
    pg = store_settings(tmp_path, "pg", store="postgresql")
    assert import_from(pg, str(tmp_path / "a.jsonl.gz")).counts == first.counts
    report = store_report(pg)
    assert (report["backend"], report["messages"], report["users"], report["reachable"]) == (
        "postgresql", first.counts["message"], 3, True)
    assert (report["schema_version"], report["pending_migrations"]) == (report["latest_schema_version"], 0)
    node = open_store(pg)
    try:
        assert answers(node, adds) == before
    finally:
        node.close()
    assert not pg.workspace.exists()  # PostgreSQL: no file on this machine, not even for an import
    second = export_to(pg, str(tmp_path / "b.jsonl"))
    assert second.counts == first.counts
    back = store_settings(tmp_path, "sqlite-b")
    import_from(back, str(tmp_path / "b.jsonl"))
    again = open_store(back)
    try:
        assert answers(again, adds) == before
    finally:
        again.close()


def test_a_hostile_file_leaves_the_database_empty(tmp_path: Path, pg_database: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _dump(tmp_path)
    monkeypatch.setenv("MATECLAW_PG_DSN", pg_database)
    pg = store_settings(tmp_path, "pg", store="postgresql")
    for name in ("duplicate id", "blob hash", "truncated", "counts"):
        content, says = _mutations(lines)[name]
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(content) + "\n", encoding="utf-8")
        with pytest.raises(InvalidInputError) as err:
            import_from(pg, str(path))
        assert says in err.value.message, (name, err.value.message)
        assert _empty(pg), f"{name}: something was imported"
    # PostgreSQL's text cannot hold NUL, SQLite's can: such a message is named by its line, nothing imported.
    msg = next(i for i, line in enumerate(lines) if '"t":"message"' in line)
    record = json.loads(lines[msg])
    record["content"] += "\u0000"
    path = tmp_path / "nul.jsonl"
    path.write_text("\n".join([*lines[:msg], json.dumps(record), *lines[msg + 1:]]) + "\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=f"line {msg + 1}: text holds a NUL character"):
        import_from(pg, str(path))
    assert _empty(pg)


def test_a_database_out_of_reach_is_exit_8_naming_it(tmp_path: Path, pg_server: PostgresServer) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "c.yaml").write_text("timezone: Europe/Berlin\naml:\n  store: postgresql\n", encoding="utf-8")
    closed = f"host=127.0.0.1 port={pg_server.port} user=postgres dbname=no_such_database connect_timeout=2"
    from tests.support.cli_runner import run_one

    done = run_one({"argv": ["--workspace", str(folder / "ws"), "--config", str(folder / "c.yaml"), "aml", "export",
                             str(tmp_path / "x.jsonl")], "env": {"MATECLAW_PG_DSN": closed}})
    assert done["rc"] == 8, done
    err = str(done["stderr"])
    assert "PostgreSQL" in err and "out of reach" in err and "Traceback" not in err, err
    # The cause, once (psycopg's pool retries are not printed line by line).
    assert 'database "no_such_database" does not exist' in err and err.count("\n") == 1, err
    assert not (tmp_path / "x.jsonl").exists()
    status = run_one({"argv": ["--workspace", str(folder / "ws"), "--config", str(folder / "c.yaml"), "aml", "status"],
                      "env": {"MATECLAW_PG_DSN": closed}})
    assert status["rc"] == 8 and "out of reach" in str(status["stderr"]), status


FACT = {"facts": [{"text": "Melanie has two cats named Luna and Oliver.", "sources": [2]}]}
CATS = [AmlMessage("user", "Caroline: What are your cats called?", 1683554160000),
        AmlMessage("user", "Melanie: Luna and Oliver! They keep me busy.", 1683554220000)]


def _records(path: Path, *kinds: str) -> list[dict[str, Any]]:
    return [r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if r.get("t") in kinds]


def test_model_mode_facts_and_their_jobs_move_too(tmp_path: Path, pg_database: str, model_server: ModelServer,
                                                  model_settings_overrides: dict[str, Any],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Facts (found as `f<id>` by search) and fact jobs done, failed and still pending keep their ids,
    status, attempts and errors through SQLite -> PostgreSQL -> SQLite."""
    monkeypatch.setenv("MATECLAW_PG_DSN", pg_database)
    source = open_store(store_settings(tmp_path, "a", model=model_settings_overrides))
    try:
        assert source.aml.facts is not None
        model_server.reply_json(FACT)
        source.aml.add_json("r1", "u1", "s1", CATS)
        model_server.error(404, "model does not exist", code="model_not_found")
        source.aml.add_json("r2", "u2", "s1", CATS)
        assert source.aml.facts.run_pending() == 2
        source.aml.add_json("r3", "u3", "s1", CATS)  # its job stays pending (no worker runs here)
        before = [(i.id, i.content, i.score) for i in source.aml.search("how many cats does Melanie have", "u1", 10)]
        assert any(i[0].startswith("f") for i in before), before
    finally:
        source.close()
    first = tmp_path / "a.jsonl"
    export_to(source.settings, str(first))
    jobs = _records(first, "fact_job")
    assert sorted(j["status"] for j in jobs) == ["done", "failed", "pending"], jobs
    assert len(_records(first, "fact")) == 1
    pg = store_settings(tmp_path, "pg", model=model_settings_overrides, store="postgresql")
    import_from(pg, str(first))
    second = tmp_path / "b.jsonl"
    export_to(pg, str(second))
    back = store_settings(tmp_path, "b", model=model_settings_overrides)
    import_from(back, str(second))
    third = tmp_path / "c.jsonl"
    export_to(back, str(third))
    for path in (second, third):
        assert _records(path, "fact", "fact_job", "message", "request") == _records(
            first, "fact", "fact_job", "message", "request"), path
    for settings in (pg, back):
        node = open_store(settings)
        try:
            assert [(i.id, i.content, i.score) for i in node.aml.search("how many cats does Melanie have", "u1", 10)
                    ] == before
            assert node.aml.facts is not None and node.aml.facts.store.job("r3", "u3") is not None
        finally:
            node.close()
