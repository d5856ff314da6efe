"""Agent Memory Leaderboard Add/Search: raw messages in, single stored messages out.

Mapping onto the daemon: the AML `user_id` is the log's `owner` (one isolation mechanism for
everything), every AML message lives under one agent (`AML_AGENT` unless configured), and the
`session_id` is the conversation id. Add is idempotent per `request_id`; Search returns stored
messages only, each prefixed with its date and speaker so an answer model can reason about time.

No web framework here: faces validate shapes with pydantic and call `add` / `search`; the rules
below (non-empty ids, limits, idempotency) hold for any face.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING

from mateclaw_mem.clock import Clock
from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.index.messages.index import Hit, MessageIndex
from mateclaw_mem.index.messages.storage import FACT_BASE
from mateclaw_mem.index.tokenizer import MAX_QUERY_CHARS

if TYPE_CHECKING:
    from mateclaw_mem.conversations.facts import FactExtractor

AML_AGENT = "aml"
MAX_MESSAGES = 1000  # the platform sends at most 20; refuse only the absurd
MAX_CONTENT_CHARS = 2_000_000
MAX_ID_CHARS = 1024
MAX_TOP_K = 1000
_WEEKDAY_ABBR = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


class TooLargeError(InvalidInputError):
    """A body beyond any sane chunk (HTTP 413)."""

    code = "too_large"


@dataclass(frozen=True)
class AmlMessage:
    role: str
    content: str
    timestamp: int | None = None  # unix ms


@dataclass(frozen=True)
class AmlItem:
    id: str
    content: str
    score: float
    created_at: str


def _require_id(name: str, value: str) -> None:
    if not value.strip():
        raise InvalidInputError(f"{name} must be a non-empty string")
    if len(value) > MAX_ID_CHARS:
        raise InvalidInputError(f"{name} is longer than {MAX_ID_CHARS} characters")


def _body_hash(user_id: str, session_id: str, messages: list[AmlMessage]) -> str:
    # Canonical JSON of the parsed body: a retry that re-serialises differently (key order,
    # whitespace) is still the same request; any change in ids, text, role or time is not.
    canon = json.dumps(
        {
            "user_id": user_id,
            "session_id": session_id,
            "messages": [[m.role, m.content, m.timestamp] for m in messages],
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canon.encode()).hexdigest()


def render_content(hit: Hit) -> str:
    """"[2023-05-08 Mon] Caroline: text" - the stored text with its date and speaker in front.

    ISO date plus weekday: two whitespace tokens (results are read under token budgets), and the
    weekday lets an answer model resolve "last Friday" without a calendar.
    """
    date = _date_prefix(hit.ts_ms)
    if hit.id >= FACT_BASE:  # a model-extracted fact: its own sentence, dated by its source turn
        return f"{date} fact: {hit.content}"
    if hit.speaker:  # the content already starts with "Speaker: "
        return f"{date} {hit.content}"
    return f"{date} {hit.role}: {hit.content}"


# Cached: a search renders up to top_k hits and the turns of a session share few timestamps, so
# formatting dates was a measurable part of a search.
@lru_cache(maxsize=8192)
def _date_prefix(ts_ms: int) -> str:
    d = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    return f"[{d:%Y-%m-%d} {_WEEKDAY_ABBR[d.weekday()]}]"


@lru_cache(maxsize=8192)
def _iso(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


class AmlService:
    def __init__(
        self,
        log: ConversationLog,
        index: MessageIndex,
        clock: Clock,
        *,
        agent: str = AML_AGENT,
        facts: FactExtractor | None = None,
    ) -> None:
        """`facts` (model mode) extracts source-bound facts after each Add: in a worker thread once
        `start()` is called (the daemon does), else only when `facts.run_pending()` is called."""
        self.log = log
        self.index = index
        self.clock = clock
        self.agent = agent
        self.facts = facts
        # Catch up on anything logged but not indexed (a crash between the two, a fresh index).
        self.index.sync(self.log)
        if facts is not None:
            self.index.sync_facts(facts.store)

    def start(self) -> None:
        """Start the fact worker (model mode); jobs queued before a restart run first."""
        if self.facts is not None:
            self.facts.start()

    def stop(self) -> None:
        if self.facts is not None:
            self.facts.stop()

    def add(
        self, request_id: str, user_id: str, session_id: str, messages: list[AmlMessage]
    ) -> dict[str, object]:
        """Store the messages; returns the response body. Searchable when this returns.

        Raises InvalidInputError (bad field), TooLargeError, ConflictError (request_id reused
        with a different body).
        """
        _require_id("request_id", request_id)
        _require_id("user_id", user_id)
        _require_id("session_id", session_id)
        if not messages:
            raise InvalidInputError("messages must hold at least one message")
        if len(messages) > MAX_MESSAGES:
            raise TooLargeError(f"messages holds {len(messages)} items; the limit is {MAX_MESSAGES}")
        total = 0
        for i, m in enumerate(messages):
            if not m.role.strip():
                raise InvalidInputError(f"messages[{i}].role must be a non-empty string")
            if not m.content.strip():
                raise InvalidInputError(f"messages[{i}].content must be a non-empty string")
            if m.timestamp is not None and m.timestamp < 0:
                raise InvalidInputError(f"messages[{i}].timestamp must be unix milliseconds >= 0")
            total += len(m.content)
        if total > MAX_CONTENT_CHARS:
            raise TooLargeError(f"messages hold {total} characters; the limit is {MAX_CONTENT_CHARS}")

        response = {
            "success": True,
            "request_id": request_id,
            "user_id": user_id,
            "session_id": session_id,
        }
        now_ms = int(self.clock.now().timestamp() * 1000)
        result = self.log.append_once(
            request_id,
            _body_hash(user_id, session_id, messages),
            json.dumps(response, ensure_ascii=False),
            self.agent,
            session_id,
            [NewMessage(m.role, m.content, m.timestamp) for m in messages],
            owner=user_id,
            trigger_source="aml",
            now_ms=now_ms,
        )
        # Index before answering, also on a replay: the first delivery may have died between
        # the log commit and indexing, and the contract says "searchable once acknowledged".
        self.index.sync(self.log)
        if self.facts is not None:
            # Queued, not awaited: the raw messages are the truth and already searchable; facts
            # are a second path that must never slow down or fail the Add. A replay re-queues
            # nothing (one job per request id) but does queue a job the first delivery lost.
            self.facts.enqueue(request_id, self.agent, user_id, session_id, result.ids)
        return json.loads(result.response)

    def search(
        self, query: str, user_id: str, top_k: int, options: list[str] | None = None
    ) -> list[AmlItem]:
        """Stored messages of exactly `user_id`, best first, at most `top_k` (capped)."""
        if not query.strip():
            raise InvalidInputError("query must be a non-empty string")
        if len(query) > MAX_QUERY_CHARS or sum(map(len, options or ())) > MAX_QUERY_CHARS:
            raise TooLargeError(f"query (or options) longer than {MAX_QUERY_CHARS} characters")
        _require_id("user_id", user_id)
        if top_k < 1:
            raise InvalidInputError("top_k must be >= 1")
        hits = self.index.search(
            self.agent, user_id, query, limit=min(top_k, MAX_TOP_K), options=options or ()
        )
        return [
            AmlItem(
                id=f"f{h.id - FACT_BASE}" if h.id >= FACT_BASE else f"m{h.id}",
                content=render_content(h),
                score=h.score,
                created_at=_iso(h.ts_ms),
            )
            for h in hits
        ]
