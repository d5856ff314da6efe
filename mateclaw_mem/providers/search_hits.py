"""Keyword hits in the agent's memory files (MEMORY.md, daily notes, structured entries, archives).

These are real retrievals: the query is the person's own message, so each hit is recorded in the
retrieval log (`record=True`) and counts as evidence when Dreaming scores the daily notes.
DREAMS.md hits are left out of the prompt, and so are its archived months (`memory/dreams/`, and
the diary's pages inside a month archive): the diary is about consolidation runs (scores, what was
promoted), not about the person, and what it promoted is in MEMORY.md already. Measured on a LoCoMo
replay, archived diary text was 21-23 % of all recalled characters before it was left out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mateclaw_mem.providers.base import ProviderContext, ProviderItem, snippet_text
from mateclaw_mem.providers.plugins import limit_option

if TYPE_CHECKING:
    from mateclaw_mem.index.search import SearchService


# A structured entry's bookkeeping line (`> Source: … | Updated: …`): noise in a prompt, and without
# it the entry's text matches the structured block that may already carry it (deduplication).
_ENTRY_META = re.compile(r"\s*> Source:.*$")
DIARY_ARCHIVE = "memory/dreams/"
_LEDGER = re.compile(r"^(?:#+\s*)?(?:\d{1,2}:\d{2}\s+)?(?:Said: |说起：)")


def _diary(file: str, title: str) -> bool:
    """A hit in the dream diary's archive: its own month file, or its page inside a month archive
    (whose chunks are titled with the member's path)."""
    return file.startswith(DIARY_ARCHIVE) or title.startswith(DIARY_ARCHIVE)


def _ledger(kind: str, title: str) -> bool:
    """A hit in a daily note's ledger of what the person said in a chat (`## 13:15 Said: …`,
    memory/extraction/rules_apply.py): their sentences, copied from the logged messages."""
    return kind == "daily" and _LEDGER.match(title) is not None


class SearchHitsProvider:
    name = "search_hits"

    def __init__(self, search: Callable[[], SearchService], *, limit: int = 8, ledger: bool = True) -> None:
        # Reached lazily: building the registry (e.g. for `status`) must not open the index.
        self._search = search
        self.limit = limit
        # False when conversation_hits runs too: it recalls the messages a ledger line was copied
        # from, dated and with the speaker, and a ledger line would only take a slot from another
        # message. LoCoMo dev replay (prompt_quality.py), evidence half a / half b: 0.916 / 0.942
        # with the ledger, 0.921 / 0.950 without (the same as with no search_hits at all there).
        self.ledger = ledger

    def prefetch(self, agent: str, owner: str | None, query: str, *, deadline: float) -> list[ProviderItem]:
        # Without the ledger, ask for more: its hits must not leave the provider short of its limit.
        result = self._search().search(query, agent=agent, owner=owner, scope="memory",
                                       limit=self.limit * (1 if self.ledger else 2), record=True)
        items: list[ProviderItem] = []
        for h in result.hits:
            if len(items) >= self.limit:
                break
            if h.kind == "dreams" or (h.kind == "archive" and _diary(h.file, h.title)):
                continue
            if not self.ledger and _ledger(h.kind, h.title):
                continue
            text = snippet_text(h.snippet)
            if h.kind == "structured":
                text = _ENTRY_META.sub("", text)
            items.append(ProviderItem(text, f"{h.file}:{h.line}", h.score))
        return items


def build(context: ProviderContext, options: dict[str, Any]) -> SearchHitsProvider:
    """The `search_hits` entry point."""
    names = {p if isinstance(p, str) else str(p.get("name")) for p in context.settings.mate.memory.providers}
    return SearchHitsProvider(context.search, limit=limit_option("search_hits", options, 8),
                              ledger="conversation_hits" not in names)
