"""Rules mode, the writing half: facts (memory/extraction/rules.py) applied to the files, and
`extract(profile=..., memory=..., messages=[...], today=...)`, which returns the same
`ExtractionResult` the model returns.

Profile facts become `- key: value` lines in PROFILE.md: a key already there is changed in place,
under whatever heading holds it; a new one goes under `## Profile` (or beside the file's other
profile lines). Remembered notes and decisions become bullets under `## Remembered` / `## Decisions`
in MEMORY.md (Chinese labels when the person writes Chinese; an existing label in either language is
reused). A corrected value replaces the old one, it is never kept twice; a value that only says less
than the one there ("Alex" for "Alex Kim") changes nothing; a fact holding a secret or a redaction
placeholder is never written.
"""

from __future__ import annotations

import re

from mateclaw_mem.llm.prompts.extraction import TITLE_MAX, DailyEntry, ExtractionResult, shorten_title
from mateclaw_mem.markdown.merge import parse_kv
from mateclaw_mem.markdown.sections import Section, find, join, normalise_title, split_sections
from mateclaw_mem.memory.extraction.rules import Fact, facts_from_text, is_zh
from mateclaw_mem.memory.extraction.rules_notes import statements
from mateclaw_mem.redaction import find_secrets

# What mateclaw_mem/redaction.py leaves where a secret was: `[REDACTED:api_key]` (and a bare `[REDACTED]`).
_PLACEHOLDER = re.compile(r"\[REDACTED(?::[\w-]*)?\]", re.IGNORECASE)

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


def canonical_key(label: str) -> str | None:
    """The profile key a PROFILE.md label stands for ("Name", "姓名", "city" -> "name", "name",
    "location"); None for a label rules mode does not keep."""
    return _ALIASES.get(label.strip().casefold())


def section_kind(title: str) -> str | None:
    """"profile", "remembered" or "decisions" for a heading rules mode writes under (either language)."""
    key = normalise_title(title)
    return next((canon for canon, aliases in _SECTION_ALIASES.items()
                 if any(normalise_title(a) == key for a in aliases)), None)


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


def _kv_lines(lines: list[str], heading: bool = True) -> list[tuple[int, str, str]]:
    out = []
    for i, line in enumerate(lines):
        if i == 0 and heading:
            continue
        kv = parse_kv(line)
        if kv and line.lstrip().startswith(("-", "*", "+")):
            out.append((i, kv[0], kv[1]))
    return out


def _items(value: str) -> list[str]:
    return [p.strip() for p in re.split(r"[;；、]|,\s*", value) if p.strip()]


def apply_profile_facts(body: str, facts: list[Fact]) -> tuple[str, list[str]]:
    """Upsert profile facts into PROFILE.md. Returns (new body, human-readable changes).

    A key is found wherever the file holds it (under any heading, or none) and changed in place; a
    new key goes under `## Profile`, or where the file already keeps its profile lines. A value that
    says less than the one there ("Alex" against "Alex Kim") does not replace it unless it was said
    as a correction."""
    facts = [f for f in facts if f.kind == "profile"]
    if not facts:
        return body, []
    zh_default = sum(f.zh for f in facts) * 2 > len(facts)
    preamble, sections = split_sections(body)
    titles: list[str | None] = [None, *(s.title for s in sections)]  # region 0 is the preamble
    regions = [preamble.splitlines(), *(s.text.splitlines() for s in sections)]
    blank = [preamble.endswith("\n\n"), *(s.text.endswith("\n\n") for s in sections)]
    dirty: set[int] = set()
    changes: list[str] = []

    def place() -> int:  # the region new keys go to, made when the file has none
        at = _profile_region(sections, regions)
        if at is None:
            last = len(regions) - 1
            if last or "".join(regions[0]).strip():
                blank[last] = True
                dirty.add(last)
            _, title = _section_label("profile", [], zh_default)
            titles.append(title)
            regions.append([f"## {title}"])
            blank.append(False)
            at = len(regions) - 1
        dirty.add(at)
        return at

    for fact in facts:
        existing = [(r, i, k, v) for r, lines in enumerate(regions) for i, k, v in _kv_lines(lines, r > 0)
                    if _ALIASES.get(k.casefold(), k) == fact.key]
        label = existing[0][2] if existing else _LABELS[fact.key][1 if fact.zh else 0]
        sep = "、" if is_zh(label) else ", "
        if fact.op == "set":
            new_line = f"- {label}: {fact.value}"
            if existing:
                r, i, _, value = existing[0]
                if value.casefold() == fact.value.casefold() or (
                        not fact.corrects and _says_less(fact.value, value)):
                    continue
                changes.append(f"{label}: {value} → {fact.value}")
                regions[r][i] = _keep_marker(regions[r][i], new_line)
                for r2, j, _, _ in reversed(existing[1:]):  # a duplicate key left by a hand edit
                    if r2 == r:
                        del regions[r][j]
                dirty.add(r)
            else:
                changes.append(f"{label}: {fact.value}")
                r = place()
                _append_line(regions[r], new_line, floor=int(titles[r] is not None))
            continue
        items = _items(existing[0][3]) if existing else []
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
            r, i = existing[0][:2]
            if items:
                regions[r][i] = _keep_marker(regions[r][i], f"- {label}: {sep.join(items)}")
            else:
                del regions[r][i]
            dirty.add(r)
        elif items:
            r = place()
            _append_line(regions[r], f"- {label}: {sep.join(items)}", floor=int(titles[r] is not None))
    texts = [preamble, *(s.text for s in sections)] + [""] * (len(regions) - 1 - len(sections))
    for r in dirty:
        texts[r] = _section_text(regions[r], blank[r]) if regions[r] else ""
    return join(texts[0], [Section(t or "", x) for t, x in zip(titles[1:], texts[1:], strict=True)]), changes


def _profile_region(sections: list[Section], regions: list[list[str]]) -> int | None:
    """`## Profile` (or an alias); else the region already holding profile lines ("## About me")."""
    at, _ = _section_label("profile", sections, False)
    if at is not None:
        return at + 1
    for r, lines in enumerate(regions):
        if any(k.casefold() in _ALIASES for _, k, _ in _kv_lines(lines, r > 0)):
            return r
    return None


def _says_less(new: str, old: str) -> bool:
    """"Alex" against "Alex Kim", "北京" against "北京市朝阳区": the new reading is a part of the value
    already there, so replacing it would lose what the person wrote, not correct it."""
    if is_zh(new) or is_zh(old):
        return new.casefold() in old.casefold()
    words, have = re.findall(r"\w+", new.casefold()), re.findall(r"\w+", old.casefold())
    return bool(words) and len(words) < len(have) and all(w in have for w in words)


def _section_text(lines: list[str], trailing_blank: bool) -> str:
    return "\n".join(lines).rstrip("\n") + "\n" + ("\n" if trailing_blank else "")


def _keep_marker(old_line: str, new_line: str) -> str:
    indent = old_line[: len(old_line) - len(old_line.lstrip())]
    marker = old_line.lstrip()[:1]
    return indent + (marker if marker in "-*+" else "-") + new_line[1:]


def _append_line(lines: list[str], line: str, floor: int = 1) -> None:
    # Insert after the last non-blank line of the section (`floor`: 1 keeps it below the heading).
    at = len(lines)
    while at > floor and not lines[at - 1].strip():
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


def _holds_secret(fact: Fact) -> bool:
    """A placeholder is not a memory: "my API key [REDACTED:api_key]" in MEMORY.md is noise in every
    prompt and says nothing the person can use, and a raw secret must never reach a file at all."""
    return any(_PLACEHOLDER.search(text) or find_secrets(text) for text in (fact.value, fact.old) if text)


def extract(*, profile: str, memory: str, messages: list[str], today: str) -> ExtractionResult:
    """Rules-mode extraction over the person's new messages. `profile`/`memory` are file bodies
    (no frontmatter); updates are full new bodies, "" when unchanged."""
    facts: list[Fact] = []
    for text in messages:
        facts.extend(facts_from_text(text))
    kept = [f for f in facts if not _holds_secret(f)]
    # What they told about themselves beyond the facts: the day's ledger (rules_notes.py says why).
    used = {f.source for f in kept}
    said = list(dict.fromkeys(st for text in messages for st in statements(text)
                              if not any(st in u or u in st for u in used)))
    if not kept:
        if said:
            return _ledger_only(said)
        reason = ("rules: nothing kept - secrets are never written to memory" if facts else
                  "rules: no facts, requests or decisions in the new messages")
        return ExtractionResult(should_update=False, reason=reason)
    facts = kept
    new_profile, p_changes = apply_profile_facts(profile, facts)
    replace_facts = [f for f in facts if f.kind == "replace"]
    if replace_facts:
        new_profile, extra = apply_memory_facts(new_profile, replace_facts, today)
        p_changes += extra
    new_memory, m_changes = apply_memory_facts(memory, [f for f in facts if f.kind != "profile"], today)
    if not p_changes and not m_changes:
        if said:
            return _ledger_only(said)
        return ExtractionResult(should_update=False, reason="rules: everything said is already recorded")
    zh = sum(f.zh for f in facts) * 2 > len(facts)
    kinds = {f.kind for f in facts}
    # A run takes the new messages of every chat of the bucket: two chats' requests share this one
    # entry, and a heading naming only the first would hide the second.
    remembered = len({f.value for f in facts if f.kind == "remember" and f.value in m_changes})
    if remembered > 1:
        title = f"记住 {remembered} 件事" if zh else f"Remembered {remembered} notes"
    elif "remember" in kinds:
        title = "记住" if zh else "Remembered"
    elif "decision" in kinds:
        title = "决定" if zh else "Decision"
    elif any(f.kind == "replace" or "→" in c for f in facts for c in p_changes):
        title = "更正" if zh else "Correction"
    else:
        title = "个人资料更新" if zh else "Profile update"
    if remembered <= 1:
        first = (m_changes or p_changes)[0]
        title = shorten_title(f"{title}: {first}" if not zh else f"{title}：{first}", TITLE_MAX)
    body = "\n".join(f"- {c}" for c in [*p_changes, *m_changes, *said])
    reason = f"rules: {len(p_changes)} profile change(s), {len(m_changes)} memory change(s)"
    return ExtractionResult(
        should_update=True,
        reason=reason,
        daily_entry=DailyEntry(title=title, body=body),
        profile_update=new_profile if p_changes and new_profile != profile else "",
        memory_update=new_memory if m_changes and new_memory != memory else "",
    )


def _ledger_only(said: list[str]) -> ExtractionResult:
    """A run whose only news is what the person told about themselves: the daily note alone."""
    zh = is_zh(said[0])
    title = shorten_title(("说起：" if zh else "Said: ") + said[0], TITLE_MAX)
    return ExtractionResult(should_update=True, reason=f"rules: {len(said)} statement(s) for the daily note",
                            daily_entry=DailyEntry(title=title, body="\n".join(f"- {st}" for st in said)))
