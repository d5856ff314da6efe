"""Turns of earlier conversations that bear on the query, ranked by the message index.

The same ranking as Add/Search (`index/messages/`: BM25F over each message with its neighbours,
speaker, question/answer and temporal boosts) — it finds the answer's turn far more often than the
file index's conversation scope did (LoCoMo dev Hit@1 0.546 vs 0.384), so the prompt's recall uses
it. Each item is one whole message (a window around the query's words when the message is long),
with the day it was said and who said it, and the relative dates in it resolved against that day:
"[Mon 8 May 2023] user: I went to the support group yesterday (7 May 2023)". Without the date, a
"when" question cannot be answered from the prompt at all.

Memoryless conversations are never recalled (the index leaves them out, and a hit from an index
built before that is dropped here). Conversation hits are not recorded as retrievals: Dreaming
scores memory sections, not messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from mateclaw_mem.markdown.dates import dated_label, resolve_relative
from mateclaw_mem.providers.base import ProviderContext, ProviderItem
from mateclaw_mem.providers.plugins import limit_option

if TYPE_CHECKING:
    from datetime import tzinfo

    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.messages.index import Hit, MessageIndex

# A message longer than this is recalled as a window of about this size around the query's words.
WINDOW_CHARS = 320
_WORD = re.compile(r"\w+")


class ConversationHitsProvider:
    name = "conversation_hits"

    def __init__(self, messages: Callable[[], MessageIndex], log: Callable[[], ConversationLog], tz: tzinfo,
                 *, limit: int = 60) -> None:
        # Reached lazily: building the registry (e.g. for `status`) must not open the indexes.
        self._messages = messages
        self._log = log
        self.tz = tz
        self.limit = limit

    def prefetch(self, agent: str, owner: str | None, query: str, *, deadline: float) -> list[ProviderItem]:
        index, log = self._messages(), self._log()
        index.catch_up(log)  # turns logged since, an Add's its indexing thread has not reached among them
        hits = index.search(agent, owner, query, limit=self.limit)
        memoryless = log.memoryless_among(agent, owner, (h.conversation_id for h in hits))
        return [ProviderItem(render(h, query, self.tz), f"conversations/{h.conversation_id}", h.score)
                for h in hits if h.conversation_id not in memoryless]


def render(hit: Hit, query: str, tz: tzinfo) -> str:
    """"[Mon 8 May 2023] user: text"."""
    if len(hit.content) <= WINDOW_CHARS:  # no window: the same line whatever the query
        return _line(hit.content, hit.role, hit.ts_ms, tz)
    text = window(" ".join(hit.content.split()), query, WINDOW_CHARS)
    return _line(text, hit.role, hit.ts_ms, tz)


# Cached: a prompt renders up to `limit` messages, most of them recalled again by the next prompts,
# and resolving dates (two regex passes) was a third of the provider's time.
@lru_cache(maxsize=4096)
def _line(content: str, role: str, ts_ms: int, tz: tzinfo) -> str:
    said = datetime.fromtimestamp(ts_ms / 1000, tz=tz).date()
    text = resolve_relative(" ".join(content.split()), said)
    # Always the role: a name the text starts with may be one ("Caroline: …", an imported group
    # chat) or not ("Done: booked"), and only the role is known to be true.
    return f"[{dated_label(said)}] {role}: {text}"


def window(text: str, query: str, size: int) -> str:
    """The `size`-char stretch of `text` holding the most of the query's words, cut at word edges."""
    terms = {w.lower() for w in _WORD.findall(query) if len(w) > 2}
    starts = [m.start() for m in _WORD.finditer(text) if m.group().lower() in terms] or [0]
    best, best_n = 0, -1
    for s in starts:
        lo = max(0, s - size // 4)
        n = sum(1 for t in starts if lo <= t < lo + size)
        if n > best_n:
            best, best_n = lo, n
    lo = best
    hi = min(len(text), lo + size)
    if hi == len(text):
        lo = max(0, hi - size)
    if lo > 0:
        lo = text.find(" ", lo) + 1 or lo
    if hi < len(text):
        hi = text.rfind(" ", lo, hi) if text.rfind(" ", lo, hi) > lo else hi
    return ("…" if lo > 0 else "") + text[lo:hi].strip() + ("…" if hi < len(text) else "")


def build(context: ProviderContext, options: dict[str, Any]) -> ConversationHitsProvider:
    """The `conversation_hits` entry point."""
    if context.messages is None or context.log is None:
        from mateclaw_mem.errors import ConfigError

        raise ConfigError("conversation_hits needs the message index and the conversation log")
    return ConversationHitsProvider(context.messages, context.log, context.clock.tz,
                                    limit=limit_option("conversation_hits", options, 60))
