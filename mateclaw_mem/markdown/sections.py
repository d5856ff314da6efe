"""`##` sections: the unit that ceilings cut at, merges replace and pins protect.

A section runs from its `## ` heading to the next `## ` heading (deeper headings stay inside).
Headings inside fenced code blocks are not headings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PIN_MARK = "<!-- pin -->"
_PIN_RE = re.compile(r"<!--\s*pin\s*-->", re.IGNORECASE)
_H2 = re.compile(r"^##(?!#)[ \t]*(.*?)[ \t#]*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class Section:
    title: str
    text: str  # heading line through the end of the section, newlines included

    @property
    def key(self) -> str:
        return normalise_title(self.title)

    @property
    def pinned(self) -> bool:
        return bool(_PIN_RE.search(self.text))


def normalise_title(title: str) -> str:
    """Match headings ignoring case and spacing (`##  My  Notes` == `## my notes`)."""
    return " ".join(title.split()).casefold()


def split_sections(body: str) -> tuple[str, list[Section]]:
    """Return (preamble before the first `##`, sections). `join` restores the text exactly."""
    lines = body.splitlines(keepends=True)
    preamble: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    in_fence = False
    for line in lines:
        if _FENCE.match(line):
            in_fence = not in_fence
        m = None if in_fence else _H2.match(line.rstrip("\r\n"))
        if m:
            sections.append((m.group(1), [line]))
        elif sections:
            sections[-1][1].append(line)
        else:
            preamble.append(line)
    return "".join(preamble), [Section(t, "".join(ls)) for t, ls in sections]


def join(preamble: str, sections: list[Section]) -> str:
    out = preamble
    for s in sections:
        if out and not out.endswith("\n"):
            out += "\n"
        out += s.text
    return out


def find(sections: list[Section], title: str) -> int | None:
    key = normalise_title(title)
    for i, s in enumerate(sections):
        if s.key == key:
            return i
    return None


def preserve_pinned(old_body: str, new_body: str) -> str:
    """Put every pinned section of `old_body` back into `new_body` verbatim.

    A machine writer may rewrite anything else; a pinned section it changed is restored in place,
    one it dropped is re-inserted after the section that preceded it (or at the end).
    """
    _, old_sections = split_sections(old_body)
    pinned = [(i, s) for i, s in enumerate(old_sections) if s.pinned]
    if not pinned:
        return new_body
    preamble, sections = split_sections(new_body)
    for old_index, section in pinned:
        at = find(sections, section.title)
        if at is not None:
            if sections[at].text.rstrip() != section.text.rstrip():
                sections[at] = section
            continue
        insert_at = len(sections)
        for prev in reversed(old_sections[:old_index]):
            found = find(sections, prev.title)
            if found is not None:
                insert_at = found + 1
                break
        else:
            if old_index == 0:
                insert_at = 0
        text = section.text if section.text.endswith("\n") else section.text + "\n"
        sections.insert(insert_at, Section(section.title, text))
    return join(preamble, sections)
