"""The file search's Add/Search conversations, read from the message index (`messages.db`).

The file index keeps no copy of the turns AML Add logs (`index/files/storage.py`: each message is
in the log and in the message index, not a third time in `index.db`). A file search whose scope
holds the AML agent's conversations of an owner (owner isolation on: an owner's searches cover
their own conversations) takes those turns' candidates from the message index instead, the owner's
bucket there being the same isolation the file index's owner column was. The file search scores
them with its other candidates, as it scored the copies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mateclaw_mem.index.chunker import CONVERSATION
from mateclaw_mem.index.files.query import Candidate
from mateclaw_mem.index.files.storage import chunk_sha
from mateclaw_mem.index.messages.fields import FACT_BASE
from mateclaw_mem.index.tokenizer import tokenize

if TYPE_CHECKING:
    from mateclaw_mem.index.messages.index import Hit, MessageIndex
    from mateclaw_mem.index.sources import MessageSource


class AmlConversations:
    """Candidates of the AML agent's logged turns for the file search; the indexes reached lazily
    (building the search service must not open `messages.db`)."""

    def __init__(self, agent: str, messages: Callable[[], MessageIndex], log: Callable[[], MessageSource]) -> None:
        self.agent = agent
        self._messages = messages
        self._log = log

    def candidates(self, agent: str, owner: str | None, query: str, limit: int) -> list[Candidate]:
        """Up to `limit` of `owner`'s Add/Search turns matching `query` (none for another agent, or
        without an owner: Add always logs under the user's id)."""
        if agent != self.agent or not owner:
            return []
        index, log = self._messages(), self._log()
        index.catch_up(log)  # Adds its indexing thread has not reached yet, or another process logged
        # Facts (FACT_BASE and above) are the message index's own documents, never conversation turns.
        return [candidate(h) for h in index.search(agent, owner, query, limit=limit) if h.id < FACT_BASE]


def candidate(hit: Hit) -> Candidate:
    """A message-index hit as the file search's candidate of the same turn. Its id is the message's,
    negated: never a chunk's id, so dense fusion (chunk ids) and de-duplication keep them apart."""
    return Candidate(
        id=-hit.id, agent=hit.agent, owner=hit.owner, rel=f"conversations/{hit.conversation_id}", kind=CONVERSATION,
        title=f"{hit.role} message {hit.id}", line_start=0, line_end=0, text=hit.content,
        tokens=" ".join(tokenize(hit.content)), bm25=0.0, ts_ms=hit.ts_ms, conversation_id=hit.conversation_id,
        message_id=hit.id, sha=chunk_sha("", hit.content),
    )
