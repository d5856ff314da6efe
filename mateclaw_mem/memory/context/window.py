"""Window defense (the seed's `mate.agent.conversation.window`): keep a conversation inside the
model's input budget without losing its thread.

Stage 1 — past `compact-trigger-ratio` (75%) of the budget, the earlier turns are summarised (by the
  model, at most `summary-max-tokens`; deterministically in rules mode) and replaced by the summary as
  a USER message — never system, because a summary quotes the person and must not gain the authority
  of instructions. The recent tail stays verbatim and is sized by tokens, as the seed sizes it: as
  many recent messages as fit TAIL_SHARE (20%) of the compaction threshold, never fewer than
  `protect-last-min-messages` (10) or 2 × `preserve-recent-pairs`, whichever is larger — a chat of
  short turns keeps more of them verbatim, one of long pastes is not left with only the floor's worth
  of budget for everything else. Summaries are cached for 30 minutes by content hash, so a long chat
  does not pay for the same summary every turn.
Stage 2 — the model still answers "context too large": stop calling it for summaries, keep the last
  2 turns (a turn = a user message and the replies after it) and retry once.
Stage 3 — drop messages from the front until the estimate fits, always keeping the last 2 messages.
  Applied before sending when stage 1 was not enough, and after a stage-2 retry that failed too
  (then against the limit the model reported, or 75% of what it refused).

`send_with_defense` takes the `send` callable that talks to the model, so the stages can be driven by
any client — and by the scripted model server in tests.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from mateclaw_mem.errors import ModelError
from mateclaw_mem.llm.prompts import summary as summary_prompt
from mateclaw_mem.memory.context.tokens import message_tokens, messages_tokens

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.llm.client import ModelClient
    from mateclaw_mem.settings import WindowSettings

T = TypeVar("T")
Message = dict[str, Any]

TAIL_SHARE = 0.2  # of the compaction threshold: the verbatim tail's token budget above its floor
KEEP_LAST_MESSAGES = 2
EMERGENCY_TURNS = 2
SUMMARY_TTL = timedelta(minutes=30)
SUMMARY_HEADER = "[Summary of the earlier part of this conversation — {n} messages compressed]\n"
_LIMIT_RE = re.compile(r"(?:context length|context window|limit)\D{0,20}?(\d[\d,]*)\s*tokens", re.IGNORECASE)


@dataclass
class Window:
    """What the defense decided for one request."""

    messages: list[Message]
    tokens: int
    budget: int
    stage: int = 0  # 0 untouched · 1 summarised · 2 emergency trim · 3 hard trim
    summary: str | None = None
    summarised: int = 0  # earlier messages replaced by the summary
    dropped: int = 0  # messages dropped without a summary
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "tokens": self.tokens, "budget": self.budget, "summarised": self.summarised,
                "dropped": self.dropped, "summary": self.summary, "notes": list(self.notes)}


class Summarizer:
    """Stage-1 summaries: the model when one is configured, else the rules digest. Cached 30 minutes
    by a hash of the exact messages (and mode and budget), timed by the injected clock."""

    def __init__(self, clock: Clock, *, client: ModelClient | None = None, max_tokens: int = 300,
                 ttl: timedelta = SUMMARY_TTL) -> None:
        self.clock = clock
        self.client = client
        self.max_tokens = max_tokens
        self.ttl = ttl
        self._cache: dict[str, tuple[datetime, str]] = {}
        self._lock = threading.Lock()
        self.calls = 0  # summaries actually computed (not served from the cache)

    @property
    def mode(self) -> str:
        return "model" if self.client is not None else "rules"

    def summarize(self, messages: Sequence[Mapping[str, Any]]) -> str:
        payload = json.dumps([[m.get("role"), m.get("content")] for m in messages], ensure_ascii=False)
        key = hashlib.sha256(f"{self.mode}:{self.max_tokens}:{payload}".encode()).hexdigest()
        now = self.clock.now()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
            # Expired entries go on the next write, so the cache cannot grow without bound.
            for k in [k for k, (exp, _) in self._cache.items() if exp <= now]:
                del self._cache[k]
        if self.client is None:
            text = summary_prompt.rules_summary(messages, max_tokens=self.max_tokens).text
        else:
            result = self.client.chat(summary_prompt.build_messages(messages, max_tokens=self.max_tokens),
                                      step="window.summary", max_tokens=self.max_tokens)
            text = summary_prompt.bound(result.text, self.max_tokens).text
        with self._lock:
            self.calls += 1
            self._cache[key] = (now + self.ttl, text)
        return text


class WindowDefense:
    def __init__(self, settings: WindowSettings, summarizer: Summarizer) -> None:
        self.settings = settings
        self.summarizer = summarizer

    # -- before sending ----------------------------------------------------------------------------

    def fit(
        self,
        prefix: Sequence[Message],
        history: Sequence[Message],
        current: Message | None,
        *,
        budget: int | None = None,
    ) -> Window:
        """Stage 1 (and stage 3 if stage 1 is not enough) on the estimate, before any model call."""
        budget = budget or self.settings.default_max_input_tokens
        prefix, history = list(prefix), list(history)
        tail_msgs = [current] if current is not None else []
        whole = prefix + history + tail_msgs
        tokens = messages_tokens(whole)
        window = Window(whole, tokens, budget)
        if tokens <= self.settings.compact_trigger_ratio * budget:
            return window
        body = history
        start = self._tail_start(history, int(TAIL_SHARE * self.settings.compact_trigger_ratio * budget))
        if start > 0:
            earlier, tail = history[:start], history[start:]
            try:
                text = self.summarizer.summarize(earlier)
            except ModelError as exc:
                # The chat must go on: keep the full history and let stage 3 trim it; say why.
                window.notes.append(f"summary failed ({exc.kind}): {exc.message}")
            else:
                summary_msg = {"role": "user", "content": SUMMARY_HEADER.format(n=len(earlier)) + text}
                body = [summary_msg, *tail]
                window.stage, window.summary, window.summarised = 1, text, len(earlier)
        window.messages = prefix + body + tail_msgs
        window.tokens = messages_tokens(window.messages)
        if window.tokens > budget:
            self._hard_trim(window, prefix, body, tail_msgs, budget)
        return window

    def _tail_start(self, history: list[Message], tail_budget: int) -> int:
        """Where the verbatim tail begins: the newest messages that fit `tail_budget` tokens, at least
        max(protect-last-min-messages, 2 × preserve-recent-pairs) of them, moved back to a user
        message so that no turn is cut in half."""
        floor = max(self.settings.protect_last_min_messages, 2 * self.settings.preserve_recent_pairs)
        start, used = len(history), 0
        while start > 0:
            cost = message_tokens(history[start - 1])
            if len(history) - start >= floor and used + cost > tail_budget:
                break
            used += cost
            start -= 1
        while 0 < start < len(history) and history[start].get("role") != "user":
            start -= 1
        return start

    @staticmethod
    def _hard_trim(window: Window, prefix: list[Message], body: list[Message], tail_msgs: list[Message],
                   target: int) -> None:
        """Stage 3: drop from the front of the conversation (the summary goes first) until the
        estimate is within `target`; the last 2 messages always stay."""
        convo = body + tail_msgs
        protected = min(KEEP_LAST_MESSAGES, len(convo))
        total = messages_tokens(prefix + convo)
        drop = 0
        while drop < len(convo) - protected and total > target:
            total -= message_tokens(convo[drop])
            drop += 1
        if drop == 0:
            if messages_tokens(prefix + convo) > target:
                window.notes.append("still over budget with only the last messages left")
            return
        if window.summary is not None and convo and convo[0].get("content", "").startswith(SUMMARY_HEADER[:12]):
            # The summary itself went: the turns it stood for are now dropped too.
            window.dropped += window.summarised + drop - 1
            window.summary, window.summarised = None, 0
        else:
            window.dropped += drop
        window.messages = prefix + convo[drop:]
        window.tokens = messages_tokens(window.messages)
        window.stage = 3
        if window.tokens > target:
            window.notes.append("still over budget with only the last messages left")

    # -- sending -----------------------------------------------------------------------------------

    def emergency(self, prefix: Sequence[Message], history: Sequence[Message], current: Message | None,
                  *, budget: int | None = None) -> Window:
        """Stage 2: the last 2 turns verbatim, no summary, no model call."""
        budget = budget or self.settings.default_max_input_tokens
        history = list(history)
        start, users = len(history), 0
        for i in range(len(history) - 1, -1, -1):
            start = i
            if history[i].get("role") == "user":
                users += 1
                if users == EMERGENCY_TURNS:
                    break
        kept = history[start:] if history else []
        tail_msgs = [current] if current is not None else []
        messages = list(prefix) + kept + tail_msgs
        return Window(messages, messages_tokens(messages), budget, stage=2, dropped=len(history) - len(kept),
                      notes=["the model reported the context too large: kept the last 2 turns"])

    def send_with_defense(
        self,
        prefix: Sequence[Message],
        history: Sequence[Message],
        current: Message | None,
        send: Callable[[list[Message]], T],
        *,
        budget: int | None = None,
    ) -> tuple[T, Window]:
        """Send through all three stages. `send(messages)` raises ModelError(kind="context_too_large")
        when the model refuses the size; any other error propagates untouched."""
        for stage in (self.fit, self.emergency):
            window = stage(prefix, history, current, budget=budget)
            try:
                return send(window.messages), window
            except ModelError as exc:
                if exc.kind != "context_too_large":
                    raise
                refused = exc
        target = int(window.tokens * 0.75)
        reported = reported_limit(refused.message)
        if reported:
            target = min(target, reported)
        trimmed = Window(list(window.messages), window.tokens, window.budget, stage=2, dropped=window.dropped,
                         notes=list(window.notes))
        n_prefix = len(prefix)
        convo = trimmed.messages[n_prefix:]
        self._hard_trim(trimmed, list(prefix), convo, [], target)
        if trimmed.stage != 3:
            raise refused  # nothing left to drop: the fixed prompt alone is too large for this model
        return send(trimmed.messages), trimmed


def reported_limit(message: str) -> int | None:
    """The context limit a model named in its refusal ("maximum context length is 4096 tokens")."""
    m = _LIMIT_RE.search(message or "")
    if not m:
        return None
    try:
        return int(m.group(1).replace(",", ""))
    except ValueError:
        return None
