"""Size ceilings: keep the head, cut at the last `##` boundary that fits, hand back what was cut.

Pinned sections are never cut. One visible marker line says where the rest went; an old marker is
removed before measuring so markers never stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mateclaw_mem.markdown.sections import Section, join, split_sections

MARKER_RE = re.compile(r"^> \[mateclaw\] .*ceiling.*$\n?", re.MULTILINE)


@dataclass(frozen=True)
class CeilingResult:
    body: str
    cut: str  # the removed text, verbatim, to be archived ("" when nothing was cut)

    @property
    def truncated(self) -> bool:
        return bool(self.cut)


def marker(cap: int, cut_chars: int, archive: str) -> str:
    return f"> [mateclaw] {cut_chars} chars over the {cap}-char ceiling moved to {archive}\n"


def strip_marker(body: str) -> str:
    return MARKER_RE.sub("", body)


def _cut_lines(text: str, budget: int) -> tuple[str, str]:
    """Cut at a line boundary (never mid-word) so that the head is at most `budget` chars."""
    lines = text.splitlines(keepends=True)
    head: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) > budget:
            break
        head.append(line)
        used += len(line)
    if not head and lines:
        # A single line longer than the budget: cut at the last space that fits.
        first = lines[0]
        space = first.rfind(" ", 0, budget)
        at = space if space > 0 else budget
        return first[:at].rstrip() + "\n", text[at:].lstrip(" ")
    return "".join(head), text[used:]


def apply_ceiling(body: str, cap: int, archive: str, *, protected: frozenset[str] | set[str] = frozenset(),
                  fresh: frozenset[str] | set[str] = frozenset()) -> CeilingResult:
    """Fit `body` under `cap` chars (0 = unlimited). `archive` names where the cut text will live.

    Pinned sections and those in `protected` (a person's) are never cut. Otherwise the tail goes
    first, as before; sections in `fresh` (what this write adds or changes) go only after every older
    machine section. When the protected text alone is over the cap, the file is over because of the
    person: fresh sections then stay (the file is flagged over budget), never straight to the archive."""
    clean = strip_marker(body)
    if cap <= 0 or len(body) <= cap:
        return CeilingResult(body, "")
    if len(clean) <= cap:
        return CeilingResult(clean, "")
    # Reserve room for the marker line itself.
    budget = max(0, cap - len(marker(cap, 10**9, archive)))
    preamble, sections = split_sections(clean)
    keep = [s.pinned or s.key in protected for s in sections]
    used = len(preamble) + sum(len(s.text) for s in sections)
    held = len(preamble) + sum(len(s.text) for s, k in zip(sections, keep, strict=True) if k)
    cut_at: set[int] = set()
    order = [i for i in reversed(range(len(sections))) if not keep[i] and sections[i].key not in fresh]
    if held <= budget:
        order += [i for i in reversed(range(len(sections))) if not keep[i] and sections[i].key in fresh]
    for i in order:
        if used <= budget:
            break
        cut_at.add(i)
        used -= len(sections[i].text)
    head_cut = ""
    machine = [i for i in range(len(sections)) if not keep[i]]
    if used > budget and not protected and not fresh and len(preamble) > budget - (held - len(preamble)):
        # Only machine text and the preamble alone is too long: cut it at a line, drop every section.
        preamble, head_cut = _cut_lines(preamble, max(0, budget - (held - len(preamble))))
        cut_at.update(machine)
    elif machine and not protected and set(machine) <= cut_at:
        # Every machine section had to go: keep what fits of the first one, at a line boundary.
        first = machine[0]
        room = budget - used
        head, tail = _cut_lines(sections[first].text, room) if room > 0 else ("", "")
        if head.strip():
            sections[first] = Section(sections[first].title, head)
            cut_at.discard(first)
            head_cut = tail
    # A cut preamble or first section comes before the whole sections after it, as in the file.
    cut_text = head_cut + "".join(sections[i].text for i in sorted(cut_at))
    if not cut_text.strip():
        return CeilingResult(clean, "")
    kept = [s for i, s in enumerate(sections) if i not in cut_at]
    new_body = join(preamble, kept)
    if not new_body.endswith("\n"):
        new_body += "\n"
    new_body += marker(cap, len(cut_text), archive)
    return CeilingResult(new_body, cut_text)
