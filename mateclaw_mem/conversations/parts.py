"""Content parts (the OpenAI chat format) in AML Add messages and Search queries.

`[{"type": "text", "text": ...}, {"type": "image_url", "image_url": {"url": ..., "detail": ...}}]`:
the text parts, joined by newlines, are what is stored, indexed and searched; the images are kept
beside the message as references and returned with it by Search. What a reference holds:

- a link (http, https or any other scheme but `data:`): the URL, redacted (secrets the shared
  redaction finds, and the values of credential-like query parameters such as `X-Amz-Signature` or
  `token`), at most `MAX_URL_CHARS` long;
- a `data:` URL: never the image itself (it can be megabytes, and a memory log is no image store),
  only its media type, decoded size in bytes and SHA-256 - enough to recognise the same image again.

A message of images only has no text to index; it is stored as one `[image]` per image so that it
still has a body to return, and is found by the text around it in its session.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.redaction import redact

MAX_IMAGES = 16  # per message; the OpenAI API itself takes a handful per turn
MAX_URL_CHARS = 4096  # a link, after redaction; longer is refused (send a shorter link)
MAX_DATA_URL_CHARS = 32_000_000  # a data: URL, read only to hash it (~24 MB of image)
IMAGE_PLACEHOLDER = "[image]"
_DATA_URL = re.compile(r"\Adata:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>(?:;[^;,]*)*?)(?P<b64>;base64)?,", re.I)
# Query parameters whose values are credentials in signed links (S3, GCS, Azure SAS, generic tokens).
_SECRET_PARAM = re.compile(r"(?i)(signature|sig|token|credential|secret|password|passwd|api[_-]?key|auth|key)$")
_DETAILS = ("auto", "low", "high")


@dataclass(frozen=True)
class ImageRef:
    """One image of a message, as kept: `url` for a link, `sha256`/`media_type`/`bytes` for a data: URL."""

    url: str | None = None
    sha256: str | None = None
    media_type: str | None = None
    bytes: int | None = None
    detail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The stored and returned form: only the fields that are set."""
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ImageRef:
        return cls(**{k: d.get(k) for k in ("url", "sha256", "media_type", "bytes", "detail")})


def image_ref(url: str, detail: str | None = None, *, where: str = "image_url") -> ImageRef:
    """The reference kept for one `image_url` part. Raises InvalidInputError naming `where`."""
    if detail is not None and detail not in _DETAILS:
        raise InvalidInputError(f"{where}.detail must be one of {', '.join(_DETAILS)}, not {detail!r}")
    url = url.strip()
    if not url:
        raise InvalidInputError(f"{where}.url must be a non-empty string")
    m = _DATA_URL.match(url)
    if url[:5].lower() == "data:":
        if m is None:
            raise InvalidInputError(f"{where}.url is not a valid data: URL (want data:<type>;base64,<data>)")
        if len(url) > MAX_DATA_URL_CHARS:
            raise InvalidInputError(f"{where}.url is a data: URL of {len(url)} characters; the limit is"
                                    f" {MAX_DATA_URL_CHARS}")
        payload = url[m.end():]
        if m.group("b64"):
            try:
                data = base64.b64decode(payload, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidInputError(f"{where}.url: the data: URL's base64 does not decode") from None
        else:
            data = payload.encode("utf-8")
        media = (m.group("type") or "text/plain").lower()
        return ImageRef(sha256=hashlib.sha256(data).hexdigest(), media_type=media, bytes=len(data), detail=detail)
    clean = _redact_url(url)
    if len(clean) > MAX_URL_CHARS:
        raise InvalidInputError(f"{where}.url is {len(clean)} characters long; the limit is {MAX_URL_CHARS}")
    return ImageRef(url=clean, detail=detail)


def _redact_url(url: str) -> str:
    text = redact(url)
    parts = urlsplit(text)
    if not parts.query:
        return text
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if not any(_SECRET_PARAM.search(k) for k, _ in pairs):
        return text  # untouched: re-encoding would change a link that holds nothing secret
    kept = [(k, "[REDACTED]" if _SECRET_PARAM.search(k) else v) for k, v in pairs]
    return urlunsplit(parts._replace(query=urlencode(kept, safe="[]:/")))


def joined_text(texts: list[str]) -> str:
    """The text of a message made of parts: its non-blank text parts, one per line."""
    return "\n".join(t for t in texts if t.strip())


def placeholder(images: int) -> str:
    """The stored body of a message of images only."""
    return " ".join([IMAGE_PLACEHOLDER] * images)
