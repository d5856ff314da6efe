"""A real Mem0-compatible HTTP server on loopback for the Mem0 provider's tests.

It speaks the two endpoints the provider uses, with the Mem0 Platform API v1 shapes
(mem0ai 0.1.x `MemoryClient`):

- `POST /memories/search/` `{query, user_id, agent_id, top_k}` -> a JSON list of
  `{id, memory, user_id, agent_id, hash, metadata, categories, score, created_at, updated_at}`
  (`oss=True`: the open-source server's `{"results": [...]}` instead, every hit: it has no top_k);
- `POST /memories/` `{messages: [{role, content}], user_id, agent_id}` -> a JSON list of
  `{id, data: {memory}, event: "ADD"}`; each user message becomes one memory.

Each endpoint has a mode the test sets: "ok", "500" or "hang" (held until `release()`, then 500);
"huge" answers `huge_bytes` (80 MB) of a JSON list with no Content-Length, "huge-declared" says its
size up front; "drip" sends the answer's headers and then one byte of its body every `drip_seconds`,
"drip-head" drips from the status line on (both until `release()` or the client leaves). `sent[path]`
counts the body bytes the socket took. Every request is recorded with its path, headers and JSON
body; `add_seen` is set on each add.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SEARCH, ADD = "/memories/search/", "/memories/"


class Mem0Server:
    def __init__(self, *, oss: bool = False) -> None:
        self.oss = oss
        self.modes = {SEARCH: "ok", ADD: "ok"}
        self.memories: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.add_seen = threading.Event()
        self.huge_bytes = 80_000_000
        self.drip_seconds = 0.05
        self.sent: dict[str, int] = {}
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Mem0Server:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self._httpd.shutdown()
        self._httpd.server_close()

    def release(self) -> None:
        self._release.set()

    def hold(self) -> None:
        self._release.clear()

    def remember(self, user_id: str, agent_id: str, *texts: str) -> None:
        for text in texts:
            self.memories.append(_memory(text, user_id, agent_id))

    def calls(self, path: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if r["path"] == path]

    def _answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        mode = self.modes.get(path)
        if mode is None:
            return 404, {"detail": "Not Found"}
        if mode == "hang":
            self._release.wait(30)
            return 500, {"detail": "released"}
        if mode == "500":
            return 500, {"detail": "Internal Server Error"}
        if path == SEARCH:
            words = set(str(body.get("query", "")).lower().split())
            hits = [dict(m, score=0.9 - i / 100) for i, m in enumerate(self.memories)
                    if m["user_id"] == body.get("user_id") and m["agent_id"] == body.get("agent_id")
                    and (not words or words & set(m["memory"].lower().split()))]
            if self.oss:  # the open-source server's SearchRequest has no top_k: it answers with all of them
                return 200, {"results": hits}
            return 200, hits[: int(body.get("top_k") or 10)]
        added = []
        for msg in body.get("messages", []):
            if msg.get("role") == "user":
                memory = _memory(msg["content"], body.get("user_id"), body.get("agent_id"))
                self.memories.append(memory)
                added.append({"id": memory["id"], "data": {"memory": memory["memory"]}, "event": "ADD"})
        return 200, {"results": added} if self.oss else added

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet test output
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if self.path == ADD:
                    server.add_seen.set()
                mode = server.modes.get(self.path, "")
                if mode.startswith(("huge", "drip")):
                    try:
                        self._hostile(mode)
                    except OSError:
                        pass  # the client stopped reading: what we measure
                    return
                status, answer = server._answer(self.path, body)
                data = json.dumps(answer).encode("utf-8")
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (its deadline): nothing to answer

            def _hostile(self, mode: str) -> None:
                row = json.dumps(_memory("likes green tea " + "x" * 900, None, None)).encode("utf-8")
                if mode == "drip-head":
                    self._drip(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[]")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if mode == "huge-declared":
                    self.send_header("Content-Length", str(server.huge_bytes))
                self.end_headers()
                if mode == "drip":
                    self._drip(b"[" + row + b"]")
                    return
                self.wfile.write(b"[")
                written = 1
                while written < server.huge_bytes:
                    self.wfile.write(row + b",")
                    written += len(row) + 1
                    server.sent[self.path] = written
                self.wfile.write(row + b"]")

            def _drip(self, data: bytes) -> None:
                self.close_connection = True
                for i in range(len(data)):
                    if server._release.wait(server.drip_seconds):
                        return
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    server.sent[self.path] = i + 1

        return Handler


def _memory(text: str, user_id: str | None, agent_id: str | None) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "memory": text, "user_id": user_id, "agent_id": agent_id,
            "hash": hashlib.md5(text.encode("utf-8")).hexdigest(), "metadata": None, "categories": [],
            "created_at": "2026-12-01T09:00:00-08:00", "updated_at": None}
