"""Messages from earlier conversations that match the query (the conversation log's index).

Memoryless conversations are never indexed, so they never come back here. Conversation hits are
not recorded as retrievals: Dreaming scores memory sections, not messages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mateclaw_mem.providers.base import ProviderContext, ProviderItem, snippet_text
from mateclaw_mem.providers.plugins import limit_option

if TYPE_CHECKING:
    from mateclaw_mem.index.search import SearchService


class ConversationHitsProvider:
    name = "conversation_hits"

    def __init__(self, search: Callable[[], SearchService], *, limit: int = 5) -> None:
        self._search = search
        self.limit = limit

    def prefetch(self, agent: str, owner: str | None, query: str, *, deadline: float) -> list[ProviderItem]:
        result = self._search().search(query, agent=agent, owner=owner, scope="conversations", limit=self.limit,
                                       record=False)
        return [ProviderItem(snippet_text(h.snippet), h.file, h.score) for h in result.hits]


def build(context: ProviderContext, options: dict[str, Any]) -> ConversationHitsProvider:
    """The `conversation_hits` entry point."""
    return ConversationHitsProvider(context.search, limit=limit_option("conversation_hits", options, 5))
