"""What extraction an import will cause in model mode: calls and tokens, before anything is written.

An upper bound, so that `--max-tokens` refuses what could cost more, never less:
- only conversations that pass the extraction gates count (the count, length and explicit-request
  rules of memory/extraction/gates.py, read from the same settings);
- each of those is read alone, `max-transcript-messages` new messages per call, each cut at
  `transcript-message-max-chars` (the daemon's queue may put several small conversations in one call,
  and its triage skips messages with nothing to keep: both only spend less);
- every call is the real extraction prompt (llm/prompts/extraction.py) built around today's PROFILE.md
  and MEMORY.md and a full daily-note tail, measured with the prompt budget's token estimate, plus
  `summary-max-tokens` for the answer (the most it may be).
Dreams (`--dream`) are counted as calls only: what a dream reads is the notes extraction writes first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mateclaw_mem.conversations.imports.records import Conversation, Message
from mateclaw_mem.llm.prompts.extraction import TranscriptMessage, build_messages
from mateclaw_mem.memory.context.tokens import messages_tokens
from mateclaw_mem.memory.extraction.forget_requests import forget_requests
from mateclaw_mem.memory.extraction.input import CONTEXT_MESSAGES, DAILY_TAIL_CHARS, SEEN_CHARS
from mateclaw_mem.memory.extraction.rules import is_explicit_remember

_ID = 100_000  # a message id as the prompt shows it ("#100000"): six digits, as a grown log has


@dataclass
class Estimate:
    conversations: int = 0  # that pass the gates and have new messages
    gated_out: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    answer_tokens: int = 0  # at most
    dream_calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.answer_tokens

    def to_dict(self) -> dict[str, int]:
        return {"conversations": self.conversations, "gated_out": self.gated_out, "calls": self.calls,
                "prompt_tokens": self.prompt_tokens, "answer_tokens": self.answer_tokens,
                "total_tokens": self.total_tokens, "dream_calls": self.dream_calls}


def passes_gates(conv: Conversation, mem: Any) -> bool:
    """The gates of memory/extraction/gates.py for a conversation as the import will log it."""
    if not mem.auto_summarize_enabled:
        return False
    users = [m.content for m in conv.messages if m.role == "user"]
    last = users[-1] if users else ""
    if is_explicit_remember(last) or (mem.fact.forget_enabled and forget_requests(last)):
        return True
    return len(conv.messages) >= mem.min_messages_for_summarize and len(last.strip()) >= mem.min_user_message_length


def estimate(work: list[tuple[Conversation, list[Message]]], *, mem: Any, agent: str, profile: str, memory: str,
             dream_days: int = 0) -> Estimate:
    """`work`: each conversation with the messages the import will add to it."""
    out = Estimate(dream_calls=dream_days)
    cap, chars = mem.max_transcript_messages, mem.transcript_message_max_chars
    daily = "x" * DAILY_TAIL_CHARS
    for conv, new in work:
        if not new:
            continue
        if not passes_gates(conv, mem):
            out.gated_out += 1
            continue
        out.conversations += 1
        for start in range(0, len(new), cap):
            chunk = new[start:start + cap]
            seen = new[max(0, start - CONTEXT_MESSAGES):start]  # a later run sends the last ones seen along
            transcript = [TranscriptMessage(_ID + i, conv.id, m.role, m.content[:SEEN_CHARS], "00:00", False)
                          for i, m in enumerate(seen)]
            transcript += [TranscriptMessage(_ID + i, conv.id, m.role, m.content[:chars], "00:00", True)
                           for i, m in enumerate(chunk)]
            explicit = any(m.role == "user" and is_explicit_remember(m.content) for m in chunk)
            prompt = build_messages(agent=agent, now="2000-01-01 00:00 UTC", profile=profile, memory=memory,
                                    daily=daily, transcript=transcript, explicit=explicit)
            out.calls += 1
            out.prompt_tokens += messages_tokens(prompt)
    out.answer_tokens = out.calls * mem.summary_max_tokens
    return out
