"""The seed's structured entry format, parsed and rendered without reformatting hand-written files.

    ## language
    Prefers answers in German.
    > Source: conversation 42 | Updated: 2026-11-30

One `##` section per entry: the heading is the key, the text follows, and the last `> Source: … |
Updated: YYYY-MM-DD` line carries where it came from and when it last changed. `<!-- pin -->` on a
line of its own pins the entry (no machine writer changes or removes it).

Entries keep the exact text they were parsed from (`raw`): `render` writes an untouched entry back
byte for byte, so a machine edit to one entry never reformats a person's other entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from mateclaw_mem.markdown.sections import PIN_MARK, split_sections

_PIN_LINE = re.compile(r"^\s*<!--\s*pin\s*-->\s*$", re.IGNORECASE)
# `> Source: X | Updated: D`, `> Source: X`, `> Updated: D` — people write any of these.
_META = re.compile(
    r"^>\s*(?:Source:\s*(?P<source>.*?)\s*(?:\|\s*Updated:\s*(?P<updated>\S+)\s*)?"
    r"|Updated:\s*(?P<updated_only>\S+)\s*)$",
    re.IGNORECASE,
)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class Entry:
    key: str
    text: str
    source: str = ""
    updated: str = ""  # YYYY-MM-DD, "" when the file does not say
    pinned: bool = False
    raw: str = ""  # the section exactly as parsed; "" for a new or changed entry
    # Lines below the `> Source` line: a machine renders that line last, so whatever follows it was
    # added by a person. They are part of `text` (what recall shows) and survive a `remember`.
    tail: str = ""

    @property
    def value(self) -> str:
        """The text without the person's tail: what a `remember` replaces."""
        if self.tail and self.text.endswith(self.tail):
            return self.text[: -len(self.tail)].rstrip("\n")
        return self.text

    @property
    def norm(self) -> str:
        return normalise_key(self.key)

    def changed(self, **changes: object) -> Entry:
        """A copy with `changes` applied that will be rendered afresh (its raw text is dropped)."""
        return replace(self, raw="", **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Document:
    preamble: str  # everything before the first `##` (frontmatter is handled by the caller)
    entries: list[Entry]


def normalise_key(key: str) -> str:
    """Keys match whole and case-insensitively, ignoring runs of spaces — never as prefixes."""
    return " ".join(key.split()).casefold()


def parse(body: str) -> Document:
    preamble, sections = split_sections(body)
    entries: list[Entry] = []
    for section in sections:
        lines = section.text.splitlines()[1:]  # drop the heading line
        pinned = False
        source, updated = "", ""
        meta_at: int | None = None
        for i, line in enumerate(lines):
            m = _META.match(line.strip())
            if m:
                meta_at = i
                source = (m.group("source") or "").strip()
                updated = (m.group("updated") or m.group("updated_only") or "").strip()
        kept: list[str] = []
        tail: list[str] = []
        for i, line in enumerate(lines):
            if i == meta_at:
                continue
            if _PIN_LINE.match(line):
                pinned = True
                continue
            kept.append(line)
            if meta_at is not None and i > meta_at:
                tail.append(line)
        if not _DATE.match(updated):
            updated = ""
        entries.append(
            Entry(
                key=section.title.strip(),
                text="\n".join(kept).strip(),
                source=source,
                updated=updated,
                pinned=pinned or section.pinned,
                raw=section.text,
                tail="\n".join(tail).strip(),
            )
        )
    return Document(preamble, entries)


def render_entry(entry: Entry) -> str:
    if entry.raw:
        return entry.raw
    parts = [f"## {entry.key}\n"]
    if entry.pinned:
        parts.append(PIN_MARK + "\n")
    if entry.value:
        parts.append(entry.value.rstrip("\n") + "\n")
    meta = [f"Source: {entry.source or 'unknown'}"]
    if entry.updated:
        meta.append(f"Updated: {entry.updated}")
    parts.append("> " + " | ".join(meta) + "\n")
    if entry.tail:
        parts.append(entry.tail.rstrip("\n") + "\n")
    return "".join(parts) + "\n"


def render(doc: Document) -> str:
    out = doc.preamble
    for entry in doc.entries:
        if out and not out.endswith("\n"):
            out += "\n"
        if out and not out.endswith("\n\n") and not entry.raw:
            out += "\n"  # a fresh entry after a hand-written one without a trailing blank line
        out += render_entry(entry)
    return out


def find(entries: list[Entry], key: str) -> int | None:
    """Index of the entry whose whole key matches (`lang` does not find `language`)."""
    wanted = normalise_key(key)
    for i, entry in enumerate(entries):
        if entry.norm == wanted:
            return i
    return None


def one_line(text: str) -> str:
    """An entry's text on a single line, for compact prompt blocks."""
    return " ".join(text.split())
