"""Learning-memory files as text: `learning/LEARNING.md`, `tasks/<slug>.md`, reflection archives.

Pure functions: parse what a person may have edited, and change one `##` section at a time so
everything else in the file (their own sections, wording, frontmatter keys and comments) stays byte
for byte. Numbers live in YAML frontmatter; words live in the body.

`learning/LEARNING.md`::

    ---
    enabled: false
    reflections: 2
    strategies: 1
    ---
    # Learning memory

    ## Stats
    free text
    ## Strategies
    - one strategy per bullet
    ## Category notes
    ### <category>
    notes
    ## Reflections
    ### 2026-11-30 09:15 · <task>      (newest first)
    the lesson

`tasks/<slug>.md` has `## Notes` and `## Strategies`; attempt_count, best_score, avg_score,
score_trend, best_score_breakdown and recent_scores are frontmatter keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.sections import Section, find, join, normalise_title, split_sections

STATS = "Stats"
STRATEGIES = "Strategies"
CATEGORIES = "Category notes"
REFLECTIONS = "Reflections"
NOTES = "Notes"
LEARNING_ORDER = (STATS, STRATEGIES, CATEGORIES, REFLECTIONS)
TASK_ORDER = (NOTES, STRATEGIES)

_FENCE = re.compile(r"^\s*(```|~~~)")
_H3 = re.compile(r"^###(?!#)[ \t]*(.*?)[ \t#]*$")
_LOW_HEADING = re.compile(r"^(#{1,3})(?=[ \t]|$)")
_BULLET = re.compile(r"^(?:[-*+]|\d+[.)])[ \t]+(.*)$")
_REFLECTION_HEADING = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2})(?:\s+·\s+(.+))?$")


@dataclass(frozen=True)
class Reflection:
    at: str  # "YYYY-MM-DD HH:MM" in the workspace timezone, "" when a hand-written heading has none
    task: str | None
    text: str
    heading: str = ""  # the heading as written; a hand-written one is kept as is

    @property
    def title(self) -> str:
        return self.heading or reflection_heading(self.at, self.task)


@dataclass
class LearningDoc:
    meta: dict[str, Any]
    stats: str = ""
    strategy_intro: str = ""  # prose a person wrote above the bullets; kept when the list changes
    strategies: list[str] = field(default_factory=list)
    category_intro: str = ""
    categories: list[tuple[str, str]] = field(default_factory=list)
    reflection_intro: str = ""
    reflections: list[Reflection] = field(default_factory=list)
    error: str | None = None  # frontmatter problem, if any


@dataclass
class TaskDoc:
    meta: dict[str, Any]
    notes: str = ""
    strategy_intro: str = ""
    strategies: list[str] = field(default_factory=list)
    error: str | None = None


# -- small text helpers ------------------------------------------------------------------------


def one_line(text: str) -> str:
    """Strategies are bullets: one line each, whitespace collapsed."""
    return " ".join(text.split())


def demote_headings(text: str) -> str:
    """Headings of level 1-3 inside an entry would end it (or its whole section) when the file is
    read back, so they become level 4. Fenced code is left alone."""
    out = []
    in_fence = False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            in_fence = not in_fence
        if not in_fence:
            line = _LOW_HEADING.sub("####", line, count=1)
        out.append(line)
    return "".join(out)


def reflection_heading(at: str, task: str | None) -> str:
    return f"{at} · {task}" if task else at


def split_level3(text: str) -> tuple[str, list[tuple[str, str]]]:
    """Split a section's content on `### ` headings (fence aware): (preamble, [(title, content)])."""
    preamble: list[str] = []
    parts: list[tuple[str, list[str]]] = []
    in_fence = False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            in_fence = not in_fence
        m = None if in_fence else _H3.match(line.rstrip("\r\n"))
        if m:
            parts.append((m.group(1).strip(), []))
        elif parts:
            parts[-1][1].append(line)
        else:
            preamble.append(line)
    return "".join(preamble), [(title, "".join(lines).strip("\n")) for title, lines in parts]


def section_content(sections: list[Section], title: str) -> str | None:
    """The text under a `##` heading (heading line removed), or None if there is no such section."""
    at = find(sections, title)
    if at is None:
        return None
    text = sections[at].text
    return text.split("\n", 1)[1] if "\n" in text else ""


def replace_section(body: str, title: str, content: str, *, order: tuple[str, ...] = ()) -> str:
    """Set the content under `## title`, keeping its heading line and every other section as is.

    A missing section is inserted after the nearest preceding one in `order` (or at the end)."""
    preamble, sections = split_sections(body)
    content = content.strip("\n")
    at = find(sections, title)
    if at is not None:
        heading = sections[at].text.split("\n", 1)[0]
        sections[at] = Section(sections[at].title, f"{heading}\n\n{content}\n\n" if content else f"{heading}\n\n")
        return join(preamble, sections).rstrip("\n") + "\n"
    new = Section(title, f"## {title}\n\n{content}\n\n" if content else f"## {title}\n\n")
    insert_at = len(sections)
    if title in order:
        for prev in reversed(order[: order.index(title)]):
            found = find(sections, prev)
            if found is not None:
                insert_at = found + 1
                break
        else:
            later = [find(sections, t) for t in order[order.index(title) + 1 :]]
            present = [i for i in later if i is not None]
            if present:
                insert_at = min(present)
    if insert_at > 0 and not sections[insert_at - 1].text.endswith("\n\n"):
        prev = sections[insert_at - 1]
        sections[insert_at - 1] = Section(prev.title, prev.text.rstrip("\n") + "\n\n")
    elif insert_at == 0 and preamble and not preamble.endswith("\n\n"):
        preamble = preamble.rstrip("\n") + "\n\n"
    sections.insert(insert_at, new)
    return join(preamble, sections).rstrip("\n") + "\n"


def pinned(body: str, title: str) -> bool:
    _, sections = split_sections(body)
    at = find(sections, title)
    return at is not None and sections[at].pinned


# -- strategies --------------------------------------------------------------------------------


def parse_strategies(content: str) -> tuple[str, list[str]]:
    """(prose before the first bullet, bullets). Indented lines continue the bullet above."""
    intro: list[str] = []
    items: list[str] = []
    for line in content.splitlines():
        stripped = line.strip()
        if stripped.startswith("<!--") and stripped.endswith("-->"):
            if not items:
                intro.append(line)
            continue
        m = _BULLET.match(stripped) if line[:1] not in (" ", "\t") or not items else None
        if m:
            items.append(one_line(m.group(1)))
        elif items and stripped:
            items[-1] = one_line(items[-1] + " " + stripped)
        elif not items:
            intro.append(line)
    return "\n".join(intro).strip("\n"), [i for i in items if i]


def render_strategies(intro: str, items: list[str]) -> str:
    bullets = "\n".join(f"- {one_line(i)}" for i in items)
    return "\n\n".join(p for p in (intro.strip("\n"), bullets) if p)


# -- categories and reflections ----------------------------------------------------------------


def render_categories(preamble: str, categories: list[tuple[str, str]]) -> str:
    parts = [preamble.strip("\n")] if preamble.strip() else []
    for name, notes in categories:
        parts.append(f"### {name}\n\n{notes.strip()}" if notes.strip() else f"### {name}")
    return "\n\n".join(parts)


def parse_reflections(content: str) -> tuple[str, list[Reflection]]:
    preamble, parts = split_level3(content)
    out = []
    for title, text in parts:
        m = _REFLECTION_HEADING.match(title)
        if m:
            out.append(Reflection(m.group(1), (m.group(2) or "").strip() or None, text.strip(), title))
        else:
            out.append(Reflection("", None, text.strip(), title))
    return preamble, out


def render_reflections(preamble: str, reflections: list[Reflection]) -> str:
    parts = [preamble.strip("\n")] if preamble.strip() else []
    parts += [f"### {r.title}\n\n{r.text.strip()}" for r in reflections]
    return "\n\n".join(parts)


def render_archive_entries(reflections: list[Reflection]) -> str:
    return "\n\n".join(f"### {r.title}\n\n{r.text.strip()}" for r in reflections)


# -- whole files -------------------------------------------------------------------------------


def new_learning_text() -> str:
    return (
        "---\nenabled: false\nreflections: 0\nstrategies: 0\n---\n"
        "# Learning memory\n\n"
        "What this agent has learned across tasks. Edit freely: the daemon keeps your wording.\n\n"
        f"## {STATS}\n\n## {STRATEGIES}\n\n## {CATEGORIES}\n\n## {REFLECTIONS}\n"
    )


def new_task_text(slug: str) -> str:
    meta = {
        "enabled": False,
        "task": slug,
        "attempt_count": 0,
        "best_score": None,
        "avg_score": None,
        "score_trend": "stable",
        "best_score_breakdown": {},
        "recent_scores": [],
    }
    return frontmatter.set_keys(f"# Task: {slug}\n\n## {NOTES}\n\n## {STRATEGIES}\n", meta)


def new_archive_text(month: str) -> str:
    return (
        f"---\nenabled: false\n---\n# Archived reflections — {month}\n\n"
        "Moved out of learning/LEARNING.md (the newest 20 are kept there).\n"
    )


def parse_learning(text: str) -> LearningDoc:
    parsed = frontmatter.parse(text)
    _, sections = split_sections(parsed.body)
    doc = LearningDoc(meta=parsed.meta, error=parsed.error)
    doc.stats = (section_content(sections, STATS) or "").strip()
    doc.strategy_intro, doc.strategies = parse_strategies(section_content(sections, STRATEGIES) or "")
    doc.category_intro, cats = split_level3(section_content(sections, CATEGORIES) or "")
    doc.categories = [(name, notes.strip()) for name, notes in cats if name]
    doc.reflection_intro, doc.reflections = parse_reflections(section_content(sections, REFLECTIONS) or "")
    return doc


def parse_task(text: str) -> TaskDoc:
    parsed = frontmatter.parse(text)
    _, sections = split_sections(parsed.body)
    doc = TaskDoc(meta=parsed.meta, error=parsed.error)
    doc.notes = (section_content(sections, NOTES) or "").strip()
    doc.strategy_intro, doc.strategies = parse_strategies(section_content(sections, STRATEGIES) or "")
    return doc


def set_meta(text: str, updates: dict[str, Any]) -> str:
    """Set frontmatter keys by editing their lines; if a key was written as a multi-line YAML value
    (which line editing cannot replace cleanly), rebuild the block from the parsed values instead."""
    candidate = frontmatter.set_keys(text, updates)
    parsed = frontmatter.parse(candidate)
    if not parsed.error and all(parsed.meta.get(k) == v for k, v in updates.items()):
        return candidate
    old = frontmatter.parse(text)
    meta = {**(old.meta if not old.error else {}), **updates}
    block = "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, default_flow_style=None) + "---\n"
    return block + old.body


def category_key(name: str) -> str:
    return normalise_title(name)
