"""Memory files cut into searchable chunks, each with the lines it came from.

- A `##` section is one chunk (its heading is the chunk's title). Sections longer than
  `MAX_CHUNK_CHARS` are split at paragraph breaks (then at line breaks) so a hit points at the
  paragraph that matched, not at a 5,000-character section; every piece keeps the section title.
- Text before the first `##` (the preamble) is a chunk of its own unless it is only a `# title`.
- Structured entries (`structured/*.md`) are one chunk per `## key` entry, never split: an entry is
  the unit Dreaming and the context block work with.
- Frontmatter is never indexed, but line numbers count it, so `line` is what an editor shows.

`file_kind` names what a file is for weights and scopes (see `index/search.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.sections import split_sections

MAX_CHUNK_CHARS = 1500
_DAILY_RE = re.compile(r"^memory/(\d{4}-\d{2}-\d{2})\.md$")
_H1_RE = re.compile(r"^#(?!#)\s*(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Chunk:
    title: str
    line_start: int  # 1-based, inclusive, in the whole file (frontmatter counted)
    line_end: int
    text: str


CONVERSATION = "conversation"
FILE_KINDS = ("memory", "daily", "structured", "archive", "dreams", "other", "profile", "agents", "soul")
# Which kinds each search scope returns (documented in index/search.py). Kept beside the kinds
# because the index stores each chunk's scopes as tokens, so a scope filter is one FTS5 term.
SCOPES: dict[str, tuple[str, ...]] = {
    "all": (*FILE_KINDS, CONVERSATION),
    "memory": ("memory", "daily", "structured", "archive", "dreams", "other"),
    "profile": ("profile",),
    "persona": ("agents", "soul"),
    "conversations": (CONVERSATION,),
    "files": FILE_KINDS,
}


def scopes_of(kind: str) -> list[str]:
    return [name for name, kinds in SCOPES.items() if kind in kinds]


def file_kind(rel: str) -> str:
    """memory | daily | profile | agents | soul | structured | archive | dreams | other."""
    if rel == "MEMORY.md":
        return "memory"
    if rel == "PROFILE.md":
        return "profile"
    if rel == "AGENTS.md":
        return "agents"
    if rel == "SOUL.md":
        return "soul"
    if rel == "DREAMS.md":
        return "dreams"
    if _DAILY_RE.match(rel):
        return "daily"
    if rel.startswith("structured/"):
        return "structured"
    if rel.startswith(("memory/archive/", "memory/dreams/")):
        return "archive"
    return "other"


def daily_date(rel: str) -> date | None:
    """The date of a daily note from its name (`memory/2026-11-30.md`), else None."""
    m = _DAILY_RE.match(rel)
    if not m:
        return None
    try:
        return date.fromisoformat(m.group(1))
    except ValueError:
        return None


def chunk_file(rel: str, text: str) -> list[Chunk]:
    block, body = frontmatter.split(text)
    first_line = block.count("\n") + 1  # line number of the body's first line
    preamble, sections = split_sections(body)
    split_long = not rel.startswith("structured/")
    out: list[Chunk] = []
    line = first_line
    if preamble.strip():
        lines = preamble.splitlines()
        title = ""
        content = [ln for ln in lines if ln.strip()]
        m = _H1_RE.match(content[0]) if content else None
        if m:
            title = m.group(1)
        if len(content) > 1 or not m:
            out.extend(_pieces(title, preamble, line, split_long))
    line += _count_lines(preamble)
    for section in sections:
        out.extend(_pieces(section.title, section.text, line, split_long))
        line += _count_lines(section.text)
    return out


def _count_lines(text: str) -> int:
    return len(text.splitlines())


def _pieces(title: str, text: str, first_line: int, split_long: bool) -> list[Chunk]:
    stripped = text.rstrip()
    if not stripped.strip():
        return []
    n = _count_lines(stripped)
    if not split_long or len(stripped) <= MAX_CHUNK_CHARS:
        return [Chunk(title, first_line, first_line + n - 1, stripped)]
    # Group paragraphs (runs of non-blank lines) into pieces of at most MAX_CHUNK_CHARS.
    lines = stripped.splitlines()
    blocks: list[tuple[int, int]] = []  # [start, end) line indexes of paragraphs or long-paragraph lines
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].strip():
            j += 1
        if sum(len(x) + 1 for x in lines[i:j]) > MAX_CHUNK_CHARS:
            blocks.extend((k, k + 1) for k in range(i, j))  # a huge paragraph: line by line
        else:
            blocks.append((i, j))
        i = j
    out: list[Chunk] = []
    start, end, size = blocks[0][0], blocks[0][1], 0
    size = sum(len(x) + 1 for x in lines[start:end])
    for b_start, b_end in blocks[1:]:
        b_size = sum(len(x) + 1 for x in lines[end:b_end])
        if size + b_size > MAX_CHUNK_CHARS:
            out.append(_chunk(title, lines, start, end, first_line))
            start, size = b_start, sum(len(x) + 1 for x in lines[b_start:b_end])
        else:
            size += b_size
        end = b_end
    out.append(_chunk(title, lines, start, end, first_line))
    return out


def _chunk(title: str, lines: list[str], start: int, end: int, first_line: int) -> Chunk:
    return Chunk(title, first_line + start, first_line + end - 1, "\n".join(lines[start:end]))
