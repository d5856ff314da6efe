"""What the indexes read from the conversation log and the fact store, as protocols.

Protocols rather than imports: `index/` sits below `conversations/` in the layer order, and
`conversations.log.ConversationLog` / `StoredMessage` and `conversations.facts.FactStore` / `Fact`
fit them as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

# The `trigger_source` of a message logged by AML Add (`conversations.aml`). The message index
# (messages.db) holds those turns for Add/Search; the file index keeps no copy of them
# (`index/files/storage.py`), and the file search reads them from the message index
# (`index/message_hits.py`).
AML_TRIGGER = "aml"


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


class SourcedMessage(LoggedMessage, Protocol):
    """A logged message with what logged it (`chat`, `import`, `AML_TRIGGER`...): the file index
    leaves Add/Search turns to the message index."""

    @property
    def trigger_source(self) -> str: ...


class SourcedLog(Protocol):
    """The log as the file index reads it (`conversations.log.ConversationLog` fits)."""

    def since(self, after_id: int, *, limit: int = 1000) -> Sequence[SourcedMessage]: ...

    def since_kept(self, after_id: int, *, skip_source: str,
                   limit: int = 1000) -> tuple[Sequence[SourcedMessage], int]:
        """`since` without the messages `skip_source` logged, and the id the log was read up to."""
        ...


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
