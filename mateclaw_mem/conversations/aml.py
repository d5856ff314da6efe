"""Agent Memory Leaderboard Add/Search: raw messages in, single stored messages out.

Mapping onto the daemon: the AML `user_id` is the log's `owner` (one isolation mechanism for
everything), every AML message lives under one agent (`AML_AGENT` unless configured), and the
`session_id` is the conversation id. Add is idempotent per `request_id`; Search returns stored
messages only, each prefixed with its date and speaker so an answer model can reason about time.

A message's `content` is a string or a list of content parts (OpenAI chat format, see `parts`): text
parts are stored and indexed, image parts kept as references and returned with the message. A
`timestamp` is unix milliseconds or an ISO-8601 string; one without an offset is read in the
workspace timezone (the clock's).

No web framework here: faces validate shapes with pydantic and call `add` / `search`; the rules
below (non-empty ids, limits, idempotency) hold for any face.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, tzinfo
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import orjson

from mateclaw_mem.clock import Clock
from mateclaw_mem.conversations import aml_images, parts
from mateclaw_mem.conversations.aml_records import AmlItem, AmlMessage, Part
from mateclaw_mem.conversations.aml_windows import with_windows
from mateclaw_mem.conversations.log import ConversationLog, NewMessage, StoredMessage
from mateclaw_mem.db import is_busy
from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.index.messages import ranking
from mateclaw_mem.index.messages.index import Hit, MessageIndex
from mateclaw_mem.index.messages.storage import FACT_BASE, split_speaker
from mateclaw_mem.index.messages.worker import serving
from mateclaw_mem.index.sources import AML_TRIGGER
from mateclaw_mem.index.tokenizer import MAX_QUERY_CHARS
from mateclaw_mem.llm.rerank import Candidate, Reranker

if TYPE_CHECKING:
    from mateclaw_mem.conversations.facts import FactExtractor
    from mateclaw_mem.settings import Settings

AML_AGENT = "aml"
MAX_MESSAGES = 1000  # the platform sends at most 20; refuse only the absurd
MAX_CONTENT_CHARS = 2_000_000
MAX_ID_CHARS = 1024
MAX_TOP_K = 1000
MAX_TIMESTAMP_MS = 253_402_300_799_999  # the last millisecond of year 9999 (larger overflows SQLite)
_WEEKDAY_ABBR = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


class TooLargeError(InvalidInputError):
    """A body beyond any sane chunk (HTTP 413)."""

    code = "too_large"


@dataclass(slots=True)  # (not frozen: 20 an Add; a frozen one's __init__ sets each field by object.__setattr__)
class _Normalised:
    role: str
    text: str
    ts_ms: int | None
    images: tuple[parts.ImageRef, ...]


def _require_id(name: str, value: str) -> None:
    if not value.strip():
        raise InvalidInputError(f"{name} must be a non-empty string")
    if len(value) > MAX_ID_CHARS:
        raise InvalidInputError(f"{name} is longer than {MAX_ID_CHARS} characters")


def _body_hash(user_id: str, session_id: str, messages: list[_Normalised]) -> str:
    # Canonical JSON of the parsed body: a retry that re-serialises differently (key order,
    # whitespace, ISO time instead of ms, one text part instead of a string) is still the same
    # request; any change in ids, text, role, time or images is not. A message without images
    # hashes as before content parts existed, so retries of older requests still replay.
    # (By orjson: its bytes are those of json.dumps(ensure_ascii=False, separators=(",", ":")),
    # which hashed every earlier request - tests/test_aml_request_hash.py - at a tenth of the time.)
    canon = {
        "user_id": user_id,
        "session_id": session_id,
        "messages": [
            [m.role, m.text, m.ts_ms, *([[i.as_dict() for i in m.images]] if m.images else [])]
            for m in messages
        ],
    }
    try:
        return hashlib.sha256(orjson.dumps(canon)).hexdigest()
    except orjson.JSONEncodeError:  # (a str from a Python caller; HTTP and MCP bodies are parsed as UTF-8)
        raise InvalidInputError("user_id, session_id and messages must be valid Unicode text"
                                " (one holds a lone surrogate)") from None


def parse_iso(value: str) -> datetime:
    """An ISO-8601 date-time (`2023-05-08T13:56:00Z`, `2023-05-08 13:56+02:00`, `2023-05-08`); naive
    when it has no offset. ValueError (for faces' validators) when it is not one."""
    try:
        return datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            f"{value[:40]!r} is not an ISO-8601 date-time (e.g. 2023-05-08T13:56:00Z) nor unix milliseconds"
        ) from None


def check_iso(value: str) -> str:
    parse_iso(value)
    return value


def timestamp_ms(value: int | str, tz: tzinfo, where: str = "timestamp") -> int:
    """Unix milliseconds from an int (already ms) or an ISO-8601 string; a naive string is in `tz`."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidInputError(f"{where} must be unix milliseconds or an ISO-8601 string")
    if isinstance(value, str):
        try:
            when = parse_iso(value)
        except ValueError as exc:
            raise InvalidInputError(f"{where}: {exc}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=tz)
        value = round(when.timestamp() * 1000)
    if not 0 <= value <= MAX_TIMESTAMP_MS:
        raise InvalidInputError(f"{where} must be between 1970-01-01 and 9999-12-31 (unix milliseconds >= 0)")
    return value


def content_text(content: str | Sequence[Part], where: str, keep_max: int | None = None
                 ) -> tuple[str, tuple[parts.ImageRef, ...]]:
    """(text to store and index, image references) of a string or a list of content parts; the text
    is "" for parts without text. `keep_max`: images are kept (`parts.image_ref`)."""
    if isinstance(content, str):
        return content, ()
    if isinstance(content, Mapping) or not isinstance(content, Sequence) or not content:
        raise InvalidInputError(f"{where} must be a non-empty string or a non-empty list of content parts")
    texts: list[str] = []
    images: list[parts.ImageRef] = []
    for i, part in enumerate(content):
        at = f"{where}[{i}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidInputError(f"{at}.text must be a string")
            texts.append(text)
        elif kind == "image_url":
            image = part.get("image_url")
            if isinstance(image, str):
                image = {"url": image}
            if not isinstance(image, Mapping) or not isinstance(image.get("url"), str):
                raise InvalidInputError(f"{at}.image_url must be an object with a url")
            if len(images) >= parts.MAX_IMAGES:
                raise InvalidInputError(f"{where} holds more than {parts.MAX_IMAGES} images")
            images.append(parts.image_ref(image["url"], image.get("detail"), where=f"{at}.image_url",
                                          keep_max=keep_max, line=parts.lines_of(texts)))
            caption = part.get("caption") if isinstance(part, Mapping) else None
            if caption is not None:
                if not isinstance(caption, str) or len(caption) > parts.MAX_CAPTION_CHARS:
                    raise InvalidInputError(f"{at}.caption must be a string of at most {parts.MAX_CAPTION_CHARS}"
                                            " characters")
                if caption.strip():
                    texts.append(parts.caption_line(caption))
        else:
            raise InvalidInputError(f"{at}.type must be 'text' or 'image_url', not {kind!r}")
    return parts.joined_text(texts), tuple(images)


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


def render_message(m: StoredMessage) -> str:
    """`render_content` of a logged message (a neighbouring turn of an evidence window)."""
    date = _date_prefix(m.ts_ms)
    return f"{date} {m.content}" if split_speaker(m.content)[0] else f"{date} {m.role}: {m.content}"


_DAY_MS = 86_400_000


# Cached by day: a search renders up to top_k hits, and formatting dates was a measurable part of a
# search. Cached by timestamp (8,192 of each) they held ~3 MB once a few thousand hits had been shown,
# resident beside the Add/Search cache and taken from its room under aml.cache-bytes; the days a
# history spans are a few hundred entries.
@lru_cache(maxsize=4096)
def _day(day: int) -> tuple[str, str]:
    """(the hit's date prefix, the ISO date and "T") of a UTC day counted from the epoch."""
    d = datetime.fromtimestamp(day * 86_400, tz=UTC)
    return f"[{d:%Y-%m-%d} {_WEEKDAY_ABBR[d.weekday()]}]", f"{d:%Y-%m-%d}T"


def _date_prefix(ts_ms: int) -> str:
    return _day(ts_ms // _DAY_MS)[0]


# The time of day's pieces, formatted once: a search dates each of its up to 100 hits (four
# formatted fields a hit were ~1 us; looked up, ~0.35). ~150 KB.
_HH_MM = tuple(f"{m // 60:02d}:{m % 60:02d}:" for m in range(1440))
_SS = tuple(f"{s:02d}." for s in range(60))
_MS_Z = tuple(f"{ms:03d}Z" for ms in range(1000))


def _iso(ts_ms: int) -> str:
    """UTC, to the millisecond, with "Z" (integer arithmetic: no float rounding of the milliseconds)."""
    day, ms = divmod(ts_ms, _DAY_MS)
    sec, ms = divmod(ms, 1000)
    minute, sec = divmod(sec, 60)
    return _day(day)[1] + _HH_MM[minute] + _SS[sec] + _MS_Z[ms]


def options_from(settings: Settings) -> dict[str, Any]:
    """The `aml.*` settings an AmlService takes as keywords, however its store is built (the full
    daemon, `serve --aml-only` over SQLite, PostgreSQL)."""
    section = settings.aml
    return {"agent": settings.aml_agent, "neighbours": section.neighbours, "neighbour_chars": section.neighbour_chars,
            "images": aml_images.ImageSettings(section.images == "keep", section.image_max_bytes)}


class AmlService:
    def __init__(
        self,
        log: ConversationLog,
        index: MessageIndex,
        clock: Clock,
        *,
        agent: str = AML_AGENT,
        facts: FactExtractor | None = None,
        reranker: Reranker | None = None,
        neighbours: int = 0,
        neighbour_chars: int = 0,
        images: aml_images.ImageSettings | None = None,
    ) -> None:
        """`facts` (model mode) extracts source-bound facts after each Add: in a worker thread once
        `start()` is called (the daemon does), else only when `facts.run_pending()` is called."""
        self.log = log
        self.index = index
        self.clock = clock
        self.agent = agent
        self.facts = facts
        self.reranker = reranker  # aml.rerank: may only reorder the first candidates (`_reranked`)
        self.neighbours = neighbours  # aml.neighbours: evidence windows (conversations/aml_windows.py)
        self.neighbour_chars = neighbour_chars
        self.image_settings = images or aml_images.ImageSettings()  # aml.images (conversations/aml_images.py)
        # Catch up on anything logged but not indexed (a crash between the two, a fresh index).
        self.index.sync(self.log)
        if facts is not None:
            self.index.sync_facts(facts.store)
        self._images = log.has_attachments(agent)  # see `search`
        ranking.load()  # built before a daemon listens: its first search as quick as the next

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
        return json.loads(self.add_json(request_id, user_id, session_id, messages))

    def add_json(self, request_id: str, user_id: str, session_id: str, messages: list[AmlMessage], *,
                 index_lag: bool = True) -> str:
        """`add`, answering with the response body as the JSON text stored with the request (so a
        replay is byte for byte the first answer, and a face sends it without re-encoding).
        `index_lag` False (`add_json_now`, on the event loop holding the log's lock): the indexing is
        left to the index's thread whatever the lag - waiting for the index's lock there could
        deadlock with that thread."""
        _require_id("request_id", request_id)
        _require_id("user_id", user_id)
        _require_id("session_id", session_id)
        if not messages:
            raise InvalidInputError("messages must hold at least one message")
        if len(messages) > MAX_MESSAGES:
            raise TooLargeError(f"messages holds {len(messages)} items; the limit is {MAX_MESSAGES}")
        total = 0
        normalised: list[_Normalised] = []
        for i, m in enumerate(messages):
            if not m.role.strip():
                raise InvalidInputError(f"messages[{i}].role must be a non-empty string")
            text, images = content_text(m.content, f"messages[{i}].content", self.image_settings.keep_max)
            if not text.strip() and images:
                text = parts.placeholder(len(images))
            if not text.strip():
                raise InvalidInputError(f"messages[{i}].content must be a non-empty string or hold a non-blank part")
            ts = None if m.timestamp is None else timestamp_ms(m.timestamp, self.clock.tz, f"messages[{i}].timestamp")
            normalised.append(_Normalised(m.role, text, ts, images))
            total += len(text)
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
            _body_hash(user_id, session_id, normalised),
            json.dumps(response, ensure_ascii=False),
            self.agent,
            session_id,
            [
                NewMessage(m.role, m.text, m.ts_ms, *aml_images.attachments(m.images, m.text, self.image_settings.keep))
                for m in normalised
            ],
            owner=user_id,
            trigger_source=AML_TRIGGER,
            now_ms=now_ms,
        )
        if any(m.images for m in normalised):
            self._images = True
        # Indexed after answering, by the index's own thread (also on a replay: the first delivery
        # may have died between the log commit and indexing). "Searchable once acknowledged" holds
        # all the same: every search first indexes whatever that thread has not yet (`catch_up`).
        # On PostgreSQL the Add indexed its messages in its own transaction and this does nothing.
        self.index.sync_later(self.log, max(result.ids, default=0), wait=index_lag)
        if self.facts is not None:
            # Queued, not awaited: the raw messages are the truth and already searchable; facts
            # are a second path that must never slow down or fail the Add. A replay re-queues
            # nothing (one job per request id) but does queue a job the first delivery lost.
            self.facts.enqueue(request_id, self.agent, user_id, session_id, result.ids)
        return result.response

    def add_json_now(self, request_id: str, user_id: str, session_id: str, messages: list[AmlMessage]) -> str | None:
        """`add_json`, if it can run without waiting for anyone: no other thread holds the log, no
        other process is writing it. Else None, having done nothing an `add_json` would not repeat.
        (The index is not touched: its own thread indexes the Add after the answer.)

        For the HTTP face, which runs small Adds on its event loop: handing each to a worker thread
        was a quarter of an Add's CPU, and a wait there would hold every other request."""
        if self.facts is not None or self.index.lagging(len(messages)):  # (its queue locks; it would index)
            return None
        if not self.log.lock.acquire(blocking=False):
            return None
        try:
            # The index's threads pause their indexing meanwhile (it waits on none of them): at each
            # of this Add's SQLite calls they would take the interpreter until it is handed back.
            with serving(), self.log.without_waiting():
                try:
                    return self.add_json(request_id, user_id, session_id, messages, index_lag=False)
                except sqlite3.OperationalError as exc:
                    if is_busy(exc):
                        return None
                    raise
        finally:
            self.log.lock.release()

    def search(
        self, query: str | Sequence[Part], user_id: str, top_k: int, options: list[str] | None = None
    ) -> list[AmlItem]:
        """Stored messages of exactly `user_id`, best first, at most `top_k` (capped).

        A query of content parts searches by its text parts; with aml.images: keep, its images find
        the messages holding the same image first (`_same_images`), and may come alone."""
        images: tuple[parts.ImageRef, ...] = ()
        if not isinstance(query, str):
            query, images = content_text(query, "query")
            if images and not query.strip() and not self.image_settings.keep:
                raise InvalidInputError("query holds images only; searching needs a text part"
                                        " (or aml.images: keep, to search by the image)")
        if not query.strip() and not (images and self.image_settings.keep):
            raise InvalidInputError("query must be a non-empty string")
        if len(query) > MAX_QUERY_CHARS or sum(map(len, options or ())) > MAX_QUERY_CHARS:
            raise TooLargeError(f"query (or options) longer than {MAX_QUERY_CHARS} characters")
        _require_id("user_id", user_id)
        if top_k < 1:
            raise InvalidInputError("top_k must be >= 1")
        limit = min(top_k, MAX_TOP_K)
        # Windows fold a hit shown inside a better one's window into it: a few more hits fill its slot.
        fetch = min(2 * limit, MAX_TOP_K) if self.neighbours else limit
        hits: list[Hit] = []
        if query.strip():
            self.index.catch_up(self.log)  # every acknowledged Add, also those its thread has not indexed yet
            hits = self.index.search(self.agent, user_id, query, limit=fetch, options=options or ())
        same = self._same_images(images, user_id, limit)
        top = hits[0].score if hits else 0.0
        hits = [h for h in hits if h.id not in same]
        # Only looked up once some message has images: a text-only log answers exactly as before.
        kept = self.log.attachments([h.id for h in hits if h.id < FACT_BASE]) if self._images else {}
        kept.update((m.id, m.attachments) for m in same.values())
        items = [
            *(AmlItem(id=f"m{m.id}", content=render_message(m), score=top + 1.0, created_at=_iso(m.ts_ms),
                      images=_images(m.attachments)) for m in same.values()),
            # (id, content, score, created_at, images: by position, up to 100 a search)
            *(AmlItem(f"f{h.id - FACT_BASE}" if h.id >= FACT_BASE else f"m{h.id}", render_content(h), h.score,
                      _iso(h.ts_ms), _images(kept[h.id]) if h.id in kept else ()) for h in hits),
        ][:fetch]
        if self.image_settings.keep and kept:
            items = aml_images.with_parts(self.log, items, kept)
        if self.reranker is not None:
            items = self._reranked(query, user_id, items)
        if self.neighbours:
            return with_windows(self.log, self.agent, user_id, items, n=self.neighbours, budget=self.neighbour_chars,
                                limit=limit, render=render_message)
        return items

    def _same_images(self, images: Sequence[parts.ImageRef], user_id: str, limit: int) -> dict[int, StoredMessage]:
        """With images kept: this user's messages holding one of `images` (by SHA-256), newest first -
        ahead of the text ranking (scored above its best)."""
        hashes = [i.sha256 for i in images if i.sha256]
        if not self.image_settings.keep or not hashes:
            return {}
        found = self.log.by_ids(self.log.with_blob(self.agent, user_id, hashes, limit))
        return {m.id: m for m in sorted(found, key=lambda m: -m.id) if m.owner == user_id and m.agent == self.agent}

    def _reranked(self, query: str, user_id: str, items: list[AmlItem]) -> list[AmlItem]:
        """`items` with at most the first `top-n` put in the reranker's order: the same items, each
        once; ids the model invents or takes from anyone else are dropped by `Reranker.order`, and a
        candidate is only moved once the log confirms it is this user's message of this agent. The
        head keeps its scores, handed out again best first, so scores still fall down the list."""
        assert self.reranker is not None
        head = items[: self.reranker.settings.top_n]
        rest = items[len(head):]
        owned = {f"m{m.id}" for m in self.log.by_ids([int(i.id[1:]) for i in head if i.id.startswith("m")])
                 if m.owner == user_id and m.agent == self.agent}
        movable = [i for i in head if i.id in owned or i.id.startswith("f")]
        order = self.reranker.order(query, [Candidate(i.id, i.content) for i in movable], agent=self.agent,
                                    owner=user_id)
        if not order:
            return items
        by_id = {i.id: i for i in movable}
        moved = iter([by_id[x] for x in order])
        # Only the validated candidates move, within their own slots; anything else stays where it was.
        slots = [next(moved) if i.id in by_id else i for i in head]
        scores = sorted((i.score for i in head), reverse=True)
        return [replace(i, score=s) for i, s in zip(slots, scores, strict=True)] + rest


def _images(attachments: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
    return tuple(
        parts.ImageRef.from_dict(a).as_dict() for a in attachments if a.get("type") == "image"
    )
