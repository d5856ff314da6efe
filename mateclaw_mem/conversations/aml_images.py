"""AML images kept and returned (`aml.images: keep`; off by default, for a desktop's privacy).

Off (`refs`), an Add keeps a reference per image (`conversations.parts`): a redacted link, or a
`data:` image's hash, type and size. With `keep`:

- a `data:` image's bytes are kept too, up to `aml.image-max-bytes` each (a larger one refuses the
  Add with a 413 naming the limit: a hash alone would answer later Searches with an image that is
  not there), in log.db's `attachment_blobs`, written in the message's own transaction and deleted
  with its user (`ConversationLog.delete_owner`);
- each image remembers where it stood among the message's text lines, so a Search result carries the
  message as `parts` - OpenAI content parts in the order they were sent (text, image, text ...), a
  kept image as a `data:` URL and a link as its redacted URL;
- a Search query holding an image finds the user's messages holding the identical image (SHA-256 of
  the bytes), first, ahead of the text ranking (which is not touched); a query of images only is
  answered by these matches alone.

Bounds: 16 images per message (`parts.MAX_IMAGES`), each at most `aml.image-max-bytes`; a Search
answer carries at most `RETURN_BYTES` of image bytes - images past it are left out of `parts` (still
listed in `images` by hash). Nothing is held in memory between requests.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mateclaw_mem.conversations import parts

if TYPE_CHECKING:
    from mateclaw_mem.conversations.aml_records import AmlItem
    from mateclaw_mem.conversations.log import ConversationLog

RETURN_BYTES = 16 << 20  # image bytes per Search answer (base64 makes the JSON a third larger)


@dataclass(frozen=True)
class ImageSettings:
    keep: bool = False
    max_bytes: int = 1 << 20

    @property
    def keep_max(self) -> int | None:
        """What `content_text` is given: the cap while images are kept, else None (hash only)."""
        return self.max_bytes if self.keep else None


def attachments(images: Sequence[parts.ImageRef], text: str, keep: bool
                ) -> tuple[tuple[dict[str, Any], ...], tuple[tuple[int, str, bytes], ...]]:
    """(attachments, blobs) of one message for the log. Kept images record their line among `text`'s
    (`of`: the text's lines, 0 for a message of images only) so `with_parts` can put them back."""
    if not keep:
        return tuple({"type": "image", **i.as_dict()} for i in images), ()
    of = 0 if not text or text == parts.placeholder(len(images)) else text.count("\n") + 1
    stored = tuple({"type": "image", **i.as_dict(), "line": i.line, "of": of} for i in images)
    blobs = [(n, i.sha256, i.data) for n, i in enumerate(images) if i.data is not None and i.sha256 is not None]
    return stored, tuple(blobs)


def with_parts(log: ConversationLog, items: list[AmlItem], kept: dict[int, tuple[dict[str, Any], ...]]
               ) -> list[AmlItem]:
    """`items`, each message with kept images given `parts` (its content parts in their order)."""
    budget = RETURN_BYTES
    out = []
    for item in items:
        mid = int(item.id[1:]) if item.id.startswith("m") else None
        stored = kept.get(mid) if mid is not None else None
        if mid is None or not stored or not any("line" in a for a in stored):
            out.append(item)
            continue
        blobs = log.blobs(mid, budget)  # those past the answer's budget are not read: listed in `images` only
        budget -= sum(map(len, blobs.values()))
        images: list[tuple[int, dict[str, Any]]] = []
        for n, a in enumerate(stored):
            data = blobs.get(n)
            url = (f"data:{a.get('media_type') or 'application/octet-stream'};base64,{base64.b64encode(data).decode()}"
                   if data is not None else a.get("url"))
            if url:
                image = {"url": url, **({"detail": a["detail"]} if a.get("detail") else {})}
                images.append((int(a.get("line", 0)), {"type": "image_url", "image_url": image}))
        out.append(replace(item, parts=_ordered(item.content, images, int(stored[0].get("of", -1)), len(stored))))
    return out


def _ordered(content: str, images: list[tuple[int, dict[str, Any]]], of: int, count: int
             ) -> tuple[dict[str, Any], ...]:
    """The rendered text cut back into its lines around the images. A text whose lines no longer match
    (redaction can fold a multi-line secret into one line) comes back whole, the images after it."""
    lines = content.split("\n")
    if of == 0:  # images only: the stored body is placeholders, which the images themselves replace
        head = content.removesuffix(parts.placeholder(count)).rstrip()
        return ({"type": "text", "text": head}, *(p for _, p in images))
    if len(lines) != of:
        return ({"type": "text", "text": content}, *(p for _, p in images))
    out: list[dict[str, Any]] = []
    at = 0
    for line, part in images:
        if line > at:
            out.append({"type": "text", "text": "\n".join(lines[at:line])})
            at = line
        out.append(part)
    if at < len(lines):
        out.append({"type": "text", "text": "\n".join(lines[at:])})
    return tuple(out)
