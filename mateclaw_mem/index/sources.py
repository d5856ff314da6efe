"""What the indexes read from the conversation log and the fact store, as protocols.

Protocols rather than imports: `index/` sits below `conversations/` in the layer order, and
`conversations.log.ConversationLog` / `StoredMessage` and `conversations.facts.FactStore` / `Fact`
fit them as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class _InConversation(Protocol):
    """What a logged message and a fact have alike: an id and where they belong."""

    @property
    def id(self) -> int: ...
    @property
    def agent(self) -> str: ...
    @property
    def owner(self) -> str | None: ...  # None (or the log's "") = no owner
    @property
    def conversation_id(self) -> str: ...


class LoggedMessage(_InConversation, Protocol):
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def ts_ms(self) -> int: ...
    @property
    def memoryless(self) -> bool: ...


class MessageSource(Protocol):
    def since(self, after_id: int, *, limit: int = 1000) -> Sequence[LoggedMessage]: ...


class StoredFact(_InConversation, Protocol):
    """A source-bound fact (`conversations.facts.Fact` fits)."""

    @property
    def text(self) -> str: ...
    @property
    def ts_ms(self) -> int: ...
    @property
    def source_ids(self) -> Sequence[int]: ...


class FactSource(Protocol):
    """What the index needs from the fact store (`conversations.facts.FactStore` fits)."""

    def facts_since(self, after_id: int, *, limit: int = 1000) -> Sequence[StoredFact]: ...
