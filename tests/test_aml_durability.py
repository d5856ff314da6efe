"""An acknowledged AML Add survives kill -9 of the daemon (issue 22: Add made faster, the promise kept).

What we promise: once `/v1/aml/add` has answered 200, the messages are committed to `log.db` (WAL,
synchronous=NORMAL), so a crash of the process - kill -9, an OOM kill, a panic - loses none of them;
the restarted daemon finds them by Search and replays a retry without duplicates. (The message index
is written after the answer, issue 36: a kill before that leaves it behind the log, and the next
start - or search - indexes the rest; the second test makes sure the kill comes while it is behind.)
(NORMAL does not fsync at each commit, so a power loss or OS crash may lose the last commits; that is
SQLite's WAL+NORMAL guarantee and the floor server's too.)

Also: the `fts` token table of older versions' `messages.db` (FTS5 or plain) is dropped in place
and the file compacted, ranking unchanged (the fields are made from the text: docfields.py).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import httpx

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.aml import AmlMessage, AmlService
from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.index.messages.index import MessageIndex
from tests.test_daemon_e2e import Daemon

TS = 1683554160000
USERS = 3
ADDS = 6  # per user, in one session: later turns also rewrite the previous turn's neighbour field


def _add(client: httpx.Client, user: int, n: int) -> httpx.Response:
    return client.post("/v1/aml/add", json={
        "request_id": f"r-{user}-{n}", "user_id": f"user-{user}", "session_id": f"user-{user}:s1",
        "messages": [{"role": "user", "timestamp": TS + n, "content": f"Caroline: marker{user}x{n} zebra kite"}],
    })


def _found(client: httpx.Client, user: int, n: int) -> list[str]:
    r = client.post("/v1/aml/search", json={"query": f"marker{user}x{n}", "user_id": f"user-{user}", "top_k": 5})
    assert r.status_code == 200, r.text
    return [item["content"] for item in r.json()["data"] if f"marker{user}x{n}" in item["content"]]


def _add_every(daemon: Daemon) -> None:
    """Every user's every Add, each acknowledged (200) before the next is sent."""
    with daemon.client() as client:
        for n in range(ADDS):
            for user in range(USERS):
                r = _add(client, user, n)
                assert r.status_code == 200, r.text


def test_kill_9_right_after_the_200_loses_no_acknowledged_add(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path).start()
    try:
        _add_every(daemon)
        assert daemon.proc is not None
        daemon.proc.kill()  # SIGKILL at once after the last acknowledgement: no shutdown, no flush
        daemon.proc.wait()
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()

    again = Daemon(tmp_path).start()
    try:
        with again.client() as client:
            missing = [(u, n) for u in range(USERS) for n in range(ADDS) if len(_found(client, u, n)) != 1]
            assert missing == [], f"acknowledged Adds lost (or duplicated) by kill -9: {missing}"
            # A client that never saw the 200 retries: replayed, not appended a second time.
            r = _add(client, USERS - 1, ADDS - 1)
            assert r.status_code == 200, r.text
            assert len(_found(client, USERS - 1, ADDS - 1)) == 1
    finally:
        again.stop()


def test_kill_9_while_the_index_is_behind_the_log_loses_nothing(tmp_path: Path) -> None:
    """Another process holds messages.db's write lock while the Adds are answered: they are in the
    log only when the daemon is killed. The restarted daemon finds every one, once."""
    daemon = Daemon(tmp_path).start()
    blocker = None
    try:
        blocker = sqlite3.connect(tmp_path / "ws" / ".mateclaw" / "messages.db", timeout=30, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # the index cannot commit until this is let go
        _add_every(daemon)
        assert daemon.proc is not None
        daemon.proc.kill()
        daemon.proc.wait()
    finally:
        if blocker is not None:
            blocker.execute("ROLLBACK")
            blocker.close()
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()
    meta = tmp_path / "ws" / ".mateclaw"
    with sqlite3.connect(f"file:{meta / 'log.db'}?mode=ro", uri=True) as db:
        logged = db.execute("SELECT COUNT(*), MAX(id) FROM messages WHERE trigger_source = 'aml'").fetchone()
    with sqlite3.connect(f"file:{meta / 'messages.db'}?mode=ro", uri=True) as db:
        row = db.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
    assert logged[0] == USERS * ADDS
    watermark = int(row[0]) if row else 0
    assert watermark < logged[1], "the index was not behind the log at the kill"

    again = Daemon(tmp_path).start()
    try:
        with again.client() as client:
            missing = [(u, n) for u in range(USERS) for n in range(ADDS) if len(_found(client, u, n)) != 1]
            assert missing == [], f"acknowledged Adds lost (or duplicated) by kill -9: {missing}"
    finally:
        again.stop()


def _results(svc: AmlService) -> list[list[tuple[str, str, float]]]:
    return [[(i.id, i.content, i.score) for i in svc.search(q, "u1", 10)]
            for q in ("what did Melanie paint?", "camping by the lake", "sunset")]


def test_the_token_table_of_older_versions_is_dropped_in_place_and_the_file_compacted(tmp_path: Path) -> None:
    clock = ManualClock(datetime(2024, 1, 1, tzinfo=UTC))
    log = ConversationLog(tmp_path / "log.db")
    svc = AmlService(log, MessageIndex(tmp_path / "messages.db"), clock)
    turns = ("Caroline: What did you paint last week?", "Melanie: A sunset over the lake.",
             "Caroline: We went camping by the lake!", "Melanie: Did you see the sunset?")
    for n, text in enumerate(turns):
        svc.add(f"r{n}", "u1", "s1", [AmlMessage("user", text, TS + n)])
    before = _results(svc)
    svc.index.close()

    db = sqlite3.connect(tmp_path / "messages.db")
    with db:  # the FTS5 token table older versions kept beside `docs`, holding the turns' words
        db.executescript(
            "CREATE VIRTUAL TABLE fts USING fts5(okey, body, ctx, nb, dt, tokenize='unicode61');"
            "INSERT INTO fts (rowid, okey, body, ctx, nb, dt) SELECT id, 'k', lower(content), '', '', '' FROM docs;"
            "WITH RECURSIVE n(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM n WHERE v < 200)"
            " INSERT INTO fts (rowid, okey, body, ctx, nb, dt) SELECT 1000 + v, 'k', hex(randomblob(2000)), '', '', ''"
            " FROM n;"
            "DELETE FROM meta WHERE key = 'migrated:no-fts';")
    db.close()
    grown = (tmp_path / "messages.db").stat().st_size

    index = MessageIndex(tmp_path / "messages.db")
    try:
        reopened = AmlService(log, index, clock)
        assert _results(reopened) == before
        db = sqlite3.connect(tmp_path / "messages.db")
        left = db.execute("SELECT name FROM sqlite_master WHERE name LIKE 'fts%'").fetchall()
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        db.close()
        assert left == [] and free == 0, (left, free)
        assert (tmp_path / "messages.db").stat().st_size < grown - 400_000  # compacted, not only freed
        # Still indexed incrementally after the drop.
        reopened.add("r9", "u1", "s1", [AmlMessage("user", "Caroline: The pottery class was fun.", TS + 9)])
        found = [i.content for i in reopened.search("pottery", "u1", 1)]
        assert found and found[0].endswith("The pottery class was fun."), found
    finally:
        index.close()
        log.close()
