"""`##` sections: the unit that ceilings cut at, merges replace and pins protect.

A section runs from its `## ` heading to the next `## ` heading (deeper headings stay inside).
Headings inside fenced code blocks are not headings.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

PIN_MARK = "<!-- pin -->"
_PIN_RE = re.compile(r"<!--\s*pin\s*-->", re.IGNORECASE)
_H2 = re.compile(r"^##(?!#)[ \t]*(.*?)[ \t#]*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class Section:
    title: str
    text: str  # heading line through the end of the section, newlines included

    @cached_property
    def key(self) -> str:
        # Cached: the loops over a file's sections read it once per section, not once per lookup.
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
    parts = [preamble]  # one join: `out += text` copied the whole body per section (1 s at 30,000)
    ends = preamble.endswith("\n") or not preamble
    for s in sections:
        if not ends:
            parts.append("\n")
        parts.append(s.text)
        ends = s.text.endswith("\n") or (not s.text and ends)
    return "".join(parts)


def find(sections: list[Section], title: str) -> int | None:
    key = normalise_title(title)
    for i, s in enumerate(sections):
        if s.key == key:
            return i
    return None


def positions(sections: list[Section]) -> dict[str, int]:
    """Each key's first index (what `find` answers), for a loop that looks up many sections: a
    `find` per section made a 30,000-heading file cost 30,000^2 comparisons (a machine write 29 s)."""
    out: dict[str, int] = {}
    for i, s in enumerate(sections):
        out.setdefault(s.key, i)
    return out


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
    at_of = positions(sections)
    for old_index, section in pinned:
        at = at_of.get(section.key)
        if at is not None:
            if sections[at].text.rstrip() != section.text.rstrip():
                sections[at] = section
            continue
        reinsert(sections, old_sections, old_index, at_of)
    return join(preamble, sections)


def reinsert(sections: list[Section], old_sections: list[Section], old_index: int,
             at_of: dict[str, int] | None = None) -> None:
    """Put old_sections[old_index], which `sections` lost, back where it was: after the section
    that preceded it (at the top if it was first, at the end if no neighbour is left). `at_of`
    (`positions(sections)`) is kept up to date when given."""
    index = positions(sections) if at_of is None else at_of
    insert_at = len(sections)
    for i in range(old_index - 1, -1, -1):
        found = index.get(old_sections[i].key)
        if found is not None:
            insert_at = found + 1
            break
    else:
        if old_index == 0:
            insert_at = 0
    section = old_sections[old_index]
    sections.insert(insert_at, Section(section.title, _ended(section.text)))
    if at_of is not None:
        at_of.clear()
        at_of.update(positions(sections))


def strip_pins(old_body: str, new_body: str) -> tuple[str, int]:
    """Only a person pins: remove every pin marker from a machine's text, except in the sections
    that were already pinned (`preserve_pinned` restores those verbatim). Returns (body, removed)."""
    _, old_sections = split_sections(old_body)
    pinned = {s.key for s in old_sections if s.pinned}
    preamble, sections = split_sections(new_body)
    removed = 0

    def clean(text: str) -> str:
        nonlocal removed
        out = []
        for line in text.splitlines(keepends=True):
            stripped, n = _PIN_RE.subn("", line)
            if n:
                removed += n
                if not stripped.strip():
                    continue  # a line that was only the marker goes entirely
                line = stripped
            out.append(line)
        return "".join(out)

    preamble = clean(preamble)
    sections = [s if s.key in pinned else Section(s.title, clean(s.text)) for s in sections]
    return join(preamble, sections), removed


def _line_key(line: str) -> str:
    """`name: Alex` and `- name: Alex Kim` share the key `name` (what a fact is about)."""
    text = line.strip().lstrip("-*+ ").strip()
    head, sep, _ = text.partition(":")
    return " ".join(head.split()).casefold() if sep and len(head) <= 60 else ""


def keep_person_lines(old_body: str, new_body: str, person: dict[str, set[str]],
                      line_id: Callable[[str], str]) -> str:
    """A machine may add to a person's section, never remove or change what the person wrote.

    `person` maps a section key to the ids of its lines a person wrote. A section the new body
    dropped comes back where it was; one whose person lines were changed is restored as the person
    left it, plus the machine's new lines that are not about the same key (`name: Alex` never sits
    beside the person's `name: Alex Kim`)."""
    if not person:
        return new_body
    old_pre, old_secs = split_sections(old_body)
    pre, secs = split_sections(new_body)
    pre_ids = person.get(PREAMBLE_KEY, set())
    if pre_ids and any(line_id(ln) in pre_ids and ln.strip() not in pre for ln in old_pre.splitlines()):
        pre = old_pre
    at_of = positions(secs)
    for i, old in enumerate(old_secs):
        ids = person.get(old.key)
        if not ids:
            continue
        mine = [ln for ln in old.text.splitlines()[1:] if ln.strip() and line_id(ln) in ids]
        if not mine:
            continue
        at = at_of.get(old.key)
        if at is None:
            reinsert(secs, old_secs, i, at_of)
            continue
        new_lines = secs[at].text.splitlines()
        present = {line_id(ln) for ln in new_lines}
        if all(line_id(ln) in present for ln in mine):
            continue
        old_ids = {line_id(ln) for ln in old.text.splitlines()}
        taken = {_line_key(ln) for ln in mine} - {""}
        added = [ln for ln in new_lines[1:] if ln.strip() and line_id(ln) not in old_ids
                 and _line_key(ln) not in taken]
        text = _ended(old.text)
        if added:
            text = text.rstrip("\n") + "\n" + "\n".join(added) + "\n\n"
        secs[at] = Section(old.title, text)
    return join(pre, [Section(s.title, _ended(s.text)) for s in secs])


def _ended(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


PREAMBLE_KEY = "\x00preamble"
