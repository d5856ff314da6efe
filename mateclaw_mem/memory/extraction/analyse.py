"""Ask for an extraction answer: the rules in rules mode, else the model, with one smaller retry
when the prompt does not fit the model's context window."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mateclaw_mem.clock import Clock
from mateclaw_mem.errors import ModelError
from mateclaw_mem.llm.prompts.extraction import ExtractionResult, build_messages
from mateclaw_mem.memory.extraction import rules, rules_apply
from mateclaw_mem.memory.extraction.checks import answer_check
from mateclaw_mem.memory.extraction.input import Batch, daily_tail, said_at, shrunk_transcript
from mateclaw_mem.redaction import redact

if TYPE_CHECKING:
    from mateclaw_mem.llm.client import ModelClient


def analyse(
    client: ModelClient | None, clock: Clock, agent: str, profile: str, memory: str, daily: str, batch: Batch,
    retry_note: str, *, max_tokens: int,
) -> ExtractionResult:
    """The answer for `batch` against the current PROFILE.md / MEMORY.md bodies and today's note.
    Raises ModelError when the configured model fails (never a fallback to rules)."""
    when = said_at(batch, clock.now())  # a history imported with its dates is read as of its own day
    today = when.strftime("%Y-%m-%d")
    if client is None:
        return rules_apply.extract(profile=profile, memory=memory, messages=batch.new_user_texts, today=today)
    tail = daily_tail(daily)
    transcript = batch.transcript
    new_ids = {str(m.id) for m in transcript if m.new}
    requests = [t for t in batch.new_user_texts if rules.is_explicit_remember(t)]
    for shrink in (False, True):
        messages = build_messages(
            agent=agent,
            now=when.strftime("%Y-%m-%d %H:%M %Z"),
            profile=redact(profile),
            memory=redact(memory),
            daily=redact(tail),
            transcript=transcript,
            explicit=batch.explicit,
            retry_note=retry_note,
        )
        # Echoes are measured against the instructions only: a whole-body answer repeats the data.
        check = answer_check(messages[0]["content"], new_ids=new_ids,
                             remember_requests=requests, memory_texts=[profile, memory, daily])
        try:
            return client.chat_json(messages, ExtractionResult, step="extraction", max_tokens=max_tokens,
                                   check=check)
        except ModelError as exc:
            if exc.kind != "context_too_large" or shrink:
                raise
            # Second and last try: no already-seen context, no daily note, shorter messages.
            tail = ""
            transcript = shrunk_transcript(batch)
    raise AssertionError("unreachable")
