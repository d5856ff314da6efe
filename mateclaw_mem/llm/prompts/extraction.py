"""Post-chat extraction: the prompt builder and the response model (shared with rules mode).

The model sees the current PROFILE.md and MEMORY.md bodies, the tail of today's daily note, and a
transcript (each message with its id) in which messages an earlier run already examined are marked
as context. It returns `ExtractionResult` with `edits`: add / update / remove one bullet or section,
each citing the message ids it rests on (`llm/prompts/edits.py`). The seed's whole-file answer --
`memory_update` / `profile_update`, the FULL new bodies or "" for unchanged -- is still accepted and
goes through the same guards. `daily_entry` is asked for as `{title, body}`; the seed's plain string
is accepted too (the body, titled by its first line).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from mateclaw_mem.llm.prompts import block
from mateclaw_mem.llm.prompts.edits import MAX_EDITS, EditOp
from mateclaw_mem.redaction import redact
from mateclaw_mem.wire import Wire

TITLE_MAX = 30
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
BODY_MAX = 4000
REASON_MAX = 500
MEMORY_MAX = 40_000  # far above the MEMORY.md ceiling; anything bigger is a runaway answer
PROFILE_MAX = 20_000
STRUCTURED_MAX_ITEMS = 20


class DailyEntry(Wire):
    model_config = ConfigDict(extra="ignore")

    title: str = Field(min_length=1)
    body: str = Field(default="", max_length=BODY_MAX)

    @field_validator("title")
    @classmethod
    def _short_title(cls, value: str) -> str:
        # A long title is a style slip, not a reason for a repair round trip: cut it on one line.
        value = " ".join(value.replace("#", " ").split())
        if not value:
            raise ValueError("title is empty")
        # Redacted before the cut: a cut must never leave half a key that no pattern recognises.
        if len(value) <= TITLE_MAX:
            return value
        return shorten_title(redact(value), TITLE_MAX)


def shorten_title(value: str, limit: int) -> str:
    """`value` in at most `limit` characters, cut at a word boundary with "…" ("I take my tea…", never
    "I take my tea wit…"). Between CJK characters every position is a boundary; a single word
    longer than half the room is cut where the room ends."""
    if len(value) <= limit:
        return value
    room = limit - 1
    cut = room
    if not (_CJK.match(value[room - 1]) or _CJK.match(value[room])):
        at = max(value.rfind(" ", 0, room + 1), *(value.rfind(p, 0, room) + 1 for p in "，。、：；"))
        if at >= room // 2:
            cut = at
    return value[:cut].rstrip(" ,.;:-—–→，。、：；") + "…"


def title_from(text: str) -> str:
    """A daily entry's title from its text: the first line without list or heading marks (DailyEntry
    cuts it to TITLE_MAX)."""
    first = next(line for line in text.splitlines() if line.strip())
    return first.strip().lstrip("-*+#>•· \t").strip() or first.strip()


class StructuredItem(Wire):
    model_config = ConfigDict(extra="ignore")

    type: Literal["user", "feedback", "project", "reference"]
    key: str = Field(min_length=1, max_length=80)
    text: str = Field(min_length=1, max_length=1000)


class ExtractionResult(Wire):
    """What one extraction run decided. Same schema for the model and for rules mode."""

    model_config = ConfigDict(extra="ignore")

    should_update: bool
    reason: str = ""
    daily_entry: DailyEntry | None = None
    memory_update: str = Field(default="", max_length=MEMORY_MAX)
    profile_update: str = Field(default="", max_length=PROFILE_MAX)
    structured: list[StructuredItem] = Field(default_factory=list, max_length=STRUCTURED_MAX_ITEMS)
    edits: list[EditOp] = Field(default_factory=list, max_length=MAX_EDITS)

    @field_validator("reason")
    @classmethod
    def _short_reason(cls, value: str) -> str:
        return redact(value)[:REASON_MAX] if len(value) > REASON_MAX else value  # redacted before the cut

    @field_validator("daily_entry", mode="before")
    @classmethod
    def _seed_string_entry(cls, value: Any) -> Any:
        # The seed's schema has `daily_entry` as a plain string; a model answering that way is right,
        # not in need of a repair round trip. The string is the body; its first line names the entry.
        if not isinstance(value, str):
            return value
        if not value.strip():
            return None
        return {"title": title_from(value), "body": value.strip()}

    @field_validator("memory_update", "profile_update", mode="before")
    @classmethod
    def _none_is_unchanged(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("structured", "edits", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value


@dataclass(frozen=True)
class TranscriptMessage:
    id: int
    conversation_id: str
    role: str
    content: str
    time: str  # "HH:MM" in the workspace timezone
    new: bool  # False = an earlier run already examined it (context only)


SYSTEM_PROMPT = """You keep the long-term memory of an AI assistant about the person it works with.
Keep: stable facts about the person (name, role, employer, location, timezone, tools, likes, dislikes,
preferences), corrections, decisions, projects, commitments, and anything they asked you to remember.
Skip: small talk, questions, hypotheticals, the assistant's own answers.
Rules:
- Only NEW messages are new; SEEN ones were handled before and are context only.
- Write in the person's own language. Never record secrets (passwords, keys, tokens, [REDACTED:...]).
- Change the files with small edits, never by rewriting them. Each edit is one of
  {"op": "add", "file": "PROFILE.md|MEMORY.md", "section": "<## heading>", "text": "<line>", "evidence": [<id>]}
  {"op": "update", "file": ..., "old": "<the current line, as above>", "text": "<new text>", "evidence": [<id>]}
  {"op": "remove", "file": ..., "old": "<the current line>", "evidence": [<id>]}
  evidence lists the ids (#N) of the NEW messages the edit comes from.
- PROFILE.md holds `key: value` lines under `## Profile`; MEMORY.md holds facts under `## <topic>` headings.
- A correction updates the old line; never keep both.
- daily_entry: what happened today, a title of at most 30 characters and a few bullet points, or null.
Answer with one JSON object only:
{"should_update": true or false, "reason": "<why, in a few words>", "edits": [...],
 "daily_entry": {"title": "<title>", "body": "<bullets>"} or null,
 "structured": [{"type": "user|feedback|project|reference", "key": "<short key>", "text": "<the entry>"}]}"""


def build_messages(
    *,
    agent: str,
    now: str,
    profile: str,
    memory: str,
    daily: str,
    transcript: list[TranscriptMessage],
    explicit: bool = False,
    retry_note: str = "",
) -> list[dict[str, str]]:
    """Chat messages for one extraction run. All texts must already be redacted and bounded."""
    parts: list[str] = [f"Agent: {agent}. Now: {now}."]
    if explicit:
        parts.append("The person explicitly asked to remember something: make sure it is recorded.")
    if retry_note:
        parts.append(retry_note)
    parts.append(block("PROFILE.md (current body)", profile))
    parts.append(block("MEMORY.md (current body)", memory))
    parts.append(block("Today's daily note (latest part)", daily))
    lines: list[str] = []
    conv = None
    for msg in transcript:
        if msg.conversation_id != conv:
            conv = msg.conversation_id
            lines.append(f"# conversation {conv}")
        mark = "NEW" if msg.new else "SEEN"
        lines.append(f"[{mark} #{msg.id} {msg.time} {msg.role}] {msg.content}")
    parts.append(block("Transcript", "\n".join(lines)))
    parts.append("Return the JSON object now.")
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "\n\n".join(parts)},
    ]
