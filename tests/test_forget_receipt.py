"""Forget with a receipt (issue 35, point 5): a claim planted in every store that can hold a person's
words is gone from every byte of the workspace after `forget --now` and a restart, while a control
sentence planted beside it in the same places is still found there; the scrub is what takes the
bytes out of the database files; owners' shared memory is cut for the workspace's person and named
for anyone else; a forget that fails midway says "pending" until it has finished; Mem0 is asked to
delete what it keeps; the faces carry the receipt.

Real parts only: temp workspaces, real SQLite, the real HTTP face under uvicorn, a loopback server
speaking Mem0's endpoints, the CLI as a subprocess. Every byte check reads the files themselves.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import yaml

from mateclaw_mem.conversations.aml import AmlMessage
from mateclaw_mem.memory.forget import scan
from mateclaw_mem.memory.forget.holder import Holder
from mateclaw_mem.memory.forget.scrub import scrub
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from tests.support.mem0_server import Mem0Server

AGENT = "default"
CLAIM = "I take my tea without sugar"
CONTROL = "the quartz lantern hangs in the hallway"  # planted beside the claim, never forgotten
ANN = "ann"


def make(tmp_path: Path, clock: Any, *, isolation: bool = False, extra: dict[str, Any] | None = None) -> Services:
    memory = {"min-messages-for-summarize": 0, "cooldown-minutes": 0, "soul-update-interval": 3,
              "fact": {"projection-enabled": True, "forget-enabled": True, "contradiction-check-enabled": True},
              **(extra or {})}
    config = {"timezone": "Europe/Berlin", "owner-isolation": isolation, "aml-agent": AGENT,
              "mate": {"memory": memory}}
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text(yaml.safe_dump(config), encoding="utf-8")
    services = Services(load_settings(cfg, tmp_path / "workspace"), clock)
    services.store.ensure_agent(AGENT)
    _ = services.file_index  # as in the daemon: every write is ingested (search, facts, contradictions)
    _ = services.contradictions
    _ = services.soul
    return services


def append(s: Services, rel: str, text: str, owner: str | None = None, agent: str = AGENT) -> None:
    snap = s.store.read(agent, rel, owner=owner)
    s.store.write(agent, rel, (snap.text if snap.exists else "") + text, expected_sha=snap.sha, actor="person",
                  owner=owner)


def where(root: Path, phrase: str) -> dict[str, int]:
    """{file: occurrences} of the phrase in every byte under root (gzip unpacked)."""
    found = scan.walk(root, {"p": scan.patterns(phrase)})
    return {h["file"]: h["count"] for h in found.hits["p"]}


def stores_of(found: dict[str, int]) -> set[str]:
    """File names, a database's WAL counted as the database."""
    return {f.split("/")[-1].removesuffix("-wal") for f in found}


def plant_everywhere(s: Services, clock: Any) -> None:
    """The claim and the control, side by side, in every store a person's words reach."""
    both = f"- {CLAIM}\n- {CONTROL}\n"
    # An archived month (compressed), and three days of notes a dream promotes from (first: a dream
    # does not promote what MEMORY.md already says).
    s.store.append_daily(AGENT, "Tea", both.rstrip(), actor="extraction", when=clock.now() - timedelta(days=90))
    assert s.dreaming.rotate(AGENT)["daily_notes_archived"]
    for day in (3, 2, 1):
        s.store.append_daily(AGENT, "Habits", both.rstrip(), actor="extraction", when=clock.now() - timedelta(days=day))
    out = s.dreaming.dream(AGENT)
    assert out.status == "done" and any("without sugar" in p for p in out.promoted), (out.status, out.reason)
    append(s, "MEMORY.md", f"\n## Notes\n{both}")
    append(s, "PROFILE.md", f"\n## Habits\n{both}")
    append(s, "SOUL.md", f"\nShe told me: {CLAIM}. And {CONTROL}.\n")
    for key, text in (("tea", CLAIM), ("lantern", CONTROL)):
        s.structured.remember(AGENT, "user", key, text, actor="person")
        # -> the SOUL.md proposal. Another key: the inbox refuses one text in two files (same pair id).
        s.structured.remember(AGENT, "feedback", f"{key} rule", text, actor="person")
    # A contradiction about the claim, ignored (so the inbox keeps it after the files change).
    append(s, "MEMORY.md", f"\n## Office\n- At the office {CLAIM}\n- At the office I take my tea with sugar\n")
    pair = next(p for p in s.contradictions.list(AGENT, None) if "without sugar" in p.a.text + p.b.text)
    s.contradictions.resolve(AGENT, None, pair.id, "IGNORE")
    # A chat turn (log, both indexes, extraction's run) and an AML Add of another person.
    s.extraction.record_turn(AGENT, "c1", f"Hello. Please remember: {CLAIM}. Also {CONTROL}.", "Noted.")
    assert s.extraction.wait_idle(timeout=60)
    s.aml.add_json("r1", ANN, "s1", [AmlMessage("user", f"By the way, {CLAIM}. And {CONTROL}."),
                                     AmlMessage("assistant", "Good to know.")])
    s.file_index.sync_messages(s.log)
    # Searches whose query is the claim (the retrieval log keeps the query) and a prompt (a turn record).
    assert s.search.search(CLAIM, agent=AGENT).hits and s.search.search(CONTROL, agent=AGENT).hits
    s.context.build(AGENT, query=CLAIM, current=CLAIM)


def test_a_claim_planted_everywhere_is_in_no_byte_after_forget_now_and_a_restart(tmp_path: Path, clock: Any) -> None:
    root = tmp_path / "workspace"
    s = make(tmp_path, clock)
    try:
        plant_everywhere(s, clock)
        before = where(root, CLAIM)
        # The planting reached every kind of store (else this test would prove little). messages.db keeps
        # terms only: a turn's text is the log's (issue 36.2), so the phrase is never in it.
        assert {"MEMORY.md", "SOUL.md", "log.db", "index.db", "facts.db", "state.db"} <= stores_of(before), before
        assert "messages.db" not in stores_of(before), before
        assert any(f.endswith(".md.gz") for f in before) and any(".mateclaw/history/" in f for f in before)
        card = s.morning_card.card(AGENT)
        assert card and any("without sugar" in p["text"] for p in card["report"]["promoted"])
        assert s.soul.pending(AGENT) is not None and "without sugar" in s.soul.pending(AGENT).text

        mine = s.forget.forget(AGENT, None, CLAIM, actor="person", now=True, receipt=True)
        ann = s.forget.forget(AGENT, ANN, CLAIM, actor="person", now=True, receipt=True)

        assert mine.status == "done" and not mine.errors, mine.errors
        removed = {st["store"]: st["removed"] for st in mine.stores}
        for store in ("memory files", "month archives", "conversation log", "retrieval log",
                      "dream runs and reports", "contradiction inbox", "SOUL.md proposals", "history"):
            assert removed[store] > 0, (store, mine.stores)
        assert {d["db"] for d in mine.scrubbed} >= {"log.db", "index.db", "facts.db", "state.db", "messages.db"}
        assert all(d["wal_bytes"] == 0 for d in mine.scrubbed), mine.scrubbed
        assert ann.scan is not None and ann.scan["proof"] == "clean", ann.scan
        assert ann.scan["control"]["found"] == ["text", "gzip", "sqlite-wal"]
        card = s.morning_card.card(AGENT)
        assert "sugar" not in json.dumps(card, ensure_ascii=False)  # no longer listed as promoted
    finally:
        s.close()

    again = make(tmp_path, clock)  # a restart: nothing derived may bring it back
    try:
        again.build()
        again.search.search("tea sugar", agent=AGENT)
        again.context.build(AGENT, query="how do I take my tea?", current="how do I take my tea?")
        assert not [h for h in again.aml.search("how do I take my tea", ANN, 5) if "sugar" in h.content]
    finally:
        again.close()
    assert where(root, CLAIM) == {}
    control = where(root, CONTROL)  # the scan sees every kind of store the claim was in
    assert stores_of(control) >= {"MEMORY.md", "SOUL.md", "log.db", "index.db", "facts.db", "state.db"}, control
    assert any(f.endswith(".md.gz") for f in control), control


def test_the_scrub_is_what_takes_the_old_bytes_out_of_a_database(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    # SQLite's default (some builds, Debian's among them, compile it on): an UPDATE or DELETE leaves
    # the old bytes in the page's free space.
    conn.execute("PRAGMA secure_delete = OFF")
    conn.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, text TEXT)")
    conn.execute("CREATE VIRTUAL TABLE fts USING fts5(body)")
    conn.execute("INSERT INTO log (text) VALUES (?)", (f"query: {CLAIM} please " + "x" * 200,))
    conn.execute("INSERT INTO fts (body) VALUES (?)", (f"{CLAIM} zanzibar",))
    conn.execute("UPDATE log SET text = '[forgotten]'")
    conn.execute("DELETE FROM fts")
    conn.close()
    assert where(tmp_path, CLAIM), "the rows are gone, the bytes are not"
    tokens_before = sqlite3.connect(db).execute("SELECT COUNT(*) FROM fts_data").fetchone()[0]

    done = scrub(db, scan.patterns(CLAIM))

    assert done["vacuumed"] and done["fts_optimized"] == ["fts"] and done["wal_bytes"] == 0, done
    assert where(tmp_path, CLAIM) == {}
    assert b"zanzibar" not in db.read_bytes()  # the token of a deleted row, gone from the segments
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM fts_data").fetchone()[0] < tokens_before


def test_the_scan_finds_every_spelling_a_store_keeps_and_its_control_in_every_container(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"t": f"line\n{CLAIM.upper()}!"}), encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps({"t": "我喝茶不加糖"}), encoding="utf-8")  # \u-escaped
    (tmp_path / "c.txt").write_text("i take my tea without sugar", encoding="utf-8")  # the index's tokens
    (tmp_path / "d.md").write_text("- I take my tea, *without* sugar.", encoding="utf-8")
    assert set(where(tmp_path, CLAIM)) == {"a.json", "c.txt", "d.md"}
    assert set(where(tmp_path, "我喝茶不加糖")) == {"b.json"}
    proof = scan.prove(tmp_path, tmp_path / ".mateclaw", "nothing like this is here")
    assert proof["control"] == {"planted": ["text", "gzip", "sqlite-wal"], "found": ["text", "gzip", "sqlite-wal"],
                                "ok": True}
    assert proof["occurrences"] == 0 and not (tmp_path / ".mateclaw" / scan.CONTROL_DIR).exists()


def test_the_scan_reads_big_files_in_windows_and_counts_a_match_across_two_once(tmp_path: Path) -> None:
    data = ("x" * 87 + CLAIM + "y" * 50 + CLAIM + "z" * 13 + CLAIM) * 5  # matches across every boundary
    (tmp_path / "a.txt").write_text(data, encoding="utf-8")
    (tmp_path / "b.md.gz").write_bytes(gzip.compress(data.encode("utf-8"), mtime=0))
    found = scan.walk(tmp_path, {"c": scan.patterns(CLAIM)}, chunk=100, overlap=40)
    assert found.hits["c"] == [{"file": "a.txt", "count": 15}, {"file": "b.md.gz", "count": 15}]
    assert found.gunzipped == 1


def test_a_database_whose_freed_bytes_were_zeroed_is_not_vacuumed(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA secure_delete = ON")  # as the forget's own connections write
    conn.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, text TEXT)")
    conn.execute("INSERT INTO log (text) VALUES (?)", (f"query: {CLAIM}",))
    conn.execute("UPDATE log SET text = '[forgotten]'")
    conn.close()
    done = scrub(db, scan.patterns(CLAIM))
    assert not done["vacuumed"] and done["wal_bytes"] == 0 and where(tmp_path, CLAIM) == {}, done
    assert scrub(db)["vacuumed"]  # without the words (a resumed forget) it cannot tell: always


# -- owners ------------------------------------------------------------------------------------------


def test_shared_memory_is_cut_for_the_workspaces_person_and_named_for_an_owner(tmp_path: Path, clock: Any) -> None:
    s = make(tmp_path, clock, isolation=True)
    try:
        s.store.ensure_agent(AGENT, "alice")
        append(s, "SOUL.md", f"\nShe told me: {CLAIM}.\n")  # shared: in every owner's prompt
        append(s, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n", owner="alice")
        append(s, "MEMORY.md", f"# Global\n\n- {CLAIM}\n", agent="global")
        report = s.forget.forget(AGENT, "alice", CLAIM, actor="person", now=True, receipt=True)
        assert report.files == [{"file": "MEMORY.md", "lines": 1}]
        assert [(k["file"], k["scope"]) for k in report.shared_kept] == [("SOUL.md", "team"), ("global/MEMORY.md",
                                                                                              "global")]
        assert all("forget without an owner" in k["why"] for k in report.shared_kept)
        assert report.scan and report.scan["unexplained"] == 0, report.scan["found"]
        found = {h["file"]: h["why"] for h in report.scan["found"]}
        assert found["default/SOUL.md"] == found["global/MEMORY.md"] == "shared memory (see shared_kept)"
        assert found[".mateclaw/index.db"].startswith("rows made from the shared memory")
        assert not [f for f in found if "/owners/" in f], found  # alice's own copies: none, history included

        person = s.forget.forget(AGENT, None, CLAIM, actor="person", now=True, receipt=True)
        assert {f["file"] for f in person.files} == {"SOUL.md", "global/MEMORY.md"}
        assert person.shared_kept == [] and person.scan and person.scan["proof"] == "clean", person.scan
    finally:
        s.close()


# -- a forget that dies midway -----------------------------------------------------------------------


def test_a_forget_with_a_failing_store_stays_pending_and_is_finished_later(tmp_path: Path, clock: Any) -> None:
    s = make(tmp_path, clock)
    try:
        append(s, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n")

        def unreachable(cut: Any) -> dict[str, Any]:
            raise OSError("the disk holding this store is gone")

        s.forget.holders.insert(0, Holder("a store that fails", "nothing", unreachable))
        report = s.forget.forget(AGENT, None, CLAIM, actor="person", now=True)
        assert report.status == "pending" and report.errors[0]["store"] == "a store that fails"
        assert s.forget.db.status(AGENT, None, report.fingerprint) == "pending"
        assert CLAIM not in s.store.read(AGENT, "MEMORY.md").body  # the other stores still forgot it
        assert s.forget.guard(AGENT, None).blocks(CLAIM)  # and the tombstone already guards

        s.forget.holders.pop(0)  # the store is back
        append(s, "PROFILE.md", f"\n- {CLAIM}\n")  # written by hand meanwhile: the resumed run cuts it too
        s.forget.purge_due()
        assert s.forget.db.status(AGENT, None, report.fingerprint) == "pending"  # too young: may still run
        clock.advance(timedelta(minutes=11))
        s.forget.purge_due()
        assert s.forget.db.status(AGENT, None, report.fingerprint) == "done"
        assert CLAIM not in s.store.read(AGENT, "PROFILE.md").body
    finally:
        s.close()


def test_a_tombstone_from_before_the_status_reads_done_and_a_new_one_pending(tmp_path: Path) -> None:
    from mateclaw_mem.memory.forget.matching import Fingerprint
    from mateclaw_mem.memory.forget.tombstones import TombstoneDB

    path = tmp_path / "forget.db"
    with sqlite3.connect(path) as conn:  # forget.db as the version before the status wrote it
        conn.execute("CREATE TABLE tombstones (agent TEXT NOT NULL, owner TEXT NOT NULL, sha TEXT NOT NULL,"
                     " n INTEGER NOT NULL, created_ms INTEGER NOT NULL, actor TEXT NOT NULL, batch TEXT NOT NULL,"
                     " PRIMARY KEY (agent, owner, sha))")
        conn.execute("INSERT INTO tombstones VALUES ('default', '', 'old', 3, 1, 'person', 'b0')")
    conn.close()
    db = TombstoneDB(path)
    try:
        assert db.status(AGENT, None, "old") == "done" and db.pending(10**15) == []
        fp = Fingerprint.of(CLAIM)
        assert db.add(AGENT, None, fp, at_ms=5, actor="person", batch="b1", asked=ANN)
        assert db.status(AGENT, None, fp.sha) == "pending"
        assert [(p.asked, p.batch) for p in db.pending(6)] == [(ANN, "b1")] and db.pending(5) == []
        db.finish(AGENT, None, fp.sha)
        assert db.status(AGENT, None, fp.sha) == "done"
    finally:
        db.close()


# -- Mem0 --------------------------------------------------------------------------------------------


class Mem0WithDelete(Mem0Server):
    """The loopback Mem0 with the list (`GET /memories/?user_id=…`) and delete endpoints too."""

    def _handler(self) -> Any:
        base, server = super()._handler(), self

        class Handler(base):  # type: ignore[misc,valid-type]
            def _json(self, status: int, answer: Any) -> None:
                data = json.dumps(answer).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                from urllib.parse import parse_qs, urlsplit

                url = urlsplit(self.path)
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                server.requests.append({"path": self.path, "method": "GET"})
                self._json(200, [m for m in server.memories
                                 if m["user_id"] == q.get("user_id") and m["agent_id"] == q.get("agent_id")])

            def do_DELETE(self) -> None:
                server.requests.append({"path": self.path, "method": "DELETE"})
                mid = self.path.rstrip("/").rsplit("/", 1)[-1]
                before = len(server.memories)
                server.memories[:] = [m for m in server.memories if m["id"] != mid]
                self._json(200 if len(server.memories) < before else 404, {"message": "deleted"})

        return Handler


def test_mem0_deletes_what_it_keeps_of_the_claim_for_that_person_only(tmp_path: Path, clock: Any) -> None:
    with Mem0WithDelete() as mem0:
        mem0.remember(ANN, AGENT, "Takes tea without sugar", "Likes cats")  # Mem0 rewords what it keeps
        mem0.remember("ben", AGENT, "Takes tea without sugar")
        s = make(tmp_path, clock, extra={"providers": [{"name": "mem0", "baseUrl": mem0.base_url}]})
        try:
            report = s.forget.forget(AGENT, ANN, CLAIM, actor="person")
            store = next(st for st in report.stores if st["store"] == "providers")
            assert store["mem0"]["removed"] == 1 and store["mem0"]["kept"] == 1, store
            assert sorted((m["user_id"], m["memory"]) for m in mem0.memories) == [
                (ANN, "Likes cats"), ("ben", "Takes tea without sugar")]
            person = s.forget.forget(AGENT, None, CLAIM, actor="person")  # no owner: nothing was ever sent
            assert next(st for st in person.stores if st["store"] == "providers")["removed"] == 0
        finally:
            s.close()


def test_mem0_unreachable_leaves_the_forget_pending(tmp_path: Path, clock: Any) -> None:
    s = make(tmp_path, clock, extra={"providers": [{"name": "mem0", "baseUrl": "http://127.0.0.1:9", "timeoutMs": 500}]})
    try:
        report = s.forget.forget(AGENT, ANN, CLAIM, actor="person")
        assert report.status == "pending" and report.errors[0]["store"] == "providers", report.errors
        assert "mem0" in report.errors[0]["error"]
    finally:
        s.close()


# -- faces -------------------------------------------------------------------------------------------


def test_cli_forget_receipt(tmp_path: Path, clock: Any) -> None:
    s = make(tmp_path, clock)
    append(s, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n- {CONTROL}\n")
    s.search.search(CLAIM, agent=AGENT)
    s.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
    env["MATECLAW_CONFIG"] = str(tmp_path / "mateclaw.yaml")
    proc = subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", "forget", AGENT, CLAIM, "--now", "--receipt",
                           "--workspace", str(tmp_path / "workspace")], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "status: done" in out and "retrieval log: removed 1" in out and "scrubbed log.db: vacuumed" in out
    assert "the claim found 0 time(s), 0 unexplained" in out, out
    assert "found in text, gzip, sqlite-wal -> clean" in out, out
    assert where(tmp_path / "workspace", CLAIM) == {} and where(tmp_path / "workspace", CONTROL)


def test_http_and_mcp_forget_answer_with_the_receipt(tmp_path: Path, clock: Any) -> None:
    import anyio

    from mateclaw_mem.api.app import create_app
    from mateclaw_mem.mcp.server import build_server
    from tests.support.server import ApiServer, daemon_services

    services = daemon_services(tmp_path / "ws", mate={"memory": {"fact": {"forget_enabled": True}}})
    try:
        services.seed_agents()
        services.build()
        append(services, "MEMORY.md", f"\n## Notes\n- {CLAIM}\n- likes cats\n")
        with ApiServer(create_app(services, mcp=False)) as server, httpx.Client(base_url=server.url, timeout=60) as c:
            r = c.post(f"/api/v1/memory/{AGENT}/forget", json={"text": CLAIM, "now": True, "receipt": True})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["status"] == "done" and body["scan"]["proof"] == "clean", body["scan"]
        assert any(st["store"] == "memory files" and st["removed"] == 1 for st in body["stores"])

        append(services, "MEMORY.md", "- I walk the dog at seven\n")

        async def call() -> Any:
            return await build_server(services, AGENT).call_tool(
                "memory_forget", {"text": "I walk the dog at seven", "now": True, "receipt": True})

        answer = json.loads(anyio.run(call).content[0].text)
        assert answer["status"] == "done" and answer["scan"]["proof"] == "clean", answer
    finally:
        services.close()
