"""Memory tools the model behind the chat proxy may call, run by the daemon (`proxy.tools: true`).

`remember`, `search_memory` and `memory_forget`, with the MCP tools' names and meanings, are added to a
request's tools (never one the client already names: a client's own tools are never touched). When the
answer calls only these, the daemon runs them and asks the model again with their results, at most
`proxy.max-tool-rounds` times; a call of the client's own tools goes back to the client as it came (with
ours taken out of it - run, but the client cannot answer them). Model output is untrusted input:
arguments are validated, errors go back to the model as the tool's result, never raised.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mateclaw_mem.errors import MateclawError

ENTRY_TYPES = ("user", "feedback", "project", "reference")
MAX_ARGUMENT_CHARS = 4000

DEFINITIONS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "remember",
        "description": "Keep a fact about the person or an instruction for later chats (replaces the entry with "
                       "the same key).",
        "parameters": {"type": "object", "required": ["type", "key", "text"], "properties": {
            "type": {"type": "string", "enum": list(ENTRY_TYPES),
                     "description": "user: about the person; feedback: how they want answers; project; reference"},
            "key": {"type": "string", "description": "short name, e.g. coffee"},
            "text": {"type": "string", "description": "what to remember"}}}}},
    {"type": "function", "function": {
        "name": "search_memory",
        "description": "Search memory files and earlier conversations for what the person said before.",
        "parameters": {"type": "object", "required": ["query"], "properties": {
            "query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 20}}}}},
    {"type": "function", "function": {
        "name": "memory_forget",
        "description": "Forget a claim everywhere in memory, when the person asks you to.",
        "parameters": {"type": "object", "required": ["text"], "properties": {
            "text": {"type": "string", "description": "the claim to forget"}}}}},
]
NAMES = frozenset(d["function"]["name"] for d in DEFINITIONS)


@dataclass
class ToolRunner:
    """What the tools call: the structured entries, the search, the forget service."""

    remember: Callable[..., Any]
    search: Callable[..., Any]
    forget: Callable[..., Any]

    def run(self, agent: str, owner: str | None, name: str, arguments: str) -> str:
        """The tool's result as the model reads it (JSON), an error included."""
        try:
            args = json.loads(arguments or "{}") if len(arguments or "") <= MAX_ARGUMENT_CHARS else None
        except ValueError:
            args = None
        if not isinstance(args, dict):
            return json.dumps({"error": f"the arguments of {name} must be a JSON object"})
        try:
            return json.dumps(self._call(agent, owner, name, args), ensure_ascii=False, default=str)
        except MateclawError as exc:
            return json.dumps({"error": exc.message})

    def _call(self, agent: str, owner: str | None, name: str, args: dict[str, Any]) -> Any:
        def text(field: str) -> str:
            value = args.get(field)
            if not isinstance(value, str) or not value.strip():
                raise _Refused(f"{name} needs a non-empty string {field!r}")
            return value.strip()

        try:
            if name == "remember":
                kind = args.get("type") if args.get("type") in ENTRY_TYPES else "user"
                r = self.remember(agent, kind, text("key"), text("text"), actor="proxy", owner=owner)
                return {"remembered": r.entry.key, "type": r.type, "changed": r.changed}
            if name == "search_memory":
                raw = args.get("limit")
                limit = raw if isinstance(raw, int) and not isinstance(raw, bool) else 8
                result = self.search(text("query"), agent=agent, owner=owner, limit=max(1, min(20, limit)))
                return {"hits": [{"source": h.file, "text": h.snippet} for h in result.hits]}
            if name == "memory_forget":
                report = self.forget(agent, owner, text("text"), actor="proxy")
                return report.to_dict() if hasattr(report, "to_dict") else {"forgot": True}
        except _Refused as exc:
            return {"error": str(exc)}
        return {"error": f"no tool {name!r}"}


class _Refused(Exception):
    pass


def ours(answer: dict[str, Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[dict[str, Any]]]:
    """(the answer's message, its calls of our tools, its other calls)."""
    choices = answer.get("choices") or []
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        return None, [], []
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    mine = [c for c in calls if (c.get("function") or {}).get("name") in NAMES]
    return message, mine, [c for c in calls if c not in mine]


def as_stream(answer: dict[str, Any], include_usage: bool) -> list[bytes]:
    """A finished completion as OpenAI's stream of chunks: the client asked for a stream, and the
    answer came after the daemon ran the model's memory tools."""
    base = {"id": answer.get("id", "chatcmpl-proxy"), "object": "chat.completion.chunk",
            "created": answer.get("created", 0), "model": answer.get("model", "")}
    out: list[bytes] = []
    for choice in answer.get("choices") or []:
        message = choice.get("message") or {}
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
        for d, finish in ((delta, None), ({}, choice.get("finish_reason") or "stop")):
            chunk = {**base, "choices": [{"index": choice.get("index", 0), "delta": d, "finish_reason": finish}]}
            out.append(b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n")
    if include_usage and answer.get("usage"):
        out.append(b"data: " + json.dumps({**base, "choices": [], "usage": answer["usage"]}).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out
