"""The per-turn memory block of owner isolation (`lifecycle-mediator-enabled`), as the seed splits a
prompt: the system message holds TEAM and GLOBAL memory only, so it is byte-identical for every owner
of an agent (and from turn to turn) and a provider's prompt cache keeps it; what is the owner's or
depends on the turn — their PERSONAL files and structured entries, the entries relevant to the query,
facts, recalled memory, the morning-card pointer — is prefetched for each turn into this block.

Where it goes: at the head of the current user message, not in a second system message. Strict chat
templates accept one system message and only first; a user message of its own would put two user
messages side by side; and at the end of the prompt it leaves the longest prefix (system + history)
unchanged, which is the part a cache can reuse.

Its PERSONAL part is bounded by `personal_max_chars`: files in `sort_order` then the structured block,
whole or not at all, and a marker naming what was left out (always-on memory is never silently cut).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mateclaw_mem.memory.structured.entries import StructuredBlock

TITLE = "=== MEMORY FOR THIS TURN ==="
END = "=== END OF MEMORY FOR THIS TURN ==="
PERSONAL_TITLE = "--- PERSONAL MEMORY ---"


@dataclass
class TurnBlock:
    parts: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # PERSONAL pieces over the budget, by name
    max_chars: int = 0
    structured: StructuredBlock | None = None  # the owner's structured block, when it is in the block
    _personal: list[str] = field(default_factory=list)

    def add_personal(self, name: str, text: str) -> bool:
        """Add one whole piece of the owner's memory if it fits the budget; False (and noted) if not."""
        used = sum(len(p) + 2 for p in self._personal)
        if self.max_chars > 0 and used + len(text) + 2 > self.max_chars:
            self.left_out.append(name)
            return False
        self._personal.append(text)
        return True

    def add(self, text: str) -> None:
        if text:
            self.parts.append(text)

    @property
    def text(self) -> str:
        personal = list(self._personal)
        if self.left_out:
            personal.append(f"[note: left out to keep personal memory within {self.max_chars} chars: "
                            f"{', '.join(self.left_out)}]")
        body = ([PERSONAL_TITLE, *personal] if personal else []) + self.parts
        return "\n\n".join([TITLE, *body, END]) if body else ""

    def as_dict(self) -> dict[str, Any]:
        return {"chars": len(self.text), "budget": self.max_chars or None, "left_out": self.left_out}


def with_turn_block(current: dict[str, Any] | None, block: str) -> dict[str, Any] | None:
    """The current user message with the block at its head (a message of its own when there is none)."""
    if not block:
        return current
    if current is None:
        return {"role": "user", "content": block}
    content = current.get("content")
    if isinstance(content, list):  # multimodal parts: the block is a text part of its own, first
        return {**current, "content": [{"type": "text", "text": block}, *content]}
    return {**current, "content": f"{block}\n\n{content}" if content else block}
