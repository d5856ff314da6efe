"""Rules-mode extraction scored against labelled messages (tests/data/rules_extraction_labelled.jsonl),
shared by tests/test_rules_precision.py (the quality gate) and scripts/bench/extraction_precision.py
(the figures).

Each labelled line is one message from the person, `{"text", "expect", "source"}`; `expect` lists
what a careful person keeping the assistant's memory would have written from that message alone:
`"profile:<key>: <value>"` (one item of a PROFILE.md line), `"memory: <text>"` (a remembered note or
a decision in MEMORY.md, without its date), `"replace: <old> -> <new>"` (a correction of memory
text). What rules mode writes is read back from the files it would write, not from its facts: the
message goes through `rules_apply.extract` against empty PROFILE.md / MEMORY.md and the added lines
are the items. A correction edits existing text and so writes nothing to empty files; those are
counted from the facts.

An item is right when it equals an expected item of its line after case, whitespace and punctuation
are normalised; precision is right / written, recall is right / expected.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from mateclaw_mem.markdown.merge import parse_kv
from mateclaw_mem.markdown.sections import split_sections
from mateclaw_mem.memory.extraction.rules import facts_from_text
from mateclaw_mem.memory.extraction.rules_apply import canonical_key, extract, section_kind

DATA = Path(__file__).resolve().parents[1] / "data" / "rules_extraction_labelled.jsonl"
TODAY = "2026-01-01"
_EMPTY_PROFILE = "# PROFILE.md\n"
_EMPTY_MEMORY = "# MEMORY.md\n"


@dataclass(frozen=True)
class Labelled:
    text: str
    expect: tuple[str, ...]
    source: str


def load(path: Path = DATA) -> list[Labelled]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row.get("text"), str) or not isinstance(row.get("expect"), list):
            raise ValueError(f"{path}:{n}: a line needs a text and an expect list")
        rows.append(Labelled(row["text"], tuple(row["expect"]), str(row.get("source", ""))))
    return rows


def written(text: str) -> list[str]:
    """The items rules mode writes for one message, in the labels' notation."""
    result = extract(profile=_EMPTY_PROFILE, memory=_EMPTY_MEMORY, messages=[text], today=TODAY)
    items: list[str] = []
    _, sections = split_sections(result.profile_update)
    for section in sections:
        for line in section.text.splitlines()[1:]:
            kv = parse_kv(line)
            key = canonical_key(kv[0]) if kv else None
            if kv and key:
                items.extend(f"profile:{key}: {v.strip()}" for v in re.split(r", |、", kv[1]) if v.strip())
    _, sections = split_sections(result.memory_update)
    for section in sections:
        kind = section_kind(section.title)
        for line in section.text.splitlines()[1:]:
            if not line.startswith("- ") or kind not in ("remembered", "decisions"):
                continue
            note = line[2:].removeprefix(f"{TODAY}: ") if kind == "decisions" else line[2:]
            items.append(f"memory: {note}")
    items.extend(f"replace: {f.old} -> {f.value}" for f in facts_from_text(text) if f.kind == "replace")
    return items


def normalise(item: str) -> str:
    kind, _, value = item.partition(":")
    if kind == "profile":
        key, _, value = value.partition(":")
        kind = f"profile:{key.strip().casefold()}"
    value = re.sub(r"[^\w]+", " ", value.replace("->", " → ").casefold()).strip()
    return f"{kind.strip()}: {value}"


def kind_of(item: str) -> str:
    return normalise(item).split(": ", 1)[0]


@dataclass
class Score:
    right: Counter[str] = field(default_factory=Counter)  # per kind
    wrong: Counter[str] = field(default_factory=Counter)
    missed: Counter[str] = field(default_factory=Counter)
    false_positives: list[tuple[str, str]] = field(default_factory=list)  # (item, message)
    misses: list[tuple[str, str]] = field(default_factory=list)

    @property
    def precision(self) -> float:
        made = sum(self.right.values()) + sum(self.wrong.values())
        return sum(self.right.values()) / made if made else 1.0

    @property
    def recall(self) -> float:
        wanted = sum(self.right.values()) + sum(self.missed.values())
        return sum(self.right.values()) / wanted if wanted else 1.0


def score(rows: list[Labelled]) -> Score:
    out = Score()
    for row in rows:
        expected = Counter(normalise(e) for e in row.expect)
        for item in written(row.text):
            key = normalise(item)
            if expected[key] > 0:
                expected[key] -= 1
                out.right[kind_of(item)] += 1
            else:
                out.wrong[kind_of(item)] += 1
                out.false_positives.append((item, row.text))
        for key, n in expected.items():
            for _ in range(n):
                out.missed[key.split(": ", 1)[0]] += 1
                out.misses.append((key, row.text))
    return out
