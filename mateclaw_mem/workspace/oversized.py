"""A memory file over `mate.memory.memory-file-max-bytes`: what each reader does with it.

A person may save anything: a 3 MB MEMORY.md of 100,000 headings held the facts lock for minutes,
one machine write into it took 29 s and its Memory Browser view was 55 MB of HTML. Such a file is
never cut or rewritten by us (it is the person's); instead every reader bounds its own work:

- machine writers leave it alone (`refuse_machine_write`: a RejectedError naming the file, its size
  and the setting; the write is not made, the file is not touched);
- fact projection reads its head only (`head`), and says so once in the log;
- the Memory Browser shows it part by part (`part`), with a warning, and so does MCP's read tool (a
  model's context is no place for 50 MB; `workspace.tools.file_read`);
- the search index takes it whole, in parts of bounded size (index/files/ingest.py);
- `status` flags it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from mateclaw_mem.errors import RejectedError

log = logging.getLogger(__name__)

SETTING = "mate.memory.memory-file-max-bytes"
PART_CHARS = 131_072  # an oversized file read a part at a time (Memory Browser, MCP): about this much text
_warned: set[tuple[str, int]] = set()


def size_over(text: str, limit: int) -> int | None:
    """The file's size in bytes when it is over `limit` (0 = no limit), else None; cheap for most texts."""
    if not limit or len(text) <= limit // 4:  # at most 4 bytes a character: surely within
        return None
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    return size if size > limit else None


def describe(rel: str, size: int, limit: int) -> str:
    return f"{rel} is {_mb(size)}, over {SETTING} ({_mb(limit)})"


def refuse_machine_write(rel: str, old_text: str, limit: int) -> None:
    """A machine never writes into an oversized file: planning a write means parsing all of it, and
    the file is the person's to shorten (nothing of theirs is cut for being big)."""
    size = size_over(old_text, limit)
    if size is not None:
        raise RejectedError(f"{describe(rel, size, limit)}: machine writers leave it as it is; shorten it (search "
                            "and the Memory Browser read it in parts) or raise the setting")


def head(rel: str, text: str, limit: int, *, reader: str) -> str:
    """`text` up to `limit` bytes, cut at a line, for a reader whose work grows with the file (its
    first call per file size logs a warning naming the file)."""
    size = size_over(text, limit)
    if size is None:
        return text
    cut = text[:limit].encode("utf-8")[:limit].decode("utf-8", "ignore")
    cut = cut[: cut.rfind("\n") + 1] or cut
    if (rel, size) not in _warned:
        _warned.add((rel, size))
        log.warning("%s: %s reads only its first %s", describe(rel, size, limit), reader, _mb(len(cut)))
    return cut


@dataclass(frozen=True)
class Part:
    text: str
    number: int  # 1-based
    count: int
    first_line: int  # 1-based line number of `text`'s first line in the file


def part(text: str, limit: int, number: int) -> Part:
    """Part `number` (1-based, clamped) of `text` cut into pieces of about `limit` characters at lines."""
    if not limit or len(text) <= limit:
        return Part(text, 1, 1, 1)
    bounds, start = [], 0
    while start < len(text):
        end = min(len(text), start + limit)
        if end < len(text):
            nl = text.rfind("\n", start, end)
            end = nl + 1 if nl >= start else end
        bounds.append((start, end))
        start = end
    number = min(max(number, 1), len(bounds))
    lo, hi = bounds[number - 1]
    return Part(text[lo:hi], number, len(bounds), text.count("\n", 0, lo) + 1)


def _mb(n: int) -> str:
    return f"{n / 1_048_576:.1f} MiB" if n >= 1_048_576 else f"{n / 1024:.0f} KiB"
