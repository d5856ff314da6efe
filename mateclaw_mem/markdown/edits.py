"""Small named edits to a Markdown body: add, update or remove one bullet, or remove a `##` section.

Model steps answer with edits instead of whole new files (a small model cannot rewrite a file, a big
one rewrites slowly, and a rewrite is how facts erode). `apply_edits` carries them out
deterministically and touches nothing an edit does not name: every other byte of the body stays.

    result = apply_edits(body, [Edit("update", section="Preferences", old="prefers dark mode",
                                     text="prefers light mode")], default_section="Notes")
    result.body, result.applied, result.skipped   # skipped: (index, reason) -- never silent

Matching `old` to a line is forgiving about list marks, case, spacing and a trailing full stop, then
falls back to the `key:` of a `key: value` line, then to a unique line containing it; an ambiguous or
missing match skips the edit with its reason rather than guessing. Pinned sections are never edited.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from mateclaw_mem.markdown.merge import parse_kv
from mateclaw_mem.markdown.sections import Section, join, normalise_title, split_sections

_MARK = re.compile(r"^(?P<indent>\s*)(?P<mark>(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?)?")
_TRAIL = " \t.。!！;；,，"
_PIN = re.compile(r"<!--\s*pin\s*-->", re.IGNORECASE)
CONTAINS_MIN_CHARS = 8  # below this a substring match is too likely to hit the wrong line


@dataclass(frozen=True)
class Edit:
    op: str  # "add" | "update" | "remove"
    section: str = ""  # the `##` title it is about ("" = anywhere / the default section for add)
    old: str = ""  # the line to update or remove; "" with op "remove" removes the whole section
    text: str = ""  # the new line(s) for add and update


@dataclass
class EditResult:
    body: str
    applied: list[int] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)


def line_key(line: str) -> str:
    """How lines are compared: no list mark, no case, single spaces, no trailing full stop."""
    m = _MARK.match(line)
    core = line[m.end():] if m else line
    return " ".join(core.split()).casefold().rstrip(_TRAIL)


def _bullets(text: str) -> list[str]:
    """The new lines an edit's text stands for, each as a `- ` bullet unless it carries its own mark."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _MARK.match(line)
        out.append(line if m and m.group("mark") else f"- {line}")
    return out


def apply_edits(body: str, edits: list[Edit], *, default_section: str = "") -> EditResult:
    """Apply `edits` in order; each sees the body the previous ones left."""
    result = EditResult(body)
    for i, edit in enumerate(edits):
        try:
            result.body = _apply(result.body, edit, default_section)
        except _Skip as why:
            result.skipped.append((i, str(why)))
        else:
            result.applied.append(i)
    return result


class _Skip(Exception):
    pass


def _apply(body: str, edit: Edit, default_section: str) -> str:
    if any(line.lstrip().startswith("#") for line in edit.text.splitlines()):
        raise _Skip("the text holds a heading; name the section in `section` instead")
    preamble, sections = split_sections(body)
    if edit.op == "add":
        return _add(body, preamble, sections, edit, default_section)
    if edit.op == "remove" and not edit.old.strip():
        at = find(sections, edit.section) if edit.section.strip() else None
        if at is None:
            raise _Skip(f"no section '## {edit.section}' to remove")
        if sections[at].pinned:
            raise _Skip(f"section '## {sections[at].title}' is pinned")
        del sections[at]
        return join(preamble, sections)
    if edit.op not in ("update", "remove"):
        raise _Skip(f"unknown op {edit.op!r}")
    lines = body.splitlines(keepends=True)
    at = _locate(lines, edit.old, _section_span(lines, edit.section))
    owner = _section_of(sections, preamble, at)
    if owner is not None and owner.pinned:
        raise _Skip(f"section '## {owner.title}' is pinned")
    if edit.op == "remove":
        del lines[at]
        return "".join(lines)
    new = _bullets(edit.text)
    if not new:
        raise _Skip("update without text; use remove")
    old_line = lines[at]
    m = _MARK.match(old_line)
    lead = (m.group("indent") + (m.group("mark") or "")) if m else ""
    first = new[0][_mark_end(new[0]):] if lead else new[0]
    ending = "\n" if old_line.endswith("\n") else ""
    replaced = [lead + first + "\n"] + [ln + "\n" for ln in new[1:]]
    replaced[-1] = replaced[-1][:-1] + ending
    lines[at:at + 1] = replaced
    return "".join(lines)


def _add(body: str, preamble: str, sections: list[Section], edit: Edit, default_section: str) -> str:
    new = _bullets(edit.text)
    if not new:
        raise _Skip("add without text")
    title = edit.section.strip() or default_section
    at = find(sections, title) if title else None
    scope = sections[at].text if at is not None else (body if not title else "")
    have = {line_key(line) for line in scope.splitlines()}
    new = [line for line in new if line_key(line) not in have]
    if not new:
        raise _Skip("already there")
    if at is None and title:
        text = f"## {title}\n" + "".join(f"{line}\n" for line in new)
        out = body if not body or body.endswith("\n") else body + "\n"
        return out + ("\n" if out.strip() else "") + text
    if at is None:
        out = body if not body or body.endswith("\n") else body + "\n"
        return out + "".join(f"{line}\n" for line in new)
    if sections[at].pinned:
        raise _Skip(f"section '## {sections[at].title}' is pinned")
    text = sections[at].text
    core = text.rstrip("\n")
    sections[at] = Section(sections[at].title,
                           core + "\n" + "".join(f"{line}\n" for line in new) + text[len(core) + 1:])
    return join(preamble, sections)


def find(sections: list[Section], title: str) -> int | None:
    """The section titled `title`; a pin mark in the heading is not part of its name."""
    key = normalise_title(_PIN.sub("", title))
    for i, s in enumerate(sections):
        if normalise_title(_PIN.sub("", s.title)) == key:
            return i
    return None


def _mark_end(line: str) -> int:
    m = _MARK.match(line)
    return m.end() if m else 0


def _section_span(lines: list[str], title: str) -> tuple[int, int] | None:
    """Line range [start, end) of section `title`, or None for the whole body."""
    if not title.strip():
        return None
    body = "".join(lines)
    preamble, sections = split_sections(body)
    at = find(sections, title)
    if at is None:
        return None  # a wrong section name is a slip; the line is looked for everywhere
    start = preamble.count("\n") + sum(s.text.count("\n") for s in sections[:at])
    return start, start + sections[at].text.count("\n") + (0 if sections[at].text.endswith("\n") else 1)


def _locate(lines: list[str], old: str, span: tuple[int, int] | None) -> int:
    want = line_key(old.strip().splitlines()[0] if old.strip() else "")
    if not want:
        raise _Skip("no line named in `old`")
    ranges = [span, None] if span is not None else [None]
    for rng in ranges:
        lo, hi = rng if rng is not None else (0, len(lines))
        idx = range(lo, min(hi, len(lines)))
        for matcher in (_exact(want), _same_key(old), _contains(want)):
            hits = [i for i in idx if not lines[i].lstrip().startswith("#") and matcher(lines[i])]
            if len(hits) == 1:
                return hits[0]
            if len(hits) > 1:
                raise _Skip(f"{len(hits)} lines match {old.strip()[:60]!r}; quote the whole line")
    raise _Skip(f"no line matches {old.strip()[:60]!r}")


def _exact(want: str) -> Callable[[str], bool]:
    return lambda line: line_key(line) == want


def _same_key(old: str) -> Callable[[str], bool]:
    kv = parse_kv(old.strip())
    if kv is None:
        return lambda line: False
    key = kv[0].casefold()
    return lambda line: (p := parse_kv(line.rstrip("\r\n"))) is not None and p[0].casefold() == key


def _contains(want: str) -> Callable[[str], bool]:
    if len(want) < CONTAINS_MIN_CHARS:
        return lambda line: False
    return lambda line: want in line_key(line)


def _section_of(sections: list[Section], preamble: str, line_no: int) -> Section | None:
    row = preamble.count("\n")
    for s in sections:
        n = s.text.count("\n") + (0 if s.text.endswith("\n") else 1)
        if row <= line_no < row + n:
            return s
        row += n
    return None


__all__ = ["CONTAINS_MIN_CHARS", "Edit", "EditResult", "apply_edits", "line_key", "normalise_title"]
