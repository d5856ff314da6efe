"""Chat roles as strict chat templates accept them.

Gemma's official template (and LM Studio / llama-server with built-in templates) raise "Conversation
roles must alternate user/assistant/user/assistant/..." when two messages of one role are adjacent, and
some templates drop or reject a system message. `normalise_roles` is the one pure function that makes
any prompt safe for them; the model client applies it to every request, and context assembly may call
it to show exactly what will be sent.

    normalise_roles([{"role": "system", ...}, {"role": "user", ...}, {"role": "user", ...}], fold_system=False)
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

SEPARATOR = "\n\n"


def normalise_roles(messages: list[dict[str, Any]], *, fold_system: bool = False) -> list[dict[str, Any]]:
    """A copy of `messages` in which no two adjacent messages share a role.

    Adjacent same-role messages are merged, in order, their contents joined with a blank line.
    `fold_system=True` (setting `model.system-prompt: fold`) sends no system message at all: the leading
    system text is prepended to the first user message (or becomes the first user message when the
    conversation opens with the assistant), and a later system message is sent as user text."""
    out: list[dict[str, Any]] = []
    pending_system: list[Any] = []
    for msg in messages:
        role = str(msg.get("role") or "user")
        if fold_system and role == "system":
            if not out:
                pending_system.append(msg.get("content"))
                continue
            role = "user"  # a system note mid-conversation: the person's side is the only place for it
        item = {**msg, "role": role}
        if pending_system and role == "user":
            item["content"] = _join([*pending_system, msg.get("content")])
            pending_system = []
        elif pending_system:
            out.append({"role": "user", "content": _join(pending_system)})
            pending_system = []
        if out and out[-1]["role"] == role:
            out[-1] = {**out[-1], "content": _join([out[-1].get("content"), item.get("content")])}
        else:
            out.append(item)
    if pending_system:
        out.append({"role": "user", "content": _join(pending_system)})
    return out


def roles_alternate(messages: list[dict[str, Any]]) -> bool:
    """True when no two adjacent messages share a role (what strict templates check)."""
    roles = [m.get("role") for m in messages]
    return all(a != b for a, b in pairwise(roles))


def _join(contents: list[Any]) -> Any:
    """Join message contents; content-part lists (images, ...) stay lists so no part is lost."""
    present = [c for c in contents if c not in (None, "", [])]
    if not present:
        return ""
    if all(isinstance(c, str) for c in present):
        return SEPARATOR.join(present)
    parts: list[Any] = []
    for c in present:
        if parts:
            parts.append({"type": "text", "text": SEPARATOR})
        parts.extend(c if isinstance(c, list) else [{"type": "text", "text": str(c)}])
    return parts
