"""Claude's data export: `conversations.json` (claude.ai → Settings → Privacy → Export data, 2024-2025).

A JSON array of conversations `{uuid, name, created_at, updated_at, chat_messages}`; each message is
`{uuid, sender: "human" | "assistant", text, content: [{type: "text", text}, …], created_at (ISO-8601),
attachments: [{file_name, extracted_content}], files: [{file_name}]}`. The export is linear (the
branch the person last saw), so the messages are imported in their order.

The text is the message's `text` blocks of `content` when it has any, else its `text` field (older
exports have only that); `thinking`, `tool_use` and `tool_result` blocks are left out. An attachment
is appended to its message as "[attachment: name]" and the text Claude extracted from it (up to
records.MAX_ATTACHMENT_CHARS); an uploaded file without extracted text (an image) as its name only.
"""

from __future__ import annotations

from typing import Any

from mateclaw_mem.conversations.imports.records import (
    Conversation,
    Message,
    Parsed,
    Where,
    attachment_text,
    bounded,
    conversation_id,
    iso_ms,
)

_ROLES = {"human": "user", "user": "user", "assistant": "assistant"}


def looks_like(record: Any) -> bool:
    return isinstance(record, dict) and isinstance(record.get("chat_messages"), list)


def parse(data: Any, parsed: Parsed, tz: Any) -> None:
    if not isinstance(data, list):
        raise Where(parsed.file).error("not a JSON array of conversations (Claude's conversations.json is one)")
    seen: dict[str, int] = {}
    for i, raw in enumerate(data, 1):
        where = Where(parsed.file, i, raw.get("uuid") if isinstance(raw, dict) else None)
        if not isinstance(raw, dict):
            raise where.error("not a JSON object")
        cid = conversation_id(where, "claude", raw.get("uuid"), "uuid")
        if cid in seen:
            raise where.error(f"same uuid as conversation {seen[cid]}")
        seen[cid] = i
        messages = raw.get("chat_messages")
        if not isinstance(messages, list):
            raise where.error("no chat_messages list")
        last_ms = iso_ms(raw.get("created_at"), tz)
        conv = Conversation(cid, position=i)
        for n, msg in enumerate(messages, 1):
            at = f"message {n}"
            if not isinstance(msg, dict):
                raise where.error(f"{at} is not a JSON object")
            sender = msg.get("sender")
            if not isinstance(sender, str) or not sender:
                raise where.error(f"{at} has no sender")
            created = msg.get("created_at")
            if created is not None and iso_ms(created, tz) is None:
                raise where.error(f"{at} has a created_at that is not an ISO-8601 time: {created!r}"[:300])
            ts = iso_ms(created, tz) if created is not None else last_ms
            if ts is None:
                raise where.error(f"{at} has no created_at, and neither has the conversation or a message before it")
            last_ms = ts
            role = _ROLES.get(sender)
            if role is None:
                parsed.skipped[sender] += 1
                continue
            text = "\n\n".join(t for t in [_text(msg, at, where), *_attachments(msg, at, where)] if t.strip())
            if not text.strip():
                parsed.skipped["empty"] += 1
                continue
            conv.messages.append(Message(role, bounded(text, parsed), ts))
        parsed.conversations.append(conv)


def _text(msg: dict[str, Any], at: str, where: Where) -> str:
    blocks = msg.get("content")
    if blocks is not None and not isinstance(blocks, list):
        raise where.error(f"{at} has content that is not a list of blocks")
    texts = [b["text"] for b in blocks or [] if isinstance(b, dict) and b.get("type") == "text"
             and isinstance(b.get("text"), str)]
    if texts:
        return "\n\n".join(texts)
    text = msg.get("text")
    if text is None:
        if blocks is None:
            raise where.error(f"{at} has neither text nor content")
        return ""
    if not isinstance(text, str):
        raise where.error(f"{at} has a text that is not a string")
    return text


def _attachments(msg: dict[str, Any], at: str, where: Where) -> list[str]:
    out: list[str] = []
    named: set[str] = set()  # a file in both lists (its text in `attachments`) is appended once
    for key in ("attachments", "files"):
        items = msg.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise where.error(f"{at} has {key} that is not a list")
        for k, item in enumerate(items, 1):
            if not isinstance(item, dict):
                raise where.error(f"{at}: {key} {k} is not a JSON object")
            name = item.get("file_name")
            extracted = item.get("extracted_content")
            if name is not None and not isinstance(name, str):
                raise where.error(f"{at}: {key} {k} has a file_name that is not a string")
            if extracted is not None and not isinstance(extracted, str):
                raise where.error(f"{at}: {key} {k} has an extracted_content that is not a string")
            if key == "files" and name and name in named:
                continue
            named.add(name or "")
            out.append(attachment_text(name or "", extracted or ""))
    return out
