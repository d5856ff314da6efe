"""What one extraction run examines: the new messages since each conversation's watermark, cut to
the bounds below and redacted, plus the triage that decides whether they are worth a model call.

Bounds: at most `max-transcript-messages` new messages per run (a larger backlog is worked off in
later runs, oldest first); every new message cut at `transcript-message-max-chars` (2000, the seed's
cut, for the person's and the assistant's messages alike), already-seen context at 300; in model
mode the 2 messages before the watermark go along as context; the last DAILY_TAIL_CHARS (1500)
characters of today's daily note -- the part the new entry follows, and what keeps a long day's note
from crowding the transcript out of the prompt.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import date, datetime, tzinfo

from mateclaw_mem.conversations.log import ConversationLog, StoredMessage
from mateclaw_mem.llm.prompts.extraction import TranscriptMessage
from mateclaw_mem.memory.extraction import rules, triage
from mateclaw_mem.memory.extraction.state import Bucket, ExtractionState
from mateclaw_mem.redaction import redact

MESSAGE_CHARS = 2000  # the default of mate.memory.transcript-message-max-chars
SEEN_CHARS = 300  # already-examined context messages
DAILY_TAIL_CHARS = 1500
CONTEXT_MESSAGES = 2  # already-seen messages sent before the new ones (model mode)
SHRUNK_CHARS = 500  # per message on the retry after "context too large"


@dataclass
class Batch:
    """The messages one run examines."""

    transcript: list[TranscriptMessage]
    new_user_texts: list[str]
    watermarks: dict[str, int]  # conversation -> new watermark
    backlog: set[str]  # conversations with more new messages than this run took
    skipped_convs: set[str]  # memoryless: dropped from pending without a run
    explicit: bool
    new_count: int
    said_ms: int = 0  # when the newest message taken was said (its log time): what the run files under
    later_days: bool = False  # messages were left for the next run because they were said on a later day


def collect(
    log: ConversationLog, state: ExtractionState, bucket: Bucket, convs: list[str], *, cap: int,
    with_context: bool, tz: tzinfo, message_chars: int = MESSAGE_CHARS,
) -> Batch:
    """New messages of `convs` (in that order) up to `cap`, each cut at `message_chars`;
    `with_context` adds already-seen ones. One run reads one day: messages said on a later day than
    the first one taken wait for the next run (the backlog), so what a run writes is filed under the
    day it was said - a history imported or replayed with its dates spans many."""
    agent, owner = bucket
    batch = Batch([], [], {}, set(), set(), False, 0)
    remaining = cap
    day: date | None = None
    for conv in convs:
        flags = log.conversation_flags(agent, conv, owner)
        if flags.get("memoryless"):
            batch.skipped_convs.add(conv)
            continue
        wm = state.watermark(bucket, conv)
        msgs = log.messages(agent, conv, owner=owner)
        new = [m for m in msgs if m.id > wm]
        if not new:
            continue
        if remaining <= 0:
            batch.backlog.add(conv)
            continue
        day = day or _day(new[0].ts_ms, tz)
        take = _on_day(new[:remaining], day, tz)
        batch.later_days = batch.later_days or len(take) < len(new[:remaining])
        if not take:
            batch.backlog.add(conv)
            continue
        if len(take) < len(new):
            batch.backlog.add(conv)
        remaining -= len(take)
        seen = [m for m in msgs if m.id <= wm][-CONTEXT_MESSAGES:] if with_context else []
        for m in seen:
            batch.transcript.append(transcript_message(m, new=False, tz=tz, limit=message_chars))
        for m in take:
            batch.transcript.append(transcript_message(m, new=True, tz=tz, limit=message_chars))
            if m.role == "user":
                text = redact(m.content[:message_chars])
                batch.new_user_texts.append(text)
                batch.explicit = batch.explicit or rules.is_explicit_remember(text)
        batch.watermarks[conv] = take[-1].id
        batch.said_ms = max(batch.said_ms, *(m.ts_ms for m in take))
        batch.new_count += len(take)
    return batch


def transcript_message(m: StoredMessage, *, new: bool, tz: tzinfo, limit: int = MESSAGE_CHARS) -> TranscriptMessage:
    when = datetime.fromtimestamp(m.ts_ms / 1000, tz=tz).strftime("%H:%M")
    if not new:
        limit = min(limit, SEEN_CHARS)
    content = m.content if len(m.content) <= limit else m.content[:limit] + " …[cut]"
    return TranscriptMessage(m.id, m.conversation_id, m.role, redact(content), when, new)


def _day(ts_ms: int, tz: tzinfo) -> date:
    return datetime.fromtimestamp(ts_ms / 1000, tz=tz).date()


def _on_day(msgs: list[StoredMessage], day: date, tz: tzinfo) -> list[StoredMessage]:
    """The leading messages said on `day`."""
    return list(itertools.takewhile(lambda m: _day(m.ts_ms, tz) == day, msgs))


def said_at(batch: Batch, now: datetime) -> datetime:
    """When the batch was said: its newest message's time, or `now` when that is later (a turn
    imported with its own date files under that date; a live one, under the moment it was said)."""
    if not batch.said_ms:
        return now
    return min(now, datetime.fromtimestamp(batch.said_ms / 1000, tz=now.tzinfo))


def worth_a_model_call(batch: Batch) -> bool:
    """Triage: an explicit request, or a first-person statement, request or decision in the new
    messages. "How do I…?" and "thanks" are not."""
    return batch.explicit or any(triage.worth_extracting(t) for t in batch.new_user_texts)


def daily_tail(daily: str) -> str:
    tail = daily.strip()
    if len(tail) > DAILY_TAIL_CHARS:
        tail = "…" + tail[-DAILY_TAIL_CHARS:]
    return tail


def shrunk_transcript(batch: Batch) -> list[TranscriptMessage]:
    """The second and last try after "context too large": only new messages, shorter."""
    return [
        TranscriptMessage(t.id, t.conversation_id, t.role, t.content[:SHRUNK_CHARS], t.time, t.new)
        for t in batch.transcript
        if t.new
    ]
