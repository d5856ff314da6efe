"""Content parts (the OpenAI chat format) in AML Add messages and Search queries.

`[{"type": "text", "text": ...}, {"type": "image_url", "image_url": {"url": ..., "detail": ...}}]`:
the text parts, joined by newlines, are what is stored, indexed and searched; the images are kept
beside the message as references and returned with it by Search. What a reference holds:

- a link (http, https or any other scheme but `data:`): the URL, redacted (secrets the shared
  redaction finds, and the values of credential-like query parameters such as `X-Amz-Signature` or
  `token`), at most `MAX_URL_CHARS` long;
- a `data:` URL: by default never the image itself (it can be megabytes, and a desktop's memory log
  is no image store), only its media type, decoded size in bytes and SHA-256 - enough to recognise the
  same image again. With `aml.images: keep` its bytes are kept too (`ImageRef.data`, at most
  `aml.image-max-bytes`; conversations/aml_images.py returns them).

An image part may carry a `caption` (alt text): it is stored as a text line `[image: caption]` where
the image stood, so it is indexed and searched like any text.

A message of images only has no text to index; it is stored as one `[image]` per image so that it
still has a body to return, and is found by the text around it in its session.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from mateclaw_mem.errors import InvalidInputError, TooLargeError
from mateclaw_mem.redaction import redact

MAX_IMAGES = 16  # per message; the OpenAI API itself takes a handful per turn
MAX_URL_CHARS = 4096  # a link, after redaction; longer is refused (send a shorter link)
MAX_DATA_URL_CHARS = 32_000_000  # a data: URL, read only to hash it (~24 MB of image)
IMAGE_PLACEHOLDER = "[image]"
_DATA_URL = re.compile(r"\Adata:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>(?:;[^;,]*)*?)(?P<b64>;base64)?,", re.I)
# Query parameters whose values are credentials in signed links (S3, GCS, Azure SAS, generic tokens).
_SECRET_PARAM = re.compile(r"(?i)(signature|sig|token|credential|secret|password|passwd|api[_-]?key|auth|key)$")
_DETAILS = ("auto", "low", "high")
_REF_FIELDS = ("url", "sha256", "media_type", "bytes", "detail")
MAX_CAPTION_CHARS = 2000


@dataclass(frozen=True)
class ImageRef:
    """One image of a message, as kept: `url` for a link, `sha256`/`media_type`/`bytes` for a data: URL."""

    url: str | None = None
    sha256: str | None = None
    media_type: str | None = None
    bytes: int | None = None
    detail: str | None = None
    # Not part of the reference (nor of an Add's body hash, which the sha256 already covers): the
    # decoded bytes, only when images are kept, and how many lines of the message's text precede it.
    data: builtins.bytes | None = field(default=None, compare=False, repr=False)
    line: int = field(default=0, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """The stored and returned form: only the fields that are set."""
        return {k: getattr(self, k) for k in _REF_FIELDS if getattr(self, k) is not None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ImageRef:
        return cls(url=d.get("url"), sha256=d.get("sha256"), media_type=d.get("media_type"), bytes=d.get("bytes"),
                   detail=d.get("detail"))


def image_ref(url: str, detail: str | None = None, *, where: str = "image_url", keep_max: int | None = None,
              line: int = 0) -> ImageRef:
    """The reference kept for one `image_url` part; with `keep_max` (images kept) a data: URL's bytes
    too, refused past `keep_max`. Raises InvalidInputError naming `where`."""
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
        if keep_max is not None and len(data) > keep_max:
            raise TooLargeError(f"{where}.url is an image of {len(data)} bytes; images are kept up to"
                                     f" {keep_max} bytes (aml.image-max-bytes)")
        return ImageRef(sha256=hashlib.sha256(data).hexdigest(), media_type=media, bytes=len(data), detail=detail,
                        data=data if keep_max is not None else None, line=line)
    clean = _redact_url(url)
    if len(clean) > MAX_URL_CHARS:
        raise InvalidInputError(f"{where}.url is {len(clean)} characters long; the limit is {MAX_URL_CHARS}")
    return ImageRef(url=clean, detail=detail, line=line)


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


def caption_line(caption: str) -> str:
    """The text line an image's caption is stored (and indexed) as."""
    return f"[image: {' '.join(caption.split())}]"


def lines_of(texts: list[str]) -> int:
    """Lines of `joined_text(texts)` (0 for no text): where an image after these texts stands."""
    kept = [t for t in texts if t.strip()]
    return sum(t.count("\n") + 1 for t in kept)


def joined_text(texts: list[str]) -> str:
    """The text of a message made of parts: its non-blank text parts, one per line."""
    return "\n".join(t for t in texts if t.strip())


def placeholder(images: int) -> str:
    """The stored body of a message of images only."""
    return " ".join([IMAGE_PLACEHOLDER] * images)
