"""Reading one streamed chat answer: OpenAI's SSE chunks accumulated into text, usage and finish reason.

A server that ignores `stream: true` and sends one JSON body is read as well (some proxies do).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from mateclaw_mem.llm.bounds import estimate_tokens
from mateclaw_mem.llm.transport import TRANSPORT_ERRORS, CallScope, active

_DRAIN_SECONDS = 1.0


class Accumulator:
    """The deltas of one streamed answer (or a whole JSON body from a server that ignores stream)."""

    def __init__(self) -> None:
        self.sent = False
        self.parts: list[str] = []
        self.finish_reason: str | None = None
        self.model = ""
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.got_usage = False
        self.saw_choice = False

    def read(self, stream: Any, scope: CallScope) -> None:
        """Read `stream` (an openai Stream) to its end. The SSE lines are parsed here rather than by the
        openai package, which closes the connection at `[DONE]` instead of reading the body's last
        bytes: reading them lets the next call reuse the connection."""
        response = stream.response
        if "event-stream" not in str(response.headers.get("content-type", "")):
            self._whole(json.loads(response.read()))
            return
        lines = response.iter_lines()
        for line in lines:
            scope.check()
            if not line.startswith("data:"):
                continue  # comments (": keep-alive"), event names, blank separators
            data = line[5:].strip()
            if data == "[DONE]":
                _drain(lines, scope)
                return
            self._chunk(json.loads(data))

    def _chunk(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise ValueError("a stream chunk is not a JSON object")
        if obj.get("error"):
            err = obj["error"]
            raise ValueError(f"error event in the stream: {err.get('message') if isinstance(err, dict) else err}")
        self.model = str(obj.get("model") or self.model)
        if isinstance(obj.get("usage"), dict):
            self._usage(obj["usage"])
        for choice in obj.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            self.saw_choice = True
            delta = choice.get("delta") or {}
            content = delta.get("content") if isinstance(delta, dict) else None
            if content:
                self.parts.append(str(content))
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def _whole(self, body: Any) -> None:
        if not isinstance(body, dict):
            raise ValueError("the answer body is not a JSON object")
        self.model = str(body.get("model") or "")
        if isinstance(body.get("usage"), dict):
            self._usage(body["usage"])
        choices = body.get("choices") or []
        if choices and isinstance(choices[0], dict) and isinstance(choices[0].get("message"), dict):
            self.saw_choice = True
            self.parts.append(str(choices[0]["message"].get("content") or ""))
            self.finish_reason = choices[0].get("finish_reason")

    def _usage(self, usage: dict[str, Any]) -> None:
        self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        self.completion_tokens = int(usage.get("completion_tokens") or 0)
        self.got_usage = True

    def tokens_seen(self) -> int:
        return estimate_tokens("".join(self.parts))

    def progress(self) -> str:
        if not self.sent:
            return "still waiting for a free slot on this server (model.max-concurrent-calls)"
        if not self.parts:
            return "no answer token received"
        return f"stopped after ~{self.tokens_seen()} answer tokens"


class _InvalidAnswer(Exception):
    pass


def _drain(lines: Iterator[str], scope: CallScope) -> None:
    """Read what follows `[DONE]` (normally just the body's end) for at most a second, so the
    connection goes back to the pool; a server that keeps it open only costs the connection."""
    with active(CallScope(max(0.0, min(_DRAIN_SECONDS, scope.remaining())))):
        try:
            for _ in lines:
                pass
        except TRANSPORT_ERRORS:
            pass  # the answer is complete; the connection is dropped instead of reused
