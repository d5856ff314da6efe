"""`aml export|import` through a real PostgreSQL (issue 40): SQLite -> PostgreSQL -> SQLite gives the same
search answers (ids, text, scores, times, images) and the same replayed Add bytes at every step; a hostile
file leaves the database empty; a database out of reach is exit 8 with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.runtime.aml_store import export_to, import_from, store_report
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
    assert not (tmp_path / "x.jsonl").exists()
    status = run_one({"argv": ["--workspace", str(folder / "ws"), "--config", str(folder / "c.yaml"), "aml", "status"],
                      "env": {"MATECLAW_PG_DSN": closed}})
    assert status["rc"] == 8 and "out of reach" in str(status["stderr"]), status
