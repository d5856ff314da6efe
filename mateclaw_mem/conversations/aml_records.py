"""The Add/Search contract's records: a message as a face hands it in, an item as Search returns it.

Their own module because the search helpers (aml_windows, aml_images) take and return items while
the service (aml.py) calls those helpers: with the records in aml.py the two sides imported each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# A content part as a face hands it over: {"type": "text", "text": ...} or {"type": "image_url",
# "image_url": {"url": ..., "detail": ...}} (a bare URL string for "image_url" is accepted too).
Part = Mapping[str, Any]


@dataclass(frozen=True)
class AmlMessage:
    role: str
    content: str | Sequence[Part]
    timestamp: int | str | None = None  # unix ms, or ISO-8601 (no offset: the workspace timezone)


@dataclass(slots=True)  # (not frozen: see index.Hit - a Search makes up to 200 of these)
class AmlItem:
    id: str
    content: str
    score: float
    created_at: str
    images: tuple[dict[str, Any], ...] = ()  # references (`parts.ImageRef.as_dict`) of the message's images
    parts: tuple[dict[str, Any], ...] = ()  # with aml.images: keep, the message as content parts (aml_images)
