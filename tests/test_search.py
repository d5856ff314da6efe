"""Keyword search: CJK and mixed queries, OR semantics, snippets, weights, scopes, limits,
retrievals, deletes, reconcile, rebuild under load, dense fusion."""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from mateclaw_mem.cli.main import main
from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.index.chunker import MAX_CHUNK_CHARS, chunk_file
from mateclaw_mem.index.reconcile import reconcile
from mateclaw_mem.runtime.index_ops import reindex
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings

PERSON = "person"


def write(services: Services, rel: str, text: str, agent: str = "default") -> None:
    services.store.write(agent, rel, text, expected_sha=None, actor=PERSON)


def files(result) -> list[str]:
    return [h.file for h in result.hits]


@pytest.fixture
def svc(services: Services) -> Services:
    services.store.ensure_agent("default")
    return services


def test_chinese_query_finds_its_line_by_any_part(svc: Services) -> None:
    write(svc, "memory/2026-11-30.md", "# 2026-11-30\n\n## 09:00 习惯\n\n用户喜欢周日早上跑步\n")
    write(svc, "MEMORY.md", "# Memory\n\n## 饮食\n\n用户不吃香菜。\n")
    for query in ("跑步", "周日早上", "用户喜欢周日早上跑步"):
        hits = svc.search.search(query).hits
        assert hits, query
        assert hits[0].file == "memory/2026-11-30.md"
        assert hits[0].line == 5
        assert "用户喜欢周日早上跑步" in hits[0].snippet.replace("[[", "").replace("]]", "")
    assert "[[周日早上]]" in svc.search.search("周日早上").hits[0].snippet


def test_japanese_and_mixed_queries(svc: Services) -> None:
    write(svc, "MEMORY.md", "# Memory\n\n## 朝\n\n毎朝コーヒーを飲みます。\n\n## 住まい\n\n我在Tokyo跑步, near the river.\n")
    hit = svc.search.search("コーヒー").hits[0]
    assert (hit.title, hit.line) == ("朝", 5)
    assert "[[コーヒー]]" in hit.snippet
    hit = svc.search.search("Tokyo 跑步").hits[0]
    assert hit.title == "住まい"
    assert "[[Tokyo]]" in hit.snippet and "[[跑步]]" in hit.snippet
    assert svc.search.search("rivers").hits[0].title == "住まい"  # stemmed like the index


def test_one_absent_term_still_returns_the_others_hits(svc: Services) -> None:
    write(svc, "MEMORY.md", "# Memory\n\n## Sport\n\nThe user goes sailing every weekend.\n")
    result = svc.search.search("sailing xylophonezzz")
    assert files(result) == ["MEMORY.md"]
    assert svc.search.search("跑步 sailing").hits


def test_more_covered_terms_rank_higher(svc: Services) -> None:
    write(svc, "MEMORY.md", "# M\n\n## A\n\nlunch lunch lunch lunch with friends\n\n## B\n\nlunch in Berlin with Anna\n")
    hits = svc.search.search("lunch Berlin Anna").hits
    assert [h.title for h in hits] == ["B", "A"]


def test_snippet_is_a_window_around_the_match(svc: Services) -> None:
    filler = "word " * 100
    write(svc, "MEMORY.md", f"# M\n\n## Long\n\n{filler}the marmalade recipe {filler}\n")
    hit = svc.search.search("marmalade").hits[0]
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…")
    assert "[[marmalade]]" in hit.snippet
    assert len(hit.snippet) <= 2 * 80 + 10


def test_file_weights_and_their_configuration(svc: Services, tmp_path: Path, clock) -> None:
    text = "# X\n\n## Note\n\nAlways answer in haiku.\n"
    write(svc, "MEMORY.md", text)
    write(svc, "AGENTS.md", text)
    assert files(svc.search.search("haiku")) == ["MEMORY.md", "AGENTS.md"]
    cfg = tmp_path / "weights.yaml"
    cfg.write_text("search:\n  file-weights:\n    AGENTS.md: 2.0\n    MEMORY.md: 1.0\n", encoding="utf-8")
    other = Services(load_settings(cfg, svc.settings.workspace), clock)
    try:
        assert files(other.search.search("haiku")) == ["AGENTS.md", "MEMORY.md"]
    finally:
        other.close()


def test_recent_daily_notes_rank_above_old_ones(svc: Services, clock) -> None:
    write(svc, "memory/2026-01-02.md", "# 2026-01-02\n\n## 10:00 Plan\n\nbook the dentist\n")
    write(svc, "memory/2026-11-29.md", "# 2026-11-29\n\n## 10:00 Plan\n\nbook the dentist\n")
    assert files(svc.search.search("dentist")) == ["memory/2026-11-29.md", "memory/2026-01-02.md"]


def test_scopes(svc: Services) -> None:
    for rel in ("MEMORY.md", "PROFILE.md", "AGENTS.md", "SOUL.md", "structured/user.md"):
        write(svc, rel, f"# {rel}\n\n## pelican\n\npelican facts in {rel}\n")
    svc.log.append("default", "c1", [], now_ms=0)
    from mateclaw_mem.conversations.log import NewMessage

    svc.log.append("default", "c1", [NewMessage("user", "I saw a pelican today")], now_ms=1_700_000_000_000)
    by_scope = {scope: set(files(svc.search.search("pelican", scope=scope))) for scope in
                ("all", "memory", "profile", "persona", "conversations", "files")}
    assert by_scope["memory"] == {"MEMORY.md", "structured/user.md"}
    assert by_scope["profile"] == {"PROFILE.md"}
    assert by_scope["persona"] == {"AGENTS.md", "SOUL.md"}
    assert by_scope["conversations"] == {"conversations/c1"}
    assert by_scope["files"] == by_scope["memory"] | by_scope["profile"] | by_scope["persona"]
    assert by_scope["all"] == by_scope["files"] | {"conversations/c1"}
    msg = svc.search.search("pelican", scope="conversations").hits[0]
    assert msg.message_id is not None and "[[pelican]]" in msg.snippet
    with pytest.raises(InvalidInputError, match="scope"):
        svc.search.search("pelican", scope="everything")


def test_limit_default_and_bounds(svc: Services) -> None:
    body = "".join(f"## Entry {i}\n\nquokka number {i}\n\n" for i in range(60))
    write(svc, "MEMORY.md", "# M\n\n" + body)
    assert len(svc.search.search("quokka").hits) == 10
    assert len(svc.search.search("quokka", limit=3).hits) == 3
    assert len(svc.search.search("quokka", limit=50).hits) == 50
    for bad in (0, 51):
        with pytest.raises(InvalidInputError, match="limit"):
            svc.search.search("quokka", limit=bad)


def test_every_hit_is_recorded_as_a_retrieval(svc: Services, clock) -> None:
    write(svc, "MEMORY.md", "# M\n\n## Cats\n\nLuna and Oliver are the cats.\n\n## Dogs\n\nRex is the dog.\n")
    start = clock.now()
    svc.search.search("cats")
    clock.advance(hours=1)
    svc.search.search("Luna")
    svc.search.search("Rex")
    hits = {h.title: h for h in svc.search.retrieval_hits("default", since=start)}
    assert hits["Cats"].count == 2 and hits["Dogs"].count == 1
    assert hits["Cats"].rel == "MEMORY.md" and (hits["Cats"].line_start, hits["Cats"].line_end) == (3, 5)
    assert hits["Cats"].last_at == clock.now()
    later = svc.search.retrieval_hits("default", since=start + timedelta(minutes=30))
    assert {h.title: h.count for h in later} == {"Cats": 1, "Dogs": 1}
    svc.search.search("Rex", record=False)
    assert {h.title: h.count for h in svc.search.retrieval_hits("default", since=start)}["Dogs"] == 1


def test_a_deleted_file_disappears_from_results(svc: Services) -> None:
    write(svc, "memory/projects.md", "# P\n\n## Garden\n\nplant the tomatoes\n")
    assert files(svc.search.search("tomatoes")) == ["memory/projects.md"]
    svc.store.delete("default", "memory/projects.md", expected_sha=None, actor=PERSON)
    assert svc.search.search("tomatoes").hits == []
    write(svc, "memory/other.md", "# O\n\n## Garden\n\ntomatoes again\n")
    (svc.settings.workspace / "default" / "memory" / "other.md").unlink()  # behind the store's back
    reconcile(svc.file_index)
    assert svc.search.search("tomatoes").hits == []


def test_reconcile_repairs_an_index_changed_behind_its_back(svc: Services) -> None:
    write(svc, "MEMORY.md", "# M\n\n## Bikes\n\nthe red bicycle\n")
    svc.search.search("bicycle")  # builds the index
    # A file written without the store (no listener, no watcher) ...
    path = svc.settings.workspace / "default" / "memory" / "ideas.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Ideas\n\n## Trip\n\nvisit the glacier\n", encoding="utf-8")
    # ... and an index damaged directly: MEMORY.md's chunks gone, stat and hash left as they were.
    db = sqlite3.connect(svc.settings.state_dir / "index.db")
    db.execute("DELETE FROM fts WHERE rowid IN (SELECT id FROM chunks WHERE rel = 'MEMORY.md')")
    db.execute("DELETE FROM chunks WHERE rel = 'MEMORY.md'")
    db.execute("INSERT INTO files (agent, owner, rel, kind, mtime, size, sha, indexed_ms)"
               " VALUES ('default', '', 'memory/ghost.md', 'other', 0, 0, 'x', 0)")
    db.commit()
    db.close()
    assert svc.search.search("bicycle").hits == []
    report = reconcile(svc.file_index, deep=True)
    assert ("default", None, "memory/ideas.md") in report.added
    assert ("default", None, "MEMORY.md") in report.changed
    assert ("default", None, "memory/ghost.md") in report.removed
    assert files(svc.search.search("bicycle")) == ["MEMORY.md"]
    assert files(svc.search.search("glacier")) == ["memory/ideas.md"]
    assert reconcile(svc.file_index, deep=True).touched == 0


def test_a_rebuild_during_searches_never_errors(svc: Services) -> None:
    for i in range(30):
        write(svc, f"memory/topic-{i}.md", f"# T{i}\n\n## S\n\nshared keyword marzipan {i}\n\n## 中文\n\n周日早上跑步 {i}\n")
    svc.search.search("marzipan")
    errors: list[BaseException] = []
    empty: list[str] = []
    stop = threading.Event()

    def searcher() -> None:
        while not stop.is_set():
            for q in ("marzipan", "周日早上"):
                try:
                    if not svc.search.search(q, record=False).hits:
                        empty.append(q)
                except BaseException as exc:  # any error fails the test
                    errors.append(exc)

    threads = [threading.Thread(target=searcher) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(3):
            reindex(svc)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    assert empty == []
    assert svc.file_index.counts()["files"] == len(list(svc.file_index.disk_files()))


@pytest.mark.parametrize("budget", ["default", 0])
def test_agents_owners_and_scopes_never_leak(tmp_path: Path, clock, monkeypatch, budget) -> None:
    # Budget 0 makes every term "common": candidates come from the unranked path (filters inside the
    # MATCH) instead of the ranked one (filters on the chunk rows).
    import mateclaw_mem.index.search as search_module

    if budget != "default":
        monkeypatch.setattr(search_module, "CANDIDATE_BUDGET", budget)
    cfg = tmp_path / "iso.yaml"
    cfg.write_text("timezone: Europe/Berlin\nowner-isolation: true\n", encoding="utf-8")
    svc = Services(load_settings(cfg, tmp_path / "ws"), clock)
    try:
        for agent in ("default", "other"):
            svc.store.ensure_agent(agent)
            for rel in ("MEMORY.md", "PROFILE.md"):
                write(svc, rel, f"# {rel}\n\n## Birds\n\n{agent} pelican notes\n", agent=agent)
        svc.store.ensure_agent("default", owner="bob")
        for rel in ("MEMORY.md", "PROFILE.md"):
            svc.store.write("default", rel, f"# {rel}\n\n## Birds\n\nbob pelican notes\n", expected_sha=None,
                            actor=PERSON, owner="bob")

        def seen(**kw) -> set[tuple[str, str | None, str]]:
            return {(h.agent, h.owner, h.file) for h in svc.search.search("pelican", record=False, **kw).hits}

        shared = {("default", None, "MEMORY.md"), ("default", None, "PROFILE.md")}
        bobs = {("default", "bob", "MEMORY.md"), ("default", "bob", "PROFILE.md")}
        assert seen() == shared
        assert seen(owner="bob") == shared | bobs
        assert seen(owner="eve") == shared
        assert seen(agent="other") == {("other", None, "MEMORY.md"), ("other", None, "PROFILE.md")}
        assert seen(owner="bob", scope="profile") == {("default", None, "PROFILE.md"), ("default", "bob", "PROFILE.md")}
        assert seen(agent="other", scope="persona") == set()
    finally:
        svc.close()


def test_a_rebuild_gives_the_old_tables_space_back(svc: Services) -> None:
    notes = svc.store.root / "default" / "memory"
    notes.mkdir(parents=True, exist_ok=True)
    for i in range(40):  # written by hand, so the first rebuild starts from an empty index
        (notes / f"topic-{i}.md").write_text(f"# T{i}\n\n## S\n\n" + f"words marzipan {i} " * 80 + "\n")
    reindex(svc)
    db = svc.settings.state_dir / "index.db"
    fresh = db.stat().st_size
    reindex(svc)  # builds a second copy beside the first, then drops the first
    assert db.stat().st_size < fresh * 1.3
    assert len(svc.search.search("marzipan", limit=50).hits) == 40


def test_writes_through_the_store_refresh_an_existing_index(svc: Services) -> None:
    svc.search.search("anything")
    write(svc, "MEMORY.md", "# M\n\n## Pets\n\na hamster named Bob\n")
    assert files(svc.search.search("hamster", record=False)) == ["MEMORY.md"]
    write(svc, "MEMORY.md", "# M\n\n## Pets\n\na parrot named Bob\n")
    assert svc.search.search("hamster").hits == []


def test_chunker_splits_long_sections_by_paragraph_with_line_ranges() -> None:
    para = ("alpha " * 60).strip()
    text = "---\nenabled: true\n---\n# Title\n\nintro line\n\n## Long\n\n" + "\n\n".join([para] * 8) + "\n"
    chunks = chunk_file("MEMORY.md", text)
    assert chunks[0].title == "Title" and chunks[0].line_start == 4
    long = [c for c in chunks if c.title == "Long"]
    assert len(long) > 1
    assert all(len(c.text) <= MAX_CHUNK_CHARS for c in long)
    lines = text.splitlines()
    for c in long:
        assert "\n".join(lines[c.line_start - 1 : c.line_end]) == c.text
    structured = "## coffee\n\nlikes it black\n> Source: chat | Updated: 2026-11-30\n\n## tea\n\n" + "green " * 400 + "\n"
    entries = chunk_file("structured/user.md", structured)
    assert [(c.title, c.line_start) for c in entries] == [("coffee", 1), ("tea", 6)]


def test_cli_search_and_reindex(svc: Services, settings, capsys) -> None:
    write(svc, "MEMORY.md", "# M\n\n## Run\n\n用户喜欢周日早上跑步\n")
    args = ["--config", str(settings.config_path), "--workspace", str(settings.workspace)]
    assert main(["reindex", *args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["files"] >= 4
    assert main(["search", "跑步", *args, "--json", "--limit", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hits"][0]["file"] == "MEMORY.md" and "[[跑步]]" in out["hits"][0]["snippet"]
    assert main(["search", "nothinghere", *args]) == 10
    assert main(["search", "x", "--limit", "99", *args]) == 2


def test_status_reports_indexed_against_disk(svc: Services) -> None:
    from mateclaw_mem.runtime.status import collect

    assert collect(svc)["index"]["built"] is False
    svc.search.search("anything")
    path = svc.settings.workspace / "default" / "memory" / "x.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# x\n", encoding="utf-8")
    info = collect(svc)["index"]
    assert info["files_on_disk"] == info["files_indexed"] + 1
    assert info["last_sync"] is not None


# -- dense retrieval -------------------------------------------------------------------------------


def _dense_services(clock, base_url: str, embedding_model: str, workspace: Path) -> Services:
    settings = load_settings(None, workspace, overrides={
        "timezone": "Europe/Berlin",
        "model": {"base_url": base_url, "model": "test-model", "embedding_model": embedding_model,
                  "timeout_seconds": 2, "max_retries": 0},
    })
    return Services(settings, clock)


def test_dense_retrieval_fuses_and_falls_back_with_a_warning(tmp_path: Path, clock, model_server, monkeypatch) -> None:
    from tests.support.isolation import no_config_here

    no_config_here(monkeypatch, tmp_path)  # from tmp_path, on tmp_path/workspace, no settings file
    workspace = tmp_path / "dense-ws"
    svc = _dense_services(clock, model_server.base_url, "embed-a", workspace)
    try:
        svc.store.ensure_agent("default")
        write(svc, "MEMORY.md", "# M\n\n## Boat\n\nthe sailing boat\n\n## Other\n\nsomething unrelated\n")
        result = svc.search.search("sailing")
        assert result.mode == "hybrid" and result.warnings == []
        assert result.hits[0].title == "Boat"
        # The scripted server's vectors are random: the agreement gate keeps the keyword ranking.
        assert result.dense["complete"] and svc.search.dense.gate.factor == 0.0
        embeds = [r for r in model_server.requests if r.path.endswith("embeddings")]
        assert embeds and embeds[0].body["model"] == "embed-a"
        assert svc.file_index.vector_counts()["embed-a"] >= 2
    finally:
        svc.close()
    # A new embedding model: the old vectors are stale, never mixed in.
    svc = _dense_services(clock, model_server.base_url, "embed-b", workspace)
    try:
        from mateclaw_mem.runtime.status import collect

        svc.search.search("sailing")
        emb = collect(svc)["index"]["embeddings"]
        assert emb["model"] == "embed-b" and emb["stale"] >= 2 and emb["vectors"] >= 2
    finally:
        svc.close()
    # Embeddings failing (server gone): keyword hits with a warning.
    model_server.stop()
    svc = _dense_services(clock, "http://127.0.0.1:9/v1", "embed-c", workspace)
    try:
        result = svc.search.search("sailing")
        assert result.mode == "keyword"
        assert result.warnings and "dense retrieval failed" in result.warnings[0]
        assert result.hits[0].title == "Boat"
    finally:
        svc.close()
