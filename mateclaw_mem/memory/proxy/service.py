"""The chat proxy's memory half: memory assembled into a client's chat request on its way to the
user's model, and the turn learned from once the answer is back.

Any chat front-end that takes an OpenAI base URL gets memory without asking for it: the daemon sits
between it and the user's model (`api/chat_proxy.py`, `llm/upstream.py`). For one request:

- the conversation is named by a header when the client sends one (`X-Mateclaw-Conversation`,
  `X-Conversation-Id`, Open WebUI's `X-OpenWebUI-Chat-Id`), otherwise by a fingerprint of its opening
  (the client's system text and first user message): clients re-send the whole history every time,
  and its start does not change;
- the memory is what `context` assembles for the last user message (always-on files, structured
  block, facts, recall, the morning card's pointer); the client's own system text comes first and is
  kept as it was, ours follows under one marked heading;
- the client's messages pass through the window defense as they came (tool calls, content parts
  and every other field kept), so a long chat fits the model;
- once the answer is complete, the new user message and the answer are logged (redacted, timed)
  and extraction is scheduled as for any turn - after the answer, never before it. A message already
  answered again (a regenerated answer, a retry: the history holds no more user messages than the log)
  is not logged again.

A memory failure never blocks a chat: the request goes on without memory and `status` says why.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.memory.context.personal import with_turn_block
from mateclaw_mem.memory.proxy.tools import DEFINITIONS, ToolRunner, ours
from mateclaw_mem.workspace.walk import normalise_owner

if TYPE_CHECKING:
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.llm.upstream import Streamed, Upstream
    from mateclaw_mem.memory.context.assembly import ContextService
    from mateclaw_mem.memory.extraction.service import ExtractionService

log = logging.getLogger(__name__)

MEMORY_HEADING = "# Memory (from mateclaw-mem: what you know about this person and earlier chats)"
CONVERSATION_HEADERS = ("x-mateclaw-conversation", "x-conversation-id", "x-openwebui-chat-id")
OWNER_HEADER = "x-mateclaw-owner"
MEMORYLESS_HEADER = "x-mateclaw-memoryless"
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


@dataclass
class Prepared:
    """A request ready for the upstream, and what to learn from once it is answered."""

    body: dict[str, Any]
    agent: str
    owner: str | None
    conversation_id: str
    user_text: str  # the new user message ("" when the last message is not the user's)
    memoryless: bool
    turn: str | None = None  # the turn record of the memory it carried
    memory_error: str | None = None
    tools: bool = False  # our memory tools were offered (memory/proxy/tools.py)
    user_turns: int = 0  # user messages in the client's history, the new one included
    stream: bool = False  # the client asked for a stream


@dataclass
class ProxyStats:
    requests: int = 0
    memory_failures: int = 0
    last_memory_error: str | None = None
    recorded: int = 0
    upstream_failures: int = 0
    last_upstream_error: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def as_dict(self) -> dict[str, Any]:
        with self.lock:
            return {"requests": self.requests, "memory_failures": self.memory_failures,
                    "last_memory_error": self.last_memory_error, "turns_recorded": self.recorded,
                    "upstream_failures": self.upstream_failures, "last_upstream_error": self.last_upstream_error}


class ChatProxy:
    def __init__(self, context: ContextService, extraction: ExtractionService, log_: ConversationLog, *,
                 default_model: str = "", tools: ToolRunner | None = None, max_tool_rounds: int = 3,
                 upstream: Upstream | None = None) -> None:
        self.context = context
        self.extraction = extraction
        self.log = log_
        self.default_model = default_model
        self.stats = ProxyStats()
        self.upstream = upstream  # the user's own model (proxy.upstream); None: nothing to relay to
        self.tools = tools  # None: the model gets no memory tools (proxy.tools: false)
        self.max_tool_rounds = max_tool_rounds

    def prepare(self, agent: str, body: Mapping[str, Any], headers: Mapping[str, str], *,
                owner: str | None = None) -> Prepared:
        """The request the upstream gets. Raises InvalidInputError for a body that is no chat request."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidInputError("messages must be a non-empty list of chat messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ROLES:
                raise InvalidInputError(f"messages[{i}] must be an object with a role ({', '.join(ROLES)})")
        owner = normalise_owner(owner)
        memoryless = headers.get(MEMORYLESS_HEADER, "").strip().lower() in ("1", "true", "yes", "on")
        lead = _leading_system(messages)
        system_text = "\n\n".join(_text(m.get("content")) for m in messages[:lead]).strip()
        rest = messages[lead:]
        conversation = conversation_id(headers, system_text, rest)
        user_text = _text(rest[-1].get("content")) if rest and rest[-1].get("role") == "user" else ""
        out = dict(body)
        if not out.get("model") and self.default_model:
            out["model"] = self.default_model
        prepared = Prepared(out, agent, owner, conversation, user_text, memoryless, stream=bool(body.get("stream")),
                            user_turns=sum(1 for m in rest if m.get("role") == "user"))
        if self.tools is not None and not memoryless:
            theirs = {(t.get("function") or {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
            offered = [d for d in DEFINITIONS if d["function"]["name"] not in theirs]
            if offered:
                out["tools"] = [*(body.get("tools") or []), *offered]
                prepared.tools = True
                out["stream"] = False  # the daemon reads the answer for tool calls; streamed back after
                out.pop("stream_options", None)
        with self.stats.lock:
            self.stats.requests += 1
        query = user_text or next((_text(m.get("content")) for m in reversed(rest) if m.get("role") == "user"), "")
        try:
            ctx = self.context.build(agent, owner=owner, query=query, memoryless=memoryless,
                                     conversation_id=conversation)
        except Exception as exc:  # memory is a help, never a gate: the chat goes on without it
            log.warning("chat proxy: no memory for %s/%s (%s: %s)", agent, conversation, type(exc).__name__, exc)
            with self.stats.lock:
                self.stats.memory_failures += 1
                self.stats.last_memory_error = f"{type(exc).__name__}: {exc}"
            prepared.memory_error = f"{type(exc).__name__}: {exc}"
            return prepared
        memory = ctx.system
        merged = f"{system_text}\n\n{MEMORY_HEADING}\n\n{memory}" if system_text else f"{MEMORY_HEADING}\n\n{memory}"
        prefix = [{"role": "system", "content": merged if memory else system_text}] if (memory or system_text) else []
        tail = list(rest)
        if ctx.turn_block is not None and ctx.turn_block.text and tail and tail[-1].get("role") == "user":
            tail[-1] = with_turn_block(tail[-1], ctx.turn_block.text) or tail[-1]
        history, current = (tail[:-1], tail[-1]) if tail else ([], None)
        window = self.context.window.fit(prefix, history, current, conversation=f"{agent}/{owner or ''}/{conversation}")
        out["messages"] = window.messages
        prepared.turn = ctx.turn
        return prepared

    async def complete(self, prepared: Prepared) -> dict[str, Any]:
        """The upstream's answer; with memory tools offered, the rounds of running them first.
        Raises UpstreamError as the upstream answered."""
        assert self.upstream is not None
        answer = await self.upstream.complete(prepared.body)
        if not prepared.tools or self.tools is None:
            return answer
        body = dict(prepared.body)
        for _ in range(self.max_tool_rounds):
            message, mine, theirs = ours(answer)
            if message is None or not mine:
                return answer
            results = [await asyncio.to_thread(self.tools.run, prepared.agent, prepared.owner,
                                               c["function"]["name"], c["function"].get("arguments") or "{}")
                       for c in mine]
            if theirs:  # the client's own tools: theirs to answer; ours are done and taken out
                message["tool_calls"] = theirs
                return answer
            body["messages"] = [*body["messages"], {k: v for k, v in message.items() if k != "refusal"},
                                *({"role": "tool", "tool_call_id": c.get("id"), "content": r}
                                  for c, r in zip(mine, results, strict=True))]
            answer = await self.upstream.complete(body)
        message, mine, theirs = ours(answer)
        if message is not None and mine:  # out of rounds: what is left of ours is not the client's
            if theirs:
                message["tool_calls"] = theirs
            else:
                message.pop("tool_calls", None)
                for choice in answer.get("choices") or []:
                    if choice.get("finish_reason") == "tool_calls":
                        choice["finish_reason"] = "stop"
        return answer

    def record_answer(self, prepared: Prepared, answer: dict[str, Any]) -> None:
        """Learn from a whole (non-streamed) answer: its assistant text."""
        message, _, _ = ours(answer)
        text = message.get("content") if message is not None else None
        self.record(prepared, text if isinstance(text, str) else "")

    def record_stream(self, prepared: Prepared, streamed: Streamed) -> None:
        """Learn from a relayed stream once it ended: what it said, and why it stopped early if it did."""
        if streamed.error is not None and not streamed.ended:  # (ended by the daemon's stop: not the upstream)
            self.upstream_failed(streamed.error)
        if streamed.finished or streamed.text:
            self.record(prepared, streamed.text)

    def record(self, prepared: Prepared, answer: str) -> None:
        """Learn from an answered turn: log it and schedule extraction (gates and cooldown as for any
        turn). Runs after the answer was sent; a failure here is logged, never raised to a chat."""
        if not prepared.user_text.strip():
            return
        try:
            logged = self.log.messages(prepared.agent, prepared.conversation_id, owner=prepared.owner)
            # The client re-sends the whole history: a turn is new when its history holds more user
            # messages than the log does. As many (a regenerated answer, a retry) is logged already;
            # the same words said again are a new turn ("yes", "go on").
            if sum(1 for m in logged if m.role == "user") >= prepared.user_turns:
                return
            self.extraction.record_turn(prepared.agent, prepared.conversation_id, prepared.user_text, answer,
                                        owner=prepared.owner, memoryless=prepared.memoryless,
                                        trigger_source="chat")
            with self.stats.lock:
                self.stats.recorded += 1
        except Exception as exc:
            log.warning("chat proxy: the turn of %s/%s was not recorded (%s: %s)", prepared.agent,
                        prepared.conversation_id, type(exc).__name__, exc)

    def upstream_failed(self, reason: str) -> None:
        with self.stats.lock:
            self.stats.upstream_failures += 1
            self.stats.last_upstream_error = reason


def conversation_id(headers: Mapping[str, str], system_text: str, messages: list[dict[str, Any]]) -> str:
    """The client's own id when it sends one, else a fingerprint of how the chat began."""
    for name in CONVERSATION_HEADERS:
        value = headers.get(name, "").strip()
        if value:
            if len(value) > 200 or any(ord(c) < 32 for c in value):
                raise InvalidInputError(f"{name} must be at most 200 printable characters")
            return f"chat-{value}"
    first = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    digest = hashlib.sha256(f"{system_text}\x00{first}".encode()).hexdigest()[:16]
    return f"chat-{digest}"


def _leading_system(messages: list[dict[str, Any]]) -> int:
    n = 0
    while n < len(messages) and messages[n].get("role") in ("system", "developer"):
        n += 1
    return n


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content
                         if isinstance(p, dict) and p.get("type") in ("text", "input_text"))
    return ""
