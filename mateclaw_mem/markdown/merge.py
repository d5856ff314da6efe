"""Merge strategies for programmatic writes (the seed's workflow `write_memory`).

Each takes the current body and the incoming content and returns the new body; the store applies
locks, compare-and-swap, ceilings and history around them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.markdown.sections import Section, find, join, split_sections

Strategy = Literal["append", "replace_section", "upsert_kv", "overwrite"]
STRATEGIES: tuple[str, ...] = ("append", "replace_section", "upsert_kv", "overwrite")

_KV = re.compile(r"^(?P<indent>[ \t]*(?:[-*+][ \t]+)?)(?P<key>[^:：\n]+?)[ \t]*(?P<sep>[:：])[ \t]*(?P<value>.*)$")


def append(body: str, content: str) -> str:
    if not content.strip():
        return body
    if body and not body.endswith("\n"):
        body += "\n"
    sep = "\n" if body.strip() else ""
    return body + sep + content.rstrip("\n") + "\n"


def overwrite(body: str, content: str) -> str:
    return content if content.endswith("\n") or not content else content + "\n"


def replace_section(body: str, content: str, section: str | None = None) -> str:
    """Replace the `##` section whose title matches (case and spacing ignored), or add it at the end.

    `content` may carry its own `## title` line; otherwise `section` names it and the content is the
    section's text below the heading.
    """
    incoming_pre, incoming = split_sections(content)
    if incoming and not incoming_pre.strip():
        new_sections = incoming
    else:
        if not section:
            raise InvalidInputError("replace_section needs a section title or content starting with '## title'")
        text = content.rstrip("\n")
        new_sections = [Section(section, f"## {section}\n{text}\n" if text else f"## {section}\n")]
    preamble, sections = split_sections(body)
    for new in new_sections:
        at = find(sections, new.title)
        new_text = new.text if new.text.endswith("\n") else new.text + "\n"
        if at is None:
            preamble = _add_section(preamble, sections, Section(new.title, new_text))
        else:
            # Keep the blank line that separated it from the next section.
            trailing = "\n" if sections[at].text.endswith("\n\n") and not new_text.endswith("\n\n") else ""
            sections[at] = Section(new.title, new_text + trailing)
    return join(preamble, sections)


def parse_kv(line: str) -> tuple[str, str] | None:
    m = _KV.match(line)
    if not m or m.group("key").strip().startswith("#"):
        return None
    return m.group("key").strip(), m.group("value").strip()


def upsert_kv(body: str, content: str, section: str | None = None) -> str:
    """Set `key: value` lines; an existing line with the same key (Unicode, case-insensitive) is
    replaced in place keeping its list marker, new keys are appended (to `section` if given)."""
    pairs = [kv for line in content.splitlines() if (kv := parse_kv(line))]
    if not pairs:
        raise InvalidInputError("upsert_kv needs 'key: value' lines")
    preamble, sections = split_sections(body)
    scope_index = find(sections, section) if section else None
    if section and scope_index is None:
        preamble = _add_section(preamble, sections, Section(section, f"## {section}\n"))
        scope_index = len(sections) - 1
    if scope_index is not None:
        scoped = sections[scope_index]
        sections[scope_index] = Section(scoped.title, _inside(scoped.text, lambda t: _upsert_lines(t, pairs)))
        return join(preamble, sections)
    return _upsert_lines(body, pairs)


def _inside(text: str, change: Callable[[str], str]) -> str:
    """Apply `change` to a section's text without its trailing blank lines, then put them back: new
    lines land under the section's last line, and the blank line before the next `##` stays."""
    core = text.rstrip("\n")
    changed = change(core + "\n" if core else "")
    if text.endswith("\n\n"):
        changed = changed.rstrip("\n") + text[len(core):]
    return changed


def _upsert_lines(text: str, pairs: list[tuple[str, str]]) -> str:
    lines = text.splitlines(keepends=True)
    style = "- "
    for line in lines:
        m = _KV.match(line.rstrip("\r\n"))
        if m and parse_kv(line.rstrip("\r\n")):
            style = m.group("indent")
            break
    for key, value in pairs:
        folded = key.casefold()
        for i, line in enumerate(lines):
            stripped = line.rstrip("\r\n")
            m = _KV.match(stripped)
            if m and parse_kv(stripped) and m.group("key").strip().casefold() == folded:
                ending = line[len(stripped) :] or "\n"
                lines[i] = f"{m.group('indent')}{m.group('key').strip()}{m.group('sep')} {value}{ending}"
                break
        else:
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            lines.append(f"{style}{key}: {value}\n")
    return "".join(lines)


def apply(strategy: str, body: str, content: str, section: str | None = None) -> str:
    if strategy == "append":
        if section:
            preamble, sections = split_sections(body)
            at = find(sections, section)
            if at is None:
                return replace_section(body, content, section)
            sections[at] = Section(sections[at].title, _inside(sections[at].text, lambda t: append(t, content)))
            return join(preamble, sections)
        return append(body, content)
    if strategy == "replace_section":
        return replace_section(body, content, section)
    if strategy == "upsert_kv":
        return upsert_kv(body, content, section)
    if strategy == "overwrite":
        return overwrite(body, content)
    raise InvalidInputError(f"unknown merge strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")


def append_missing(body: str, incoming: str) -> str:
    """Union of two versions of one file (an import's `merge`): `body` stays as it is, and what only
    `incoming` has is appended — whole `##` sections it lacks (by title), the lines a shared section
    lacks at that section's end, preamble lines at the preamble's end. Nothing is removed or reordered."""
    in_pre, in_sections = split_sections(incoming)
    preamble, sections = split_sections(body)
    missing = _missing_lines(preamble, in_pre)
    if missing:
        head = preamble.rstrip("\n") + "\n\n" if preamble.strip() else ""
        preamble = head + "\n".join(missing) + "\n" + ("\n" if sections else "")
    for new in in_sections:
        at = find(sections, new.title)
        if at is None:
            text = new.text if new.text.endswith("\n") else new.text + "\n"
            preamble = _add_section(preamble, sections, Section(new.title, text))
            continue
        old = sections[at].text
        lines = _missing_lines(old, new.text.split("\n", 1)[1] if "\n" in new.text else "")
        if lines:
            core = old.rstrip("\n")
            sections[at] = Section(sections[at].title, core + "\n" + "\n".join(lines) + (old[len(core):] or "\n"))
    return join(preamble, sections)


def _add_section(preamble: str, sections: list[Section], new: Section) -> str:
    """Append `new` after a blank line (added to whatever came last); returns the preamble, which
    gets that blank line when there are no sections yet."""
    if sections and not sections[-1].text.endswith("\n\n"):
        last = sections[-1]
        sections[-1] = Section(last.title, last.text.rstrip("\n") + "\n\n")
    elif not sections and preamble.strip() and not preamble.endswith("\n\n"):
        preamble = preamble.rstrip("\n") + "\n\n"
    sections.append(new)
    return preamble


def _missing_lines(have: str, incoming: str) -> list[str]:
    present = {line.strip() for line in have.splitlines() if line.strip()}
    out = []
    for line in incoming.splitlines():
        if line.strip() and line.strip() not in present:
            out.append(line.rstrip())
            present.add(line.strip())
    return out
