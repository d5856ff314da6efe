"""Open WebUI's chat export: Settings → Chats → Export chats (`chat-export-<ms>.json`, 0.3-0.6).

A JSON array of the rows `GET /api/v1/chats/all` returns: `{id, title, chat, created_at, updated_at}`
(times in unix seconds), where `chat` holds `history: {messages: {<id>: {id, parentId, childrenIds,
role, content, timestamp}}, currentId}` and, in the same order, a flat `messages` list. Like
ChatGPT's, the history is a tree (an edited message or a regenerated answer is a sibling): the path
from `currentId` up to the root is the conversation the person last saw, and only it is imported.
A chat without `history` (older versions) is read from its `messages` list.

Kept: `user` and `assistant` messages with text; `system` (and any other role) is left out, counted.
A message's `timestamp` is unix seconds (milliseconds are recognised too).
"""

from __future__ import annotations

from typing import Any

from mateclaw_mem.conversations.imports.records import (
    Conversation,
    Message,
    Parsed,
    Where,
    bounded,
    conversation_id,
    epoch_ms,
)


def looks_like(record: Any) -> bool:
    chat = record.get("chat") if isinstance(record, dict) else None
    return isinstance(chat, dict) and ("history" in chat or "messages" in chat)


def parse(data: Any, parsed: Parsed) -> None:
    if not isinstance(data, list):
        raise Where(parsed.file).error("not a JSON array of chats (Open WebUI's export is one)")
    seen: dict[str, int] = {}
    for i, raw in enumerate(data, 1):
        where = Where(parsed.file, i, raw.get("id") if isinstance(raw, dict) else None)
        if not isinstance(raw, dict):
            raise where.error("not a JSON object")
        chat = raw.get("chat")
        if not isinstance(chat, dict):
            raise where.error("no chat object")
        cid = conversation_id(where, "openwebui", raw.get("id") or chat.get("id"), "id")
        if cid in seen:
            raise where.error(f"same id as chat {seen[cid]}")
        seen[cid] = i
        last_ms = epoch_ms(raw.get("created_at"))
        if last_ms is None:
            last_ms = epoch_ms(chat.get("timestamp"))
        conv = Conversation(cid, position=i)
        for at, msg in _branch(chat, where):
            kept, last_ms = _message(msg, at, where, last_ms, parsed)
            if kept is not None:
                conv.messages.append(kept)
        parsed.conversations.append(conv)


def _branch(chat: dict[str, Any], where: Where) -> list[tuple[str, Any]]:
    """(how to name it, message) for each message of the active branch, oldest first."""
    history = chat.get("history")
    if history is None or (isinstance(history, dict) and not history.get("messages")):
        messages = chat.get("messages")
        if messages is None:
            return []
        if not isinstance(messages, list):
            raise where.error("chat.messages is not a list")
        return [(f"message {n}", m) for n, m in enumerate(messages, 1)]
    if not isinstance(history, dict) or not isinstance(history.get("messages"), dict):
        raise where.error("chat.history has no messages map")
    nodes: dict[str, Any] = history["messages"]
    current = history.get("currentId")
    if current is None:  # the latest leaf: what the app shows when it has no current id
        leaves = [k for k, m in nodes.items() if isinstance(m, dict) and not m.get("childrenIds")]
        current = max(leaves, key=lambda k: (epoch_ms(nodes[k].get("timestamp")) or 0), default=None)
    if not isinstance(current, str) or current not in nodes:
        raise where.error(f"chat.history.currentId {current!r} is not a message of chat.history.messages")
    path: list[tuple[str, Any]] = []
    seen: set[str] = set()
    node_id: Any = current
    while node_id is not None:
        if not isinstance(node_id, str) or node_id not in nodes:
            raise where.error(f"message {path[-1][0]} has a parentId that is not a message: {node_id!r}")
        if node_id in seen:
            raise where.error(f"the parents of message {current} loop back to message {node_id}")
        seen.add(node_id)
        path.append((node_id, nodes[node_id]))
        node_id = nodes[node_id].get("parentId") if isinstance(nodes[node_id], dict) else None
    path.reverse()
    return [(f"message {n} (id {mid})", m) for n, (mid, m) in enumerate(path, 1)]


def _message(msg: Any, at: str, where: Where, last_ms: int | None, parsed: Parsed) -> tuple[Message | None, int | None]:
    if not isinstance(msg, dict):
        raise where.error(f"{at} is not a JSON object")
    role = msg.get("role")
    if not isinstance(role, str) or not role:
        raise where.error(f"{at} has no role")
    stamp = msg.get("timestamp")
    if stamp is not None and epoch_ms(stamp) is None:
        raise where.error(f"{at} has a timestamp that is not a unix time: {stamp!r}"[:300])
    ts = epoch_ms(stamp) if stamp is not None else last_ms
    if ts is None:
        raise where.error(f"{at} has no timestamp, and neither has the chat or a message before it")
    if role not in ("user", "assistant"):
        parsed.skipped[role] += 1
        return None, ts
    text = _content(msg.get("content"), at, where)
    if not text.strip():
        parsed.skipped["empty"] += 1
        return None, ts
    return Message(role, bounded(text, parsed), ts), ts


def _content(content: Any, at: str, where: Where) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI-style parts, as some versions store a message with images
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        images = sum(1 for p in content if isinstance(p, dict) and p.get("type") == "image_url")
        return "\n".join([*(t for t in texts if isinstance(t, str) and t.strip()), *["[image]"] * images])
    if content is None:
        return ""
    raise where.error(f"{at} has content that is neither text nor a list of parts")
