"""Window defense, stage 1: summarise the earlier turns of a conversation.

The model answers in plain text (no JSON: a summary has no structure worth validating), bounded by
`summary-max-tokens` through `max_tokens` and cut again here in case a server ignores it. Rules mode
uses `rules_summary`, a deterministic digest: the first line of every earlier message, bounded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from mateclaw_mem.wire import Wire

PER_MESSAGE_CHARS = 1500  # each earlier message as the summariser sees it
RULES_LINE_CHARS = 160

SYSTEM_PROMPT = """You compress the earlier part of a conversation between a person and an AI assistant
so that the assistant can continue it without the full text.

Write a concise summary in the language of the conversation: who asked for what, facts and numbers the
person gave, decisions taken, open questions and commitments, and anything the assistant promised to do.
Leave out greetings and small talk. Do not invent anything. Plain prose or short bullet points, no
preamble, at most {max_tokens} tokens."""


class SummaryAnswer(Wire):
    """The answer after bounding: the text the prompt will carry."""

    text: str = Field(min_length=1)


def transcript(messages: Sequence[Mapping[str, Any]], *, per_message_chars: int = PER_MESSAGE_CHARS) -> str:
    lines = []
    for m in messages:
        content = str(m.get("content") or "").strip()
        if len(content) > per_message_chars:
            content = content[:per_message_chars].rstrip() + " …"
        lines.append(f"[{m.get('role', 'user')}] {content}")
    return "\n".join(lines)


def build_messages(messages: Sequence[Mapping[str, Any]], *, max_tokens: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(max_tokens=max_tokens)},
        {"role": "user", "content": "<<< Earlier conversation >>>\n" + transcript(messages)
         + "\n<<< end >>>\n\nWrite the summary now."},
    ]


def bound(text: str, max_tokens: int) -> SummaryAnswer:
    """Cut a summary to about `max_tokens` (4 chars per token, at a line or word boundary)."""
    text = text.strip()
    limit = max_tokens * 4
    if len(text) > limit:
        cut = text[:limit]
        at = max(cut.rfind("\n"), cut.rfind(" "))
        text = (cut[:at] if at > limit // 2 else cut).rstrip() + " …"
    return SummaryAnswer(text=text or "(nothing to summarise)")


def rules_summary(messages: Sequence[Mapping[str, Any]], *, max_tokens: int) -> SummaryAnswer:
    """Deterministic digest for rules mode: each earlier message's first line, oldest first, until
    the budget is used; a last line says how many messages did not fit."""
    limit = max_tokens * 4
    lines: list[str] = []
    used = 0
    for i, m in enumerate(messages):
        content = str(m.get("content") or "").strip()
        first = next((ln.strip() for ln in content.splitlines() if ln.strip()), "")
        if len(first) > RULES_LINE_CHARS:
            first = first[:RULES_LINE_CHARS].rstrip() + " …"
        line = f"- {m.get('role', 'user')}: {first}"
        rest = len(messages) - i
        tail = f"- (+{rest} more messages)"
        if (used + len(line) + 1 + len(tail) > limit and i < len(messages) - 1) or used + len(line) > limit:
            lines.append(tail)
            break
        lines.append(line)
        used += len(line) + 1
    return SummaryAnswer(text="\n".join(lines) or "(nothing to summarise)")
