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


def apply_ceiling(body: str, cap: int, archive: str) -> CeilingResult:
    """Fit `body` under `cap` chars (0 = unlimited). `archive` names where the cut text will live."""
    clean = strip_marker(body)
    if cap <= 0 or len(body) <= cap:
        return CeilingResult(body, "")
    if len(clean) <= cap:
        return CeilingResult(clean, "")
    # Reserve room for the marker line itself.
    budget = max(0, cap - len(marker(cap, 10**9, archive)))
    preamble, sections = split_sections(clean)
    kept: list[Section] = []
    cut: list[str] = []
    pinned_size = sum(len(s.text) for s in sections if s.pinned)
    used = len(preamble) + pinned_size
    cutting = False
    if used > budget:
        head, tail = _cut_lines(preamble, max(0, budget - pinned_size))
        preamble, cut = head, [tail]
        used = len(preamble) + pinned_size
        cutting = True
    for s in sections:
        if s.pinned:
            kept.append(s)
            continue
        if not cutting and used + len(s.text) <= budget:
            kept.append(s)
            used += len(s.text)
            continue
        if not cutting and not any(not k.pinned for k in kept):
            # The first section alone exceeds the cap: keep what fits of it, at a line boundary.
            head, tail = _cut_lines(s.text, budget - used)
            if head.strip():
                kept.append(Section(s.title, head))
                used += len(head)
                cut.append(tail)
                cutting = True
                continue
        cutting = True
        cut.append(s.text)
    cut_text = "".join(cut)
    if not cut_text.strip():
        return CeilingResult(clean, "")
    new_body = join(preamble, kept)
    if not new_body.endswith("\n"):
        new_body += "\n"
    new_body += marker(cap, len(cut_text), archive)
    return CeilingResult(new_body, cut_text)
