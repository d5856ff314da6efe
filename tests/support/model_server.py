"""A real OpenAI-compatible HTTP server on loopback that stands in for the model in tests and benches.

It speaks the chat-completions wire format (POST /v1/chat/completions and /chat/completions),
embeddings (POST /v1/embeddings) and model listing (GET /v1/models). Answers come, in order, from:

1. the scripted queue (`reply`, `reply_json`, `error`, `context_too_large`, `hang`, `raw_body`, `push`),
2. the `responder` callable (request body -> answer), for benches and content-dependent scripts,
3. the default answer.

Every request is recorded (`requests`, `chat_requests`) with its JSON body, and every completion
reports usage with deterministic token estimates (`estimate_tokens`), also totalled in `usage`.

`stream: true` requests get OpenAI's SSE chunks (a usage chunk when `stream_options.include_usage`,
then `data: [DONE]`); `stream_forever()` streams one token every 50 ms until the client hangs up
(counted in `disconnects`). `max_in_flight` is the most chat/embedding requests handled at once.
Options that imitate stricter servers: `strict_roles` (Gemma's template: 400 when two adjacent
messages share a role), `reject_system` (400 on any system message), `reject_response_format`,
`reject_stream_options`, `omit_usage` (never report usage in a stream).

    with ModelServer() as server:
        server.reply_json({"should_update": False, "reason": "nothing new"})
        client = OpenAI(base_url=server.base_url, api_key="x")
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def estimate_tokens(text: str) -> int:
    """Deterministic token estimate: one per CJK character, one per 4 other characters (rounded up)."""
    cjk = sum(1 for ch in text if _is_cjk(ch))
    other = len(text) - cjk
    return cjk + math.ceil(other / 4)


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x3040 <= code <= 0x30FF
        or 0xAC00 <= code <= 0xD7AF
        or 0xF900 <= code <= 0xFAFF
        or 0x20000 <= code <= 0x2FFFF
    )


def messages_tokens(messages: list[dict[str, Any]]) -> int:
    """Prompt tokens for a chat request: content estimate plus 4 tokens of overhead per message."""
    total = 0
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, list):  # content parts
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += estimate_tokens(str(content or "")) + 4
    return total + 2


@dataclass
class Answer:
    """One scripted answer.

    content: the assistant message text (a dict/list is serialised to JSON).
    status: an HTTP status other than 200 makes this an OpenAI-shaped error response.
    raw_body: sent verbatim as the HTTP body (status 200 unless `status` says otherwise).
    delay: seconds to wait before answering; `hang` waits that long too but is meant to exceed the
    client's timeout (the server gives up silently when stopped).
    """

    content: str | dict[str, Any] | list[Any] | None = None
    status: int = 200
    error_message: str = ""
    error_type: str = ""
    error_code: str | None = None
    error_param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: str | None = None
    delay: float = 0.0
    finish_reason: str = "stop"
    forever: float = 0.0  # > 0: stream a token every `forever` seconds until the client disconnects
    # Tool calls the assistant makes: [{"id", "type": "function", "function": {"name", "arguments"}}];
    # streamed as one delta each (index, id, name, then the arguments), finish_reason "tool_calls".
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def text(self) -> str:
        if isinstance(self.content, (dict, list)):
            return json.dumps(self.content, ensure_ascii=False)
        return self.content or ""


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: dict[str, Any] | None
    ts: float

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.body or {}).get("messages") or [])

    @property
    def prompt_text(self) -> str:
        """All message contents joined, for `in` assertions."""
        return "\n".join(str(m.get("content") or "") for m in self.messages)


Responder = Callable[[dict[str, Any]], "Answer | str | dict[str, Any] | None"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    502: "server_error",
    503: "server_error",
}


class ModelServer:
    """Scripted OpenAI-compatible server. Thread-safe; use as a context manager or start()/stop()."""

    def __init__(
        self,
        *,
        default: Answer | str | dict[str, Any] | None = None,
        responder: Responder | None = None,
        model: str = "test-model",
        reject_response_format: bool = False,
        strict_roles: bool = False,
        reject_system: bool = False,
        reject_stream_options: bool = False,
        omit_usage: bool = False,
        embedding_dim: int = 16,
        host: str = "127.0.0.1",
    ) -> None:
        self.model = model
        self.default = _as_answer(default) if default is not None else Answer(content="")
        self.responder = responder
        # Like some local servers: a 400 when the request carries response_format.
        self.reject_response_format = reject_response_format
        self.strict_roles = strict_roles
        self.reject_system = reject_system
        self.reject_stream_options = reject_stream_options
        self.omit_usage = omit_usage
        self.disconnects = 0  # streams the client closed before the end
        self.in_flight = 0
        self.max_in_flight = 0
        self.embedding_dim = embedding_dim
        self.requests: list[RecordedRequest] = []
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._queue: deque[Answer] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._host = host
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> ModelServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer((self._host, 0), Handler)
        self._httpd.daemon_threads = True
        httpd = self._httpd
        self._thread = threading.Thread(
            target=lambda: httpd.serve_forever(poll_interval=0.05), name="model-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes delayed/hanging handlers
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """The base URL an OpenAI client wants (ends in /v1)."""
        return f"http://{self._host}:{self.port}/v1"

    # -- scripting -------------------------------------------------------------------------------

    def push(self, *answers: Answer | str | dict[str, Any]) -> None:
        with self._lock:
            self._queue.extend(_as_answer(a) for a in answers)

    def reply(self, content: str, *, delay: float = 0.0, finish_reason: str = "stop") -> None:
        self.push(Answer(content=content, delay=delay, finish_reason=finish_reason))

    def reply_json(self, obj: dict[str, Any] | list[Any], *, delay: float = 0.0) -> None:
        self.push(Answer(content=obj, delay=delay))

    def raw_body(self, body: str, *, status: int = 200) -> None:
        """Send a broken HTTP body (not the OpenAI shape at all)."""
        self.push(Answer(raw_body=body, status=status))

    def error(
        self,
        status: int,
        message: str = "",
        *,
        code: str | None = None,
        param: str | None = None,
        retry_after: float | None = None,
        delay: float = 0.0,
    ) -> None:
        headers = {"Retry-After": _fmt_seconds(retry_after)} if retry_after is not None else {}
        self.push(
            Answer(
                status=status,
                error_message=message or f"scripted error {status}",
                error_type=_ERROR_TYPES.get(status, "api_error"),
                error_code=code,
                error_param=param,
                headers=headers,
                delay=delay,
            )
        )

    def rate_limited(self, *, retry_after: float | None = None) -> None:
        self.error(429, "Rate limit reached for requests", code="rate_limit_exceeded", retry_after=retry_after)

    def server_error(self, status: int = 500) -> None:
        self.error(status, "The server had an error while processing your request.")

    def context_too_large(self, max_tokens: int = 4096) -> None:
        self.error(
            400,
            f"This model's maximum context length is {max_tokens} tokens. However, your messages resulted "
            "in more tokens. Please reduce the length of the messages.",
            code="context_length_exceeded",
            param="messages",
        )

    def stream_forever(self, *, interval: float = 0.05) -> None:
        """Stream one token every `interval` seconds until the client disconnects (or the server stops).
        A request without `stream: true` gets the same tokens in one body only after the server stops."""
        self.push(Answer(content="tok ", forever=interval))

    def hang(self, seconds: float = 30.0) -> None:
        """Accept the request and stay silent for `seconds` (longer than the client's timeout)."""
        self.push(Answer(content="", delay=seconds))

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.prompt_tokens = 0
            self.completion_tokens = 0
            self.disconnects = 0
            self.max_in_flight = 0

    # -- inspection ------------------------------------------------------------------------------

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.rstrip("/").endswith("chat/completions")]

    @property
    def usage(self) -> dict[str, int]:
        with self._lock:
            calls = sum(1 for r in self.requests if r.path.rstrip("/").endswith("chat/completions"))
            return {
                "calls": calls,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
            }

    # -- internals used by the handler -----------------------------------------------------------

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(req)

    def _next_answer(self, body: dict[str, Any]) -> Answer:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.responder is not None:
            got = self.responder(body)
            if got is not None:
                return _as_answer(got)
        return self.default

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _disconnected(self) -> None:
        with self._lock:
            self.disconnects += 1

    def _count(self, prompt: int, completion: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt
            self.completion_tokens += completion

    def _embedding(self, text: str) -> list[float]:
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        while len(digest) < self.embedding_dim:
            digest += hashlib.sha256(digest).digest()
        raw = [(b - 127.5) / 127.5 for b in digest[: self.embedding_dim]]
        norm = math.sqrt(sum(x * x for x in raw)) or 1.0
        return [x / norm for x in raw]


def _as_answer(value: Answer | str | dict[str, Any] | list[Any]) -> Answer:
    if isinstance(value, Answer):
        return value
    return Answer(content=value)


def _fmt_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


class _Handler(BaseHTTPRequestHandler):
    owner: ModelServer
    protocol_version = "HTTP/1.1"
    # Each SSE chunk is its own small write: without TCP_NODELAY, Nagle + delayed ACK add ~40 ms a call.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        self.owner._record(RecordedRequest("GET", path, {k.lower(): v for k, v in self.headers.items()}, None, time.time()))
        if path in ("/v1/models", "/models"):
            self._send_json(200, {"object": "list", "data": [_model_card(self.owner.model)]})
        else:
            self._send_error_body(404, "not found", "not_found_error", None, None)

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw.decode("utf-8")) if raw else {}
        except (UnicodeDecodeError, json.JSONDecodeError):
            body = None
        self.owner._record(RecordedRequest("POST", path, {k.lower(): v for k, v in self.headers.items()}, body, time.time()))
        if not isinstance(body, dict):
            self._send_error_body(400, "request body is not a JSON object", "invalid_request_error", None, None)
            return
        if path in ("/v1/chat/completions", "/chat/completions", "/v1/embeddings", "/embeddings"):
            self.owner._enter()
            try:
                if "chat" in path:
                    self._chat(body)
                else:
                    self._embeddings(body)
            finally:
                self.owner._leave()
        else:
            self._send_error_body(404, f"unknown path {path}", "not_found_error", None, None)

    def _chat(self, body: dict[str, Any]) -> None:
        owner = self.owner
        refusal = self._refusal(body)
        if refusal is not None:
            self._send_error_body(400, refusal[0], "invalid_request_error", None, refusal[1])
            return
        answer = owner._next_answer(body)
        if answer.delay > 0 and owner._stopping.wait(answer.delay):
            return  # the server is stopping: drop the connection
        if answer.raw_body is not None:
            self._send_raw(answer.status, answer.raw_body, answer.headers)
            return
        if answer.status != 200:
            self._send_error_body(
                answer.status, answer.error_message, answer.error_type, answer.error_code,
                answer.error_param, answer.headers,
            )
            return
        text = answer.text()
        prompt = messages_tokens(list(body.get("messages") or []))
        if body.get("stream"):
            self._stream(body, answer, prompt)
            return
        if answer.forever > 0:
            owner._stopping.wait()
            return
        completion = estimate_tokens(text)
        owner._count(prompt, completion)
        self._send_json(
            200,
            {
                "id": f"chatcmpl-{len(owner.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": str(body.get("model") or owner.model),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": (text or None) if answer.tool_calls else text,
                                    **({"tool_calls": answer.tool_calls} if answer.tool_calls else {})},
                        "finish_reason": "tool_calls" if answer.tool_calls else answer.finish_reason,
                        "logprobs": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            },
            answer.headers,
        )

    def _refusal(self, body: dict[str, Any]) -> tuple[str, str | None] | None:
        """(message, param) of a 400 this server's options give the request, or None."""
        owner = self.owner
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        if owner.reject_stream_options and body.get("stream_options") is not None:
            return "stream_options is not supported by this server", "stream_options"
        if owner.reject_response_format and body.get("response_format") is not None:
            return "response_format is not supported by this server", "response_format"
        if owner.reject_system and any(m.get("role") == "system" for m in messages):
            return "System role not supported", "messages"
        roles = [m.get("role") for m in messages]
        if owner.strict_roles and any(a == b for a, b in itertools.pairwise(roles)):
            return "Conversation roles must alternate user/assistant/user/assistant/...", "messages"
        return None

    def _stream(self, body: dict[str, Any], answer: Answer, prompt: int) -> None:
        """OpenAI's SSE format over chunked transfer encoding; a hang-up mid-stream is counted."""
        owner = self.owner
        cid = f"chatcmpl-{len(owner.requests)}"
        model = str(body.get("model") or owner.model)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage")) and not owner.omit_usage

        def chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: dict[str, int] | None = None) -> str:
            obj: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                                   "model": model, "choices": []}
            if delta is not None:
                obj["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
            if usage is not None:
                obj["usage"] = usage
            return "data: " + json.dumps(obj, ensure_ascii=False) + "\n\n"

        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            for key, value in answer.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self._write_chunk(chunk({"role": "assistant", "content": ""}))
            text = answer.text()
            if answer.forever > 0:
                while not owner._stopping.wait(answer.forever):
                    self._write_chunk(chunk({"content": text}))
                return
            size = max(8, math.ceil(len(text) / 20))
            for i in range(0, len(text), size):
                self._write_chunk(chunk({"content": text[i:i + size]}))
            for n, call in enumerate(answer.tool_calls):
                fn = call.get("function") or {}
                self._write_chunk(chunk({"tool_calls": [{"index": n, "id": call.get("id"), "type": "function",
                                                          "function": {"name": fn.get("name"), "arguments": ""}}]}))
                self._write_chunk(chunk({"tool_calls": [{"index": n, "function": {"arguments": fn.get("arguments")}}]}))
            completion = estimate_tokens(text)
            owner._count(prompt, completion)
            self._write_chunk(chunk({}, "tool_calls" if answer.tool_calls else answer.finish_reason))
            if include_usage:
                self._write_chunk(chunk(None, usage={"prompt_tokens": prompt, "completion_tokens": completion,
                                                     "total_tokens": prompt + completion}))
            self._write_chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            owner._disconnected()  # the client closed the stream: a real server stops generating here
            self.close_connection = True

    def _write_chunk(self, text: str) -> None:
        data = text.encode("utf-8")
        self.wfile.write(f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n")
        self.wfile.flush()

    def _embeddings(self, body: dict[str, Any]) -> None:
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else [str(t) for t in (inputs or [])]
        prompt = sum(estimate_tokens(t) for t in texts)
        self._send_json(
            200,
            {
                "object": "list",
                "model": str(body.get("model") or self.owner.model),
                "data": [
                    {"object": "embedding", "index": i, "embedding": self.owner._embedding(t)}
                    for i, t in enumerate(texts)
                ],
                "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
            },
        )

    def _send_error_body(
        self,
        status: int,
        message: str,
        etype: str,
        code: str | None,
        param: str | None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._send_json(status, {"error": {"message": message, "type": etype, "param": param, "code": code}}, headers)

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(obj, ensure_ascii=False), headers, "application/json")

    def _send_raw(
        self, status: int, text: str, headers: dict[str, str] | None = None, ctype: str = "application/json"
    ) -> None:
        data = text.encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout): nothing to tell it


def _model_card(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "tests"}
