"""What a parsed export is, the limits on it, and the error that names the file and the record.

Every parser turns its format into `Conversation`s of `Message`s with the roles and times kept as
the log stores them: role "user" or "assistant", `ts_ms` unix milliseconds of when it was said. What
a parser leaves out (system and tool messages, hidden ones, empty ones) is counted in `Parsed.skipped`
so the summary can say so; nothing is dropped silently.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mateclaw_mem.errors import InvalidInputError

# The largest file (or upload, or zip member) an import reads. The JSON formats are parsed whole,
# since every record is checked before the first row is written, and CPython holds a parsed JSON
# document in about 5-8 times its size: 256 MiB is ~1.5 GiB at the peak, which a desktop has. A
# larger export can be split (e.g. `jq -c '.[]'` into JSONL, or by year) and imported in parts.
MAX_IMPORT_BYTES = 256 * 1024 * 1024
# One message's text is cut beyond this (the turn API's own limit): a pasted book is not a memory,
# and the extraction input cuts each message at 2,000 characters anyway.
MAX_MESSAGE_CHARS = 200_000
# The text an export extracted from an attachment (Claude's `extracted_content`) is kept up to this,
# appended to its message, so what the person shared is searchable and extraction can see it.
MAX_ATTACHMENT_CHARS = 20_000
# The conversation log's ids are also URL path segments (`…/conversations/{id}/turns`: max 200).
MAX_ID_CHARS = 200
FORMATS = ("chatgpt", "claude", "openwebui", "jsonl")
KEPT_ROLES = ("user", "assistant")


class MalformedExport(InvalidInputError):
    """An export that cannot be read as its format: the message names the file and the record."""


@dataclass(frozen=True)
class Message:
    role: str  # "user" | "assistant"
    content: str
    ts_ms: int


@dataclass
class Conversation:
    id: str  # prefixed with its source: "chatgpt:<id>", "claude:<uuid>", "openwebui:<id>", "jsonl:<name>"
    messages: list[Message] = field(default_factory=list)
    position: int = 0  # where it was in the file (ties of the date order keep the file's order)

    @property
    def first_ms(self) -> int:
        return min(m.ts_ms for m in self.messages)

    @property
    def last_ms(self) -> int:
        return max(m.ts_ms for m in self.messages)


@dataclass
class Parsed:
    """One export, checked: its conversations in date order (oldest first) and what was left out."""

    file: str  # the name errors and summaries use (the file's name, or the upload's)
    format: str
    conversations: list[Conversation] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # messages left out, by reason
    skipped_conversations: Counter[str] = field(default_factory=Counter)
    cut: int = 0  # messages cut at MAX_MESSAGE_CHARS

    @property
    def message_count(self) -> int:
        return sum(len(c.messages) for c in self.conversations)

    def finish(self) -> Parsed:
        """Conversations without a kept message are left out (and counted); the rest in date order."""
        kept = []
        for conv in self.conversations:
            if conv.messages:
                kept.append(conv)
            else:
                self.skipped_conversations["no user or assistant message"] += 1
        self.conversations = sorted(kept, key=lambda c: (c.first_ms, c.position))
        return self


class Where:
    """Names a record in error messages: "conversations.json: conversation 3 (id abc): message 5 …".
    Conversations and messages are counted from 1, as a person counts them in the file."""

    def __init__(self, file: str, conversation: int | None = None, conv_id: Any = None) -> None:
        self.file = file
        self.conversation = conversation
        self.conv_id = conv_id

    def __str__(self) -> str:
        if self.conversation is None:
            return self.file
        named = f" (id {self.conv_id})" if isinstance(self.conv_id, str | int) and self.conv_id != "" else ""
        return f"{self.file}: conversation {self.conversation}{named}"

    def error(self, problem: str) -> MalformedExport:
        return MalformedExport(f"{self}: {problem}")


def conversation_id(where: Where, prefix: str, raw: Any, what: str) -> str:
    """`prefix:raw`, checked: a non-empty string (or an integer) that fits a log id."""
    if isinstance(raw, bool) or not isinstance(raw, str | int) or str(raw).strip() == "":
        raise where.error(f"no {what} (want a non-empty string)")
    full = f"{prefix}:{str(raw).strip()}"
    if len(full) > MAX_ID_CHARS:
        raise where.error(f"{what} is {len(str(raw))} characters long; the limit is {MAX_ID_CHARS - len(prefix) - 1}")
    return full


def epoch_ms(value: Any) -> int | None:
    """Unix time in seconds (ChatGPT's floats, Open WebUI's integers) or milliseconds, as ms. A number
    below 1e11 is read as seconds: as milliseconds it would be March 1973, as seconds year 5138."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:  # NaN
        return None
    ms = value * 1000 if abs(value) < 1e11 else value
    if not 0 <= ms <= 253_402_300_799_999:  # up to the last millisecond of year 9999, as the log takes
        return None
    return round(ms)


def iso_ms(value: Any, tz: Any) -> int | None:
    """An ISO-8601 time (Claude's `2024-05-01T09:30:00.123456Z`) as unix ms; a naive one is in `tz`."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):  # Python 3.11 reads Z, but be explicit for the odd lower-case one
        text = text[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=tz)
    return epoch_ms(when.timestamp())


def bounded(text: str, parsed: Parsed) -> str:
    """`text` cut at MAX_MESSAGE_CHARS, with a note of how much was cut (counted in `parsed.cut`)."""
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    parsed.cut += 1
    return text[:MAX_MESSAGE_CHARS] + f"\n[… {len(text) - MAX_MESSAGE_CHARS} more characters cut by the import]"


def attachment_text(name: str, extracted: str) -> str:
    """An attachment as text appended to its message (its extracted text up to MAX_ATTACHMENT_CHARS)."""
    label = f"[attachment: {name}]" if name else "[attachment]"
    extracted = extracted.strip()
    if not extracted:
        return label
    if len(extracted) > MAX_ATTACHMENT_CHARS:
        extracted = extracted[:MAX_ATTACHMENT_CHARS] + f"\n[… {len(extracted) - MAX_ATTACHMENT_CHARS} more characters]"
    return f"{label}\n{extracted}"
