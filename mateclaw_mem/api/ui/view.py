"""What a page shows of Markdown and of changes: a line-by-line rendering (every character escaped,
no HTML from a file ever reaches the page, secrets redacted), unified diffs and search snippets.

Rendering line by line (headings, list items, quotes, code fences, plain lines) keeps one element per
file line with `id="L<n>"`, so a search hit links straight to its line.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from markupsafe import Markup, escape

from mateclaw_mem.redaction import redact

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_ITEM = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s+(.*)$")
_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_MARK = re.compile(r"\[\[(.+?)\]\]")


def inline(text: str) -> Markup:
    """One line's text: escaped first, then only `code` and **bold** become tags."""
    safe = str(escape(redact(text)))
    safe = _CODE.sub(r"<code>\1</code>", safe)
    return Markup(_BOLD.sub(r"<strong>\1</strong>", safe))


def render_markdown(text: str, first_line: int = 1) -> Markup:
    """`first_line`: the file's line number of `text`'s first line (a part of a file keeps its anchors)."""
    out: list[str] = []
    fenced = False
    for n, raw in enumerate(text.splitlines(), start=first_line):
        line = raw.rstrip()
        anchor = f' id="L{n}"'
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append(f'<div class="md-fence"{anchor}></div>')
            continue
        if fenced:
            out.append(f'<pre class="md-code"{anchor}>{escape(redact(raw))}</pre>')
            continue
        if m := _HEADING.match(line):
            level = min(len(m.group(1)) + 1, 6)  # the page owns <h1>
            out.append(f"<h{level}{anchor}>{inline(m.group(2))}</h{level}>")
        elif m := _ITEM.match(line):
            depth = min(len(m.group(1)) // 2, 4)
            out.append(f'<div class="md-li md-d{depth}"{anchor}>{inline(m.group(2))}</div>')
        elif line.startswith(">"):
            out.append(f'<blockquote{anchor}>{inline(line.lstrip("> "))}</blockquote>')
        elif not line:
            out.append(f'<div class="md-gap"{anchor}></div>')
        else:
            out.append(f'<p{anchor}>{inline(line)}</p>')
    return Markup("\n".join(out))


@dataclass(frozen=True)
class DiffLine:
    kind: str  # add | del | hunk | ctx | head
    text: str


def diff_lines(diff: str) -> list[DiffLine]:
    """A unified diff as lines with their kind, for colouring (the text stays escaped by the template)."""
    rows = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            kind = "head"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        rows.append(DiffLine(kind, line))
    return rows


@dataclass(frozen=True)
class SideRow:
    """One row of a side-by-side diff; `kind` is hunk | ctx | change, a side's text None when absent."""

    kind: str
    old_no: int | None = None
    old: str | None = None
    new_no: int | None = None
    new: str | None = None


def side_by_side(before: str, after: str, context: int = 3) -> list[SideRow]:
    """The change as aligned rows: old lines on the left, new on the right, 3 lines of context."""
    a, b = before.splitlines(), after.splitlines()
    rows: list[SideRow] = []
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context):
        (_, i0, _, j0, _), (_, _, i9, _, j9) = group[0], group[-1]
        rows.append(SideRow("hunk", old=f"@@ -{i0 + 1},{i9 - i0} +{j0 + 1},{j9 - j0} @@"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                rows += [SideRow("ctx", i1 + k + 1, a[i1 + k], j1 + k + 1, b[j1 + k]) for k in range(i2 - i1)]
                continue
            for k in range(max(i2 - i1, j2 - j1)):
                old = i1 + k < i2
                new = j1 + k < j2
                rows.append(SideRow("change", i1 + k + 1 if old else None, a[i1 + k] if old else None,
                                    j1 + k + 1 if new else None, b[j1 + k] if new else None))
    return rows


def unified(before: str, after: str, name: str, *, a: str = "before", b: str = "after") -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=f"{name} ({a})", tofile=f"{name} ({b})"))


def snippet(text: str) -> Markup:
    """A search snippet: escaped, with the index's `[[term]]` marks as <mark>."""
    return Markup(_MARK.sub(r"<mark>\1</mark>", str(escape(redact(text)))))
