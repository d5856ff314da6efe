#!/usr/bin/env python3
"""The floor: the least a server can do to honour the AML Add/Search contract, for the benchmarks.

Standard library only: `http.server.ThreadingHTTPServer` (HTTP/1.1 keep-alive) and one SQLite file
with an FTS5 table, WAL and synchronous=NORMAL, each Add committed before its 200 (so it survives a
kill -9 of the process, as ours must). Same request and response shapes as `/v1/aml/add` and
`/v1/aml/search` (mateclaw_mem/api/aml.py), same idempotency per (user_id, request_id), ranking by
FTS5's bm25 alone. No redaction, no content parts, no validation beyond what the bench client needs.

    python scripts/bench/floor_server.py [--port 0] [--db PATH] [--owner-index]   # prints "listening on http://..."

--owner-index: the stronger floor. The owner is an indexed FTS5 column (one token per owner), and a
search matches it together with the words, so FTS5 intersects the owner's postings with the words'
instead of ranking every owner's matches and filtering them after.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sqlite3
import tempfile
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY, owner TEXT NOT NULL, session TEXT NOT NULL, role TEXT NOT NULL,
    content TEXT NOT NULL, ts_ms INTEGER NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(content, owner UNINDEXED, tokenize='unicode61');
CREATE TABLE IF NOT EXISTS requests (
    owner TEXT NOT NULL, request_id TEXT NOT NULL, body_hash TEXT NOT NULL, PRIMARY KEY (owner, request_id));
"""
_WORD = re.compile(r"\w+", re.UNICODE)


class Store:
    """One connection behind a lock: SQLite serialises writers anyway, and it keeps the floor honest."""

    def __init__(self, path: Path, owner_index: bool = False) -> None:
        self.conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.owner_index = owner_index
        self.conn.executescript(_SCHEMA.replace("owner UNINDEXED", "owner") if owner_index else _SCHEMA)
        self.lock = threading.Lock()

    def _owner(self, owner: str) -> str:
        """What the fts `owner` column holds: the owner, or (indexed) its one token."""
        return "o" + hashlib.sha256(owner.encode()).hexdigest()[:24] if self.owner_index else owner

    def add(self, body: dict) -> tuple[int, dict]:
        owner, rid, session = body["user_id"], body["request_id"], body["session_id"]
        digest = hashlib.sha256(json.dumps([session, body["messages"]], sort_keys=True).encode()).hexdigest()
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                row = self.conn.execute("SELECT body_hash FROM requests WHERE owner = ? AND request_id = ?",
                                        (owner, rid)).fetchone()
                if row is None:
                    self.conn.execute("INSERT INTO requests VALUES (?, ?, ?)", (owner, rid, digest))
                    for m in body["messages"]:
                        ts = m.get("timestamp")
                        cur = self.conn.execute(
                            "INSERT INTO messages (owner, session, role, content, ts_ms) VALUES (?, ?, ?, ?, ?)",
                            (owner, session, m["role"], m["content"], ts if isinstance(ts, int) else 0))
                        self.conn.execute("INSERT INTO fts (rowid, content, owner) VALUES (?, ?, ?)",
                                          (cur.lastrowid, m["content"], self._owner(owner)))
                self.conn.execute("COMMIT")  # committed (WAL, NORMAL) before the 200
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
        if row is not None and row[0] != digest:
            return 409, {"error": {"code": "conflict", "message": "request_id reused with another body"}}
        return 200, {"success": True, "request_id": rid, "user_id": owner, "session_id": session}

    def search(self, body: dict) -> tuple[int, dict]:
        words = _WORD.findall(body["query"].lower())
        if not words:
            return 200, {"data": []}
        match = " OR ".join('"' + w + '"' for w in words)
        owner = self._owner(body["user_id"])
        if self.owner_index:
            match = f'owner : "{owner}" AND content : ({match})'
        bm25 = "bm25(fts, 1.0, 0.0)" if self.owner_index else "bm25(fts)"  # the owner token ranks nothing
        with self.lock:
            rows = self.conn.execute(
                f"SELECT m.id, m.role, m.content, m.ts_ms, {bm25} AS s FROM fts JOIN messages m ON m.id = fts.rowid"
                " WHERE fts MATCH ? AND fts.owner = ? ORDER BY s LIMIT ?",
                (match, owner, int(body["top_k"]))).fetchall()
        data = [{"id": f"m{i}", "content": f"{role}: {content}", "score": -s,
                 "created_at": datetime.fromtimestamp(ts / 1000, tz=UTC).isoformat()}
                for i, role, content, ts, s in rows]
        return 200, {"data": data}


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default listen backlog (5) resets connections of 16 clients


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn serves
    # Headers and body go out as two writes: with Nagle on, the second waits for the client's
    # delayed ACK (~40 ms a request). uvicorn sets TCP_NODELAY too.
    disable_nagle_algorithm = True
    store: Store

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length))
            if self.path == "/v1/aml/add":
                status, out = self.store.add(body)
            elif self.path == "/v1/aml/search":
                status, out = self.store.search(body)
            else:
                status, out = 404, {"error": {"code": "not_found", "message": self.path}}
        except (ValueError, KeyError, TypeError) as exc:
            status, out = 422, {"error": {"code": "invalid_input", "message": str(exc)}}
        payload = json.dumps(out, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        payload = b'{"status":"ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:  # quiet, like the daemon
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--db", type=Path, help="SQLite file (default: a temp file)")
    parser.add_argument("--owner-index", action="store_true", help="the owner as an indexed FTS5 column")
    args = parser.parse_args()
    db = args.db or Path(tempfile.mkdtemp(prefix="aml-floor-")) / "floor.db"
    Handler.store = Store(db, owner_index=args.owner_index)
    server = Server(("127.0.0.1", args.port), Handler)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
