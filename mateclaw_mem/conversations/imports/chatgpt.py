"""ChatGPT's data export: `conversations.json` (Settings → Data controls → Export data, 2023-2025).

A JSON array of conversations: `id` / `conversation_id`, `title`, `create_time` (unix seconds, a
float), `current_node`, and `mapping`, a tree of nodes `{id, message, parent, children}` where a
`message` is `{author: {role}, content: {content_type, parts}, create_time, recipient, metadata}`.
Editing a message or regenerating an answer adds a sibling branch; the conversation the person last
saw is the path from `current_node` up to the root, and only that path is imported (the other
branches are counted as skipped). An export without `current_node` (older ones) follows the most
recent leaf.

Kept: `user` and `assistant` messages of content type `text` or `multimodal_text` (image parts
become "[image]", a voice message's transcription its text). Left out, counted: `system` and `tool`
messages, an assistant's calls to a tool (`recipient` other than "all"), messages the app hides
(`metadata.is_visually_hidden_from_conversation`: custom instructions, context), other content types
(code sent to a tool, reasoning `thoughts`), empty ones, and conversations marked
`is_do_not_remember` (the person asked ChatGPT not to remember them).
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

_TEXT_TYPES = ("text", "multimodal_text")


def looks_like(record: Any) -> bool:
    return isinstance(record, dict) and isinstance(record.get("mapping"), dict)


def parse(data: Any, parsed: Parsed) -> None:
    if not isinstance(data, list):
        raise Where(parsed.file).error("not a JSON array of conversations (ChatGPT's conversations.json is one)")
    seen: dict[str, int] = {}
    for i, raw in enumerate(data, 1):
        where = Where(parsed.file, i, raw.get("conversation_id") or raw.get("id") if isinstance(raw, dict) else None)
        if not isinstance(raw, dict):
            raise where.error("not a JSON object")
        cid = conversation_id(where, "chatgpt", raw.get("conversation_id") or raw.get("id"), "id")
        if cid in seen:
            raise where.error(f"same id as conversation {seen[cid]}")
        seen[cid] = i
        mapping = raw.get("mapping")
        if not isinstance(mapping, dict):
            raise where.error("no mapping (the tree of its messages)")
        if raw.get("is_do_not_remember") is True:
            parsed.skipped_conversations["marked do-not-remember in ChatGPT"] += 1
            continue
        conv = Conversation(cid, position=i)
        last_ms = epoch_ms(raw.get("create_time"))
        branch = _active_branch(mapping, raw.get("current_node"), where)
        on_branch = 0
        for node_id, node in branch:
            msg = node.get("message")
            if msg is None:
                continue  # the root (and the odd empty node)
            on_branch += 1
            at = f"message {on_branch} (node {node_id})"
            kept, last_ms = _message(msg, at, where, last_ms, parsed)
            if kept is not None:
                conv.messages.append(kept)
        off_branch = sum(1 for n in mapping.values() if isinstance(n, dict) and n.get("message")) - on_branch
        if off_branch > 0:
            parsed.skipped["on an edited or regenerated branch"] += off_branch
        parsed.conversations.append(conv)


def _active_branch(mapping: dict[str, Any], current: Any, where: Where) -> list[tuple[str, dict[str, Any]]]:
    """The nodes from the root to `current` (the message the person last saw), in order."""
    if current is None:
        current = _latest_leaf(mapping, where)
    if not isinstance(current, str) or current not in mapping:
        raise where.error(f"current_node {current!r} is not a node of its mapping")
    path: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    node_id: Any = current
    while node_id is not None:
        if not isinstance(node_id, str):
            raise where.error(f"node {path[-1][0]} has a parent that is not a node id: {node_id!r}")
        if node_id in seen:
            raise where.error(f"the parents of node {current} loop back to node {node_id}")
        node = mapping.get(node_id)
        if not isinstance(node, dict):
            child = f" (the parent of node {path[-1][0]})" if path else ""
            raise where.error(f"node {node_id}{child} is missing from its mapping")
        seen.add(node_id)
        path.append((node_id, node))
        node_id = node.get("parent")
    path.reverse()
    return path


def _latest_leaf(mapping: dict[str, Any], where: Where) -> str:
    leaves = [(k, n) for k, n in mapping.items() if isinstance(n, dict) and not n.get("children")]
    if not leaves:
        raise where.error("no current_node, and no leaf in its mapping")

    def created(item: tuple[str, dict[str, Any]]) -> float:
        msg = item[1].get("message")
        when = msg.get("create_time") if isinstance(msg, dict) else None
        return when if isinstance(when, int | float) and not isinstance(when, bool) else float("-inf")

    return max(enumerate(leaves), key=lambda e: (created(e[1]), e[0]))[1][0]


def _message(msg: Any, at: str, where: Where, last_ms: int | None, parsed: Parsed) -> tuple[Message | None, int | None]:
    """The message to keep (or None, counted in `parsed.skipped`) and the time the next one inherits."""
    if not isinstance(msg, dict):
        raise where.error(f"{at} is not a JSON object")
    author = msg.get("author")
    role = author.get("role") if isinstance(author, dict) else None
    if not isinstance(role, str) or not role:
        raise where.error(f"{at} has no author.role")
    raw_content = msg.get("content")
    content: dict[str, Any] = raw_content if isinstance(raw_content, dict) else {}
    kind = content.get("content_type")
    if not isinstance(kind, str):
        raise where.error(f"{at} has no content.content_type")
    created = msg.get("create_time")
    if created is not None and epoch_ms(created) is None:
        raise where.error(f"{at} has a create_time that is not a unix time: {created!r}")
    ts = epoch_ms(created) if created is not None else last_ms
    if ts is None:
        raise where.error(f"{at} has no create_time, and neither has the conversation or a message before it")
    raw_meta = msg.get("metadata")
    metadata: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    if role not in ("user", "assistant"):
        parsed.skipped[role] += 1
    elif metadata.get("is_visually_hidden_from_conversation"):
        parsed.skipped["hidden by ChatGPT (instructions, context)"] += 1
    elif role == "assistant" and msg.get("recipient") not in (None, "all"):
        parsed.skipped["tool"] += 1  # the assistant calling a tool (code, browsing), not talking to the person
    elif kind not in _TEXT_TYPES:
        parsed.skipped[f"content type {kind}"] += 1
    else:
        text = _text(content.get("parts"), at, where)
        if not text.strip():
            parsed.skipped["empty"] += 1
        else:
            return Message(role, bounded(text, parsed), ts), ts
    return None, ts


def _text(parts: Any, at: str, where: Where) -> str:
    if not isinstance(parts, list):
        raise where.error(f"{at} has content.parts that is not a list")
    out: list[str] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict):
            if isinstance(part.get("text"), str):  # a voice message's transcription
                out.append(part["text"])
            elif part.get("content_type") == "image_asset_pointer":
                out.append("[image]")
            else:
                out.append(f"[{part.get('content_type') or 'attachment'}]")
        elif part is not None:
            raise where.error(f"{at} has a content part that is neither text nor an object: {part!r}"[:300])
    return "\n".join(p for p in out if p.strip())
