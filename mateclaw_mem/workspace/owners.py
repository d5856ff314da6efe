"""Owner keys as the seed spells them, built and checked in one place.

    web user        user:<id>
    IM sender       <channel>:<sender>      (e.g. telegram:1234567, slack:U024BE7LH)
    API end user    api:<endUserId>
    cron / unknown  system                  = shared: no owner (None inside the services)

A web user "42" (`user:42`) and an API end user "42" (`api:42`) are two owners. Ids are strings;
an integer id is written with `str()`, so a 64-bit (or larger) id stays exact — a float is refused,
as it may already have lost digits on the way in.

A key without a `<source>:` prefix ("alice", "bob@example.com": what callers sent before keys had
a source, and what the AML contract's `user_id` is) is a *legacy* key: accepted verbatim, so data
already filed under it stays that owner's. Owner keys become folder names (workspace/paths.py
`owner_dirname` percent-encodes every one of them); the checks here are about what a key means,
so that a bad one is refused with a message naming the problem rather than quietly encoded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mateclaw_mem.errors import InvalidInputError

SYSTEM = "system"  # the seed's owner key for cron jobs and callers of unknown identity: shared memory
MAX_OWNER_CHARS = 200  # workspace/paths.py owner_dirname's limit on the whole key
SOURCES = ("web", "im", "api", "cron", "system")
_PREFIX = {"web": "user", "api": "api"}
_CHANNEL = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_RESERVED_CHANNELS = frozenset({"user", "api", SYSTEM})


@dataclass(frozen=True)
class OwnerKey:
    key: str  # the key as stored and sent ("system" for shared)
    source: str  # web / im / api / system / legacy
    id: str  # the user id, sender or end-user id ("" for system)
    channel: str | None = None  # the IM channel

    @property
    def owner(self) -> str | None:
        """The services' owner value: None for the shared `system` key."""
        return None if self.key == SYSTEM else self.key


def owner_key(source: str | None, *ids: object) -> OwnerKey:
    """The owner key of a caller: `owner_key("web", 42)`, `owner_key("im", "telegram", "1234")`,
    `owner_key("api", "u-9")`, `owner_key("cron")` / `owner_key(None)` -> system (shared).

    An unrecognised source is an error, not `system`: a typo must not silently share memory."""
    if source is None or source in ("cron", SYSTEM):
        if ids:
            raise InvalidInputError(f"owner source {source or 'none'!r} is shared (system) and takes no id")
        return OwnerKey(SYSTEM, SYSTEM, "")
    if source not in SOURCES:
        raise InvalidInputError(f"unknown owner source {source!r}: use one of {', '.join(SOURCES)}")
    if source == "im":
        if len(ids) != 2:
            raise InvalidInputError("an IM owner key needs a channel and a sender id")
        channel = _channel(ids[0])
        return _built(f"{channel}:{_id(ids[1], 'sender id')}", "im", channel)
    if len(ids) != 1:
        raise InvalidInputError(f"a {source} owner key needs exactly one id")
    return _built(f"{_PREFIX[source]}:{_id(ids[0], 'user id' if source == 'web' else 'end-user id')}", source)


def parse_owner_key(text: object) -> OwnerKey:
    """An owner key from the wire, validated: `user:42`, `api:42`, `<channel>:<sender>`, `system`,
    or a legacy bare key (kept verbatim). Refuses empty, over-long, control characters, path
    separators and a prefix with nothing after it."""
    if not isinstance(text, str):
        raise InvalidInputError(f"owner key must be a string, not {type(text).__name__}")
    _check(text, "owner key")
    if len(text) > MAX_OWNER_CHARS:
        raise InvalidInputError(f"owner key is {len(text)} characters; the limit is {MAX_OWNER_CHARS}")
    if text == SYSTEM:
        return OwnerKey(SYSTEM, SYSTEM, "")
    head, sep, rest = text.partition(":")
    if not sep:
        return OwnerKey(text, "legacy", text)
    if not rest:
        raise InvalidInputError(f"owner key {text!r} has nothing after {head + ':'!r}")
    if head in ("user", "api"):
        return OwnerKey(text, "web" if head == "user" else "api", rest)
    if _CHANNEL.match(head):
        return OwnerKey(text, "im", rest, head)
    # Anything else with a colon (a URL, "mailto:...") is a legacy key too: only its spelling is checked.
    return OwnerKey(text, "legacy", text)


def wire_owner(value: str | None) -> str | None:
    """The services' owner for a key that came with a request (HTTP query or body, MCP argument):
    absent, "" and "system" are shared (None); anything else must pass `parse_owner_key`. Raises
    ValueError with the problem named, which is what the faces' pydantic validators turn into a 422 /
    a tool error."""
    if not value:
        return None
    try:
        return parse_owner_key(value).owner
    except InvalidInputError as exc:
        raise ValueError(exc.message) from None


def _built(key: str, source: str, channel: str | None = None) -> OwnerKey:
    if len(key) > MAX_OWNER_CHARS:
        raise InvalidInputError(f"owner key {key[:40]!r}... is {len(key)} characters; the limit is {MAX_OWNER_CHARS}")
    return OwnerKey(key, source, key.partition(":")[2], channel)


def _id(value: object, what: str) -> str:
    if isinstance(value, (bool, float)):
        # bool is an int to Python; a float may already have rounded a large id (2**53 + 1).
        raise InvalidInputError(f"{what} must be a string or an integer, not {type(value).__name__} {value!r}")
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string or an integer, not {type(value).__name__}")
    _check(value, what)
    return value


def _channel(value: object) -> str:
    if not isinstance(value, str) or not _CHANNEL.match(value):
        raise InvalidInputError(f"IM channel {value!r} must be 1-32 lowercase letters, digits, '_' or '-', "
                                "starting with a letter")
    if value in _RESERVED_CHANNELS:
        raise InvalidInputError(f"IM channel {value!r} is reserved (user:, api: and system are other sources)")
    return value


def _check(value: str, what: str) -> None:
    if not value:
        raise InvalidInputError(f"{what} is empty")
    if value != value.strip():
        raise InvalidInputError(f"{what} {value!r} starts or ends with whitespace")
    if _CONTROL.search(value):
        raise InvalidInputError(f"{what} {value!r} contains control characters")
    if "/" in value or "\\" in value:
        raise InvalidInputError(f"{what} {value!r} contains a path separator ('/' or '\\')")
