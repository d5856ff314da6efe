"""The MemoryProvider protocol and what a provider returns.

A provider answers "what do you know that bears on this query?" for one (agent, owner) with a few
short items, each naming where it came from. It runs on a worker thread of the registry; `deadline`
is a `time.monotonic()` value after which its answer is ignored (the registry abandons the call), so
a provider doing several steps may stop early, but it never has to check.

Optional parts, looked up by name: `sync_turn(agent, owner, messages)` hears every recorded chat turn
(it must not block: queue and return), `status()` adds the provider's own figures to `status`, and
`close()` runs at shutdown. A provider is built by a factory `build(context, options)` registered
as an entry point of group `mateclaw_mem.providers` (`plugins.py`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.messages.index import MessageIndex
    from mateclaw_mem.index.search import SearchService
    from mateclaw_mem.settings import Settings


@dataclass(frozen=True)
class ProviderItem:
    text: str  # one short passage, plain text (no search-highlight markup)
    source: str  # `file:line` for a memory file, `conversations/<id>` for a conversation
    score: float = 0.0  # the provider's own ranking; not comparable across providers

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "source": self.source, "score": self.score}


class MemoryProvider(Protocol):
    name: str  # unique in a registry; shown in reports and `status`

    def prefetch(self, agent: str, owner: str | None, query: str, *, deadline: float) -> list[ProviderItem]:
        ...


@dataclass(frozen=True)
class ProviderContext:
    """What a provider factory may use. `search` is reached lazily: building a provider (e.g. for
    `status`) must not open the index."""

    settings: Settings
    clock: Clock
    search: Callable[[], SearchService]
    messages: Callable[[], MessageIndex] | None = None  # the message index (Add/Search's ranking)
    log: Callable[[], ConversationLog] | None = None


_HIGHLIGHT = re.compile(r"\[\[|\]\]")
_HEADING = re.compile(r"^#{1,6}\s+")


def snippet_text(snippet: str) -> str:
    """A search snippet as prompt text: highlight brackets removed, a leading `## ` dropped (a
    heading marker inside a one-line item would read as Markdown structure)."""
    return _HEADING.sub("", _HIGHLIGHT.sub("", snippet).strip())
