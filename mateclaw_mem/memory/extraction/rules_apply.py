"""Rules mode, the writing half: facts (memory/extraction/rules.py) applied to the files, and
`extract(profile=..., memory=..., messages=[...], today=...)`, which returns the same
`ExtractionResult` the model returns.

Profile facts become `- key: value` lines under `## Profile` in PROFILE.md; remembered notes and
decisions become bullets under `## Remembered` / `## Decisions` in MEMORY.md (Chinese labels when
the person writes Chinese; an existing label in either language is reused). A corrected value
replaces the old one, it is never kept twice.
"""

from __future__ import annotations

import re

from mateclaw_mem.llm.prompts.extraction import TITLE_MAX, DailyEntry, ExtractionResult
from mateclaw_mem.markdown.merge import parse_kv
from mateclaw_mem.markdown.sections import Section, find, join, split_sections
from mateclaw_mem.memory.extraction.rules import Fact, facts_from_text, is_zh

_LABELS: dict[str, tuple[str, str]] = {  # canonical -> (English, Chinese)
    "name": ("name", "姓名"),
    "role": ("role", "职业"),
    "employer": ("employer", "工作单位"),
    "location": ("location", "所在地"),
    "hometown": ("hometown", "家乡"),
    "timezone": ("timezone", "时区"),
    "likes": ("likes", "喜欢"),
    "prefers": ("prefers", "偏好"),
    "dislikes": ("dislikes", "不喜欢"),
    "tools": ("tools", "工具"),
    "languages": ("languages", "语言"),
}
_ALIASES: dict[str, str] = {}
for _canon, (_en, _zh) in _LABELS.items():
    _ALIASES[_en] = _canon
    _ALIASES[_zh] = _canon
_ALIASES.update(
    {
        "job": "role", "occupation": "role", "title": "role", "company": "employer", "works at": "employer",
        "city": "location", "lives in": "location", "time zone": "timezone", "tz": "timezone",
        "stack": "tools", "tech stack": "tools", "dislike": "dislikes", "like": "likes", "preferences": "prefers",
        "名字": "name", "工作": "role", "公司": "employer", "城市": "location", "住址": "location",
        "技术栈": "tools", "偏爱": "prefers",
    }
)

_SECTIONS: dict[str, tuple[str, str]] = {
    "profile": ("Profile", "个人资料"),
    "remembered": ("Remembered", "记住的事"),
    "decisions": ("Decisions", "决定"),
}
_SECTION_ALIASES = {
    "profile": ("profile", "个人资料", "资料", "about", "基本信息"),
    "remembered": ("remembered", "记住的事", "notes", "facts", "备忘", "记住"),
    "decisions": ("decisions", "决定", "决策"),
}


# -- applying facts to files ---------------------------------------------------------------------


def _section_label(canon: str, sections: list[Section], zh: bool) -> tuple[int | None, str]:
    for alias in _SECTION_ALIASES[canon]:
        at = find(sections, alias)
        if at is not None:
            return at, sections[at].title
    en, zh_label = _SECTIONS[canon]
    return None, zh_label if zh else en


def _ensure_section(body: str, canon: str, zh: bool) -> tuple[str, list[Section], int]:
    preamble, sections = split_sections(body)
    at, title = _section_label(canon, sections, zh)
    if at is None:
        if sections and not sections[-1].text.endswith("\n\n"):
            sections[-1] = Section(sections[-1].title, sections[-1].text.rstrip("\n") + "\n\n")
        elif not sections and preamble.strip() and not preamble.endswith("\n\n"):
            preamble = preamble.rstrip("\n") + "\n\n"
        sections.append(Section(title, f"## {title}\n"))
        at = len(sections) - 1
    return preamble, sections, at


def _kv_lines(section_text: str) -> list[tuple[int, str, str]]:
    out = []
    for i, line in enumerate(section_text.splitlines()):
        if i == 0:
            continue  # heading
        kv = parse_kv(line)
        if kv and line.lstrip().startswith(("-", "*", "+")):
            out.append((i, kv[0], kv[1]))
    return out


def _items(value: str) -> list[str]:
    return [p.strip() for p in re.split(r"[;；、]|,\s*", value) if p.strip()]


def apply_profile_facts(body: str, facts: list[Fact]) -> tuple[str, list[str]]:
    """Upsert profile facts into `## Profile`. Returns (new body, human-readable changes)."""
    facts = [f for f in facts if f.kind == "profile"]
    if not facts:
        return body, []
    zh_default = sum(f.zh for f in facts) * 2 > len(facts)
    preamble, sections, at = _ensure_section(body, "profile", zh_default)
    lines = sections[at].text.splitlines()
    trailing_blank = sections[at].text.endswith("\n\n")
    changes: list[str] = []
    for fact in facts:
        existing = [(i, k, v) for i, k, v in _kv_lines("\n".join(lines)) if _ALIASES.get(k.casefold(), k) == fact.key]
        label = existing[0][1] if existing else _LABELS[fact.key][1 if fact.zh else 0]
        sep = "、" if is_zh(label) else ", "
        if fact.op == "set":
            if existing and existing[0][2].casefold() == fact.value.casefold():
                continue
            new_line = f"- {label}: {fact.value}"
            if existing:
                i = existing[0][0]
                changes.append(f"{label}: {existing[0][2]} → {fact.value}")
                lines[i] = _keep_marker(lines[i], new_line)
                for j, _, _ in reversed(existing[1:]):  # a duplicate key left by a hand edit
                    del lines[j]
            else:
                changes.append(f"{label}: {fact.value}")
                _append_line(lines, new_line)
        else:
            items = _items(existing[0][2]) if existing else []
            folded = [x.casefold() for x in items]
            if fact.op == "add":
                if fact.value.casefold() in folded:
                    continue
                items.append(fact.value)
                changes.append(f"{label} + {fact.value}")
            else:  # remove
                if fact.value.casefold() not in folded:
                    continue
                items = [x for x in items if x.casefold() != fact.value.casefold()]
                changes.append(f"{label} − {fact.value}")
            if existing:
                i = existing[0][0]
                if items:
                    lines[i] = _keep_marker(lines[i], f"- {label}: {sep.join(items)}")
                else:
                    del lines[i]
            elif items:
                _append_line(lines, f"- {label}: {sep.join(items)}")
    sections[at] = Section(sections[at].title, _section_text(lines, trailing_blank))
    return join(preamble, sections), changes


def _section_text(lines: list[str], trailing_blank: bool) -> str:
    return "\n".join(lines).rstrip("\n") + "\n" + ("\n" if trailing_blank else "")


def _keep_marker(old_line: str, new_line: str) -> str:
    indent = old_line[: len(old_line) - len(old_line.lstrip())]
    marker = old_line.lstrip()[:1]
    return indent + (marker if marker in "-*+" else "-") + new_line[1:]


def _append_line(lines: list[str], line: str) -> None:
    # Insert after the last non-blank line of the section.
    at = len(lines)
    while at > 1 and not lines[at - 1].strip():
        at -= 1
    lines.insert(at, line)


def apply_memory_facts(body: str, facts: list[Fact], today: str) -> tuple[str, list[str]]:
    """Bullets under `## Remembered` / `## Decisions`; "not X but Y" corrections replace X in place."""
    changes: list[str] = []
    for fact in facts:
        if fact.kind == "replace":
            body, changed = _replace_word(body, fact.old, fact.value)
            if changed:
                changes.append(f"{fact.old} → {fact.value}")
            continue
        if fact.kind not in ("remember", "decision"):
            continue
        canon = "remembered" if fact.kind == "remember" else "decisions"
        preamble, sections, at = _ensure_section(body, canon, fact.zh)
        text = sections[at].text
        existing = {ln.lstrip("-*+ ").split(": ", 1)[-1].strip().casefold() for ln in text.splitlines()[1:]}
        if fact.value.casefold() in existing or fact.value.casefold() in {e.strip() for e in existing}:
            continue
        line = f"- {fact.value}" if fact.kind == "remember" else f"- {today}: {fact.value}"
        lines = text.splitlines()
        trailing_blank = text.endswith("\n\n")
        _append_line(lines, line)
        sections[at] = Section(sections[at].title, _section_text(lines, trailing_blank))
        body = join(preamble, sections)
        changes.append(line[2:])
    return body, changes


def _replace_word(body: str, old: str, new: str) -> tuple[str, bool]:
    if not old or not new:
        return body, False
    pattern = re.compile(re.escape(old) if is_zh(old) else rf"(?<!\w){re.escape(old)}(?!\w)", re.IGNORECASE)
    out: list[str] = []
    changed = False
    for line in body.splitlines(keepends=True):
        if line.lstrip().startswith(("-", "*", "+")) and pattern.search(line):
            line = pattern.sub(new, line)
            changed = True
        out.append(line)
    return "".join(out), changed


# -- the extractor -------------------------------------------------------------------------------


def extract(*, profile: str, memory: str, messages: list[str], today: str) -> ExtractionResult:
    """Rules-mode extraction over the person's new messages. `profile`/`memory` are file bodies
    (no frontmatter); updates are full new bodies, "" when unchanged."""
    facts: list[Fact] = []
    for text in messages:
        facts.extend(facts_from_text(text))
    if not facts:
        return ExtractionResult(
            should_update=False, reason="rules: no facts, requests or decisions in the new messages"
        )
    new_profile, p_changes = apply_profile_facts(profile, facts)
    replace_facts = [f for f in facts if f.kind == "replace"]
    if replace_facts:
        new_profile, extra = apply_memory_facts(new_profile, replace_facts, today)
        p_changes += extra
    new_memory, m_changes = apply_memory_facts(memory, [f for f in facts if f.kind != "profile"], today)
    if not p_changes and not m_changes:
        return ExtractionResult(should_update=False, reason="rules: everything said is already recorded")
    zh = sum(f.zh for f in facts) * 2 > len(facts)
    kinds = {f.kind for f in facts}
    if "remember" in kinds:
        title = "记住" if zh else "Remembered"
    elif "decision" in kinds:
        title = "决定" if zh else "Decision"
    elif any(f.kind == "replace" or "→" in c for f in facts for c in p_changes):
        title = "更正" if zh else "Correction"
    else:
        title = "个人资料更新" if zh else "Profile update"
    first = (m_changes or p_changes)[0]
    title = f"{title}: {first}" if not zh else f"{title}：{first}"
    if len(title) > TITLE_MAX:
        title = title[: TITLE_MAX - 1].rstrip() + "…"
    body = "\n".join(f"- {c}" for c in [*p_changes, *m_changes])
    reason = f"rules: {len(p_changes)} profile change(s), {len(m_changes)} memory change(s)"
    return ExtractionResult(
        should_update=True,
        reason=reason,
        daily_entry=DailyEntry(title=title, body=body),
        profile_update=new_profile if p_changes and new_profile != profile else "",
        memory_update=new_memory if m_changes and new_memory != memory else "",
    )
