"""Whether a turn schedules extraction: the seed's gates, in the seed's order.

`auto-summarize-enabled`; never for memoryless conversations; never for turns from consolidation or
dreaming, nor from cron when `skip-cron-conversations`; at least `min-messages-for-summarize`
messages; the last user message at least `min-user-message-length` characters. An explicit
"remember …" / "记住…" bypasses the count, length and cooldown gates, and so does "forget that …" /
"忘记…" with `fact.forget-enabled` (the forget itself runs at the start of the run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.memory.extraction import rules
from mateclaw_mem.memory.extraction.forget_requests import forget_requests

NEVER_EXTRACT_SOURCES = frozenset({"consolidation", "dreaming", "dream", "extraction"})


@dataclass(frozen=True)
class TriggerResult:
    """What happened to a trigger: `scheduled` is False when a gate said no (`reason` says which)."""

    scheduled: bool
    reason: str
    explicit: bool = False
    when: str = ""  # "now", "coalesced", "after cooldown" (scheduled ones)


def gate(mem: Any, log: ConversationLog, agent: str, conv: str, owner: str | None, source: str, memoryless: bool,
         last_user: str | None) -> TriggerResult:
    if not mem.auto_summarize_enabled:
        return TriggerResult(False, "auto-summarize is disabled (mate.memory.auto-summarize-enabled)")
    flags = log.conversation_flags(agent, conv, owner)
    if memoryless or flags.get("memoryless"):
        return TriggerResult(False, "memoryless conversation: never extracted")
    if source in NEVER_EXTRACT_SOURCES:
        return TriggerResult(False, f"turn from {source}: its own output never re-triggers extraction")
    if source == "cron" and mem.skip_cron_conversations:
        return TriggerResult(False, "turn from cron (mate.memory.skip-cron-conversations)")
    if last_user is None:
        users = [m for m in log.messages(agent, conv, owner=owner) if m.role == "user"]
        last_user = users[-1].content if users else ""
    if rules.is_explicit_remember(last_user):
        return TriggerResult(True, "explicit remember request (bypasses count, length and cooldown)", True)
    if mem.fact.forget_enabled and forget_requests(last_user):
        return TriggerResult(True, "forget request (bypasses count, length and cooldown)", True)
    count = int(flags.get("message_count", 0))
    if count < mem.min_messages_for_summarize:
        return TriggerResult(
            False, f"only {count} messages (mate.memory.min-messages-for-summarize={mem.min_messages_for_summarize})")
    if len(last_user.strip()) < mem.min_user_message_length:
        return TriggerResult(
            False,
            f"last user message has {len(last_user.strip())} characters "
            f"(mate.memory.min-user-message-length={mem.min_user_message_length})",
        )
    return TriggerResult(True, "gates passed")
