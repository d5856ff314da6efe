"""Plain JSONL: one message a line, `{"role", "content", "timestamp", "conversation"}` (our own format).

For history from anywhere else: a script turns it into these lines. All four keys are required, and
checked strictly, since this format is ours to define: `role` is user or assistant (system, tool,
function and developer lines are left out, counted; any other role is an error), `content` a string
(or a list of `{"type": "text", "text"}` parts), `timestamp` unix seconds or milliseconds or an
ISO-8601 string (a naive one in the workspace's time zone), `conversation` the id the messages share.
Blank lines are ignored. A JSON array of the same objects is read the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from mateclaw_mem.conversations.imports.records import (
    Conversation,
    Message,
    Parsed,
    Where,
    bounded,
    conversation_id,
    epoch_ms,
    iso_ms,
)

_SKIPPED_ROLES = ("system", "tool", "function", "developer")


def looks_like(record: Any) -> bool:
    return isinstance(record, dict) and "role" in record and "content" in record


def parse_lines(lines: Iterable[bytes | str], parsed: Parsed, tz: Any) -> None:
    def records() -> Iterable[tuple[str, Any]]:
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                yield f"line {n}", json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise Where(parsed.file).error(f"line {n} is not valid JSON ({exc})") from None

    _parse(records(), parsed, tz)


def parse_array(data: Any, parsed: Parsed, tz: Any) -> None:
    if not isinstance(data, list):
        raise Where(parsed.file).error("neither JSON lines nor a JSON array of messages")
    _parse(((f"message {n}", r) for n, r in enumerate(data, 1)), parsed, tz)


def _parse(records: Iterable[tuple[str, Any]], parsed: Parsed, tz: Any) -> None:
    where = Where(parsed.file)
    by_id: dict[str, Conversation] = {}
    for at, rec in records:
        if not isinstance(rec, dict):
            raise where.error(f"{at} is not a JSON object")
        role = rec.get("role")
        if role in _SKIPPED_ROLES:
            parsed.skipped[role] += 1
            continue
        if role not in ("user", "assistant"):
            raise where.error(f"{at} has role {role!r}; want user or assistant (system and tool lines are skipped)")
        content = _content(rec.get("content"), at, where)
        stamp = rec.get("timestamp")
        ts = iso_ms(stamp, tz) if isinstance(stamp, str) else epoch_ms(stamp)
        if ts is None:
            what = "no timestamp" if stamp is None else f"a timestamp that is not a time: {stamp!r}"
            raise where.error(f"{at} has {what} (unix seconds or ms, or ISO-8601)"[:300])
        cid = conversation_id(Where(f"{parsed.file}: {at}"), "jsonl", rec.get("conversation"), "conversation")
        conv = by_id.get(cid)
        if conv is None:
            conv = by_id[cid] = Conversation(cid, position=len(by_id))
            parsed.conversations.append(conv)
        if not content.strip():
            parsed.skipped["empty"] += 1
            continue
        conv.messages.append(Message(role, bounded(content, parsed), ts))


def _content(content: Any, at: str, where: Where) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "\n".join(p["text"] for p in content if p.get("type") == "text" and isinstance(p.get("text"), str))
    what = "no content" if content is None else "content that is neither a string nor a list of parts"
    raise where.error(f"{at} has {what}")
