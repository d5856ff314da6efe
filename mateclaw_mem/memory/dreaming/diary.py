"""DREAMS.md: the dreaming diary. One `## YYYY-MM-DD HH:MM Dreaming` entry per run, skipped and
failed runs included, oldest first (it is a journal: new entries go at the end).

Growth cap (`dreaming.diary-max-chars`): past it, the oldest entries move to monthly archives
`memory/dreams/YYYY-MM.md` — archive first, then remove from DREAMS.md, so a crash in between
leaves an entry twice, never zero times (a re-run skips entries the archive already holds).
The diary is never a dreaming input (candidates read `memory/YYYY-MM-DD.md` only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.sections import Section, join, split_sections
from mateclaw_mem.redaction import redact

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store import WorkspaceStore, WriteResult

DIARY_REL = "DREAMS.md"
ARCHIVE_DIR = "memory/dreams"
ACTOR = "dreaming"
_ENTRY_RE = re.compile(r"^(\d{4})-(\d{2})-\d{2} \d{2}:\d{2} Dreaming\b")
DIARY_HEAD = (
    "---\nenabled: false\n---\n# DREAMS.md — dreaming diary\n\n"
    "One entry per consolidation run, skipped and failed ones too. Older entries move to "
    "`memory/dreams/YYYY-MM.md`.\n"
)
LIST_LIMIT = 20  # candidates / promoted / kept shown per entry; the rest is counted

OUTCOME_LABELS = {
    "done": "done",
    "nothing_to_do": "nothing to do",
    "skipped": "skipped",
    "failed": "failed",
    "rejected": "rejected",
}


@dataclass
class DiaryEntry:
    when: datetime
    outcome: str  # done | nothing_to_do | skipped | failed | rejected
    reason: str
    run_id: str
    mode: str = "rules"
    trigger: str = "manual"
    topic: str | None = None
    owner: str | None = None
    looked_at: list[str] = field(default_factory=list)
    sections: int = 0
    memory_chars: int = 0
    candidates: list[dict[str, Any]] = field(default_factory=list)  # ScoredCandidate.as_dict(), best first
    promoted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    added: int = 0
    removed: int = 0
    archived: list[str] = field(default_factory=list)

    @property
    def heading(self) -> str:
        focus = f" [FOCUSED: {' '.join(self.topic.split())}]" if self.topic else ""
        return f"{self.when:%Y-%m-%d %H:%M} Dreaming{focus}"

    def render(self) -> str:
        label = OUTCOME_LABELS.get(self.outcome, self.outcome)
        lines = [f"## {self.heading}", ""]
        lines.append(f"- Outcome: **{label}**")
        who = f", owner {self.owner}" if self.owner else ""
        lines.append(f"- Run: `{self.run_id}` ({self.mode} mode, {self.trigger}{who})")
        read = [r for r in self.looked_at if "(skipped" not in r]
        skipped = [r for r in self.looked_at if "(skipped" in r]
        if read:
            span = read[-1] if len(read) == 1 else f"{read[-1]} … {read[0]}"
            lines.append(
                f"- Looked at: {len(read)} daily note{'s' if len(read) != 1 else ''} "
                f"({span}), {self.sections} section{'s' if self.sections != 1 else ''}; "
                f"MEMORY.md ({self.memory_chars} chars)"
            )
        else:
            lines.append(f"- Looked at: no daily notes; MEMORY.md ({self.memory_chars} chars)")
        if skipped:
            lines.append(f"- Could not read: {'; '.join(skipped)}")
        lines.append(f"- Changed: MEMORY.md +{self.added}/-{self.removed} lines")
        if self.archived:
            lines.append(f"- Archived: {', '.join(self.archived)}")
        lines.append(f"- Reason: {_one_line(self.reason) or '(none given)'}")
        if self.candidates:
            lines += ["", f"### Candidates ({len(self.candidates)}, best first)"]
            for c in self.candidates[:LIST_LIMIT]:
                lines.append(f"- {c['score']:.2f} {c['source']} — {_evidence(c)}")
            _more(lines, len(self.candidates))
        if self.promoted:
            lines += ["", "### Promoted"]
            lines += [f"- {_one_line(p)}" for p in self.promoted[:LIST_LIMIT]]
            _more(lines, len(self.promoted))
        if self.kept:
            lines += ["", "### Kept for next time"]
            lines += [f"- {_one_line(k)}" for k in self.kept[:LIST_LIMIT]]
            _more(lines, len(self.kept))
        return "\n".join(lines) + "\n"


def _evidence(c: dict[str, Any]) -> str:
    parts = [f"{c['days']} day{'s' if c['days'] != 1 else ''}",
             f"{c['sessions']} session{'s' if c['sessions'] != 1 else ''}"]
    if c.get("hits"):
        parts.append(f"{c['hits']} search hit{'s' if c['hits'] != 1 else ''}")
    if c.get("explicit"):
        parts.append("asked to remember")
    if c.get("topic_match"):
        parts.append(f"topic {c['topic_match']:.2f}")
    return ", ".join(parts)


def _more(lines: list[str], total: int) -> None:
    if total > LIST_LIMIT:
        lines.append(f"- … and {total - LIST_LIMIT} more")


def _one_line(text: str) -> str:
    # An entry line must never open a new `##` section of the diary.
    return " ".join(str(text).split()).lstrip("#").strip()


class Diary:
    def __init__(self, store: WorkspaceStore, *, max_chars: int) -> None:
        self.store = store
        self.max_chars = max_chars

    def append(self, agent: str, entry: DiaryEntry, *, owner: str | None = None) -> WriteResult:
        # Redacted whole: the reason is the model's words, topics and promoted lines come from people.
        text = redact(entry.render())

        def add(current: str) -> str:
            if not current:
                current = DIARY_HEAD
            return current.rstrip("\n") + "\n\n" + text

        result = self.store.update(agent, DIARY_REL, add, actor=ACTOR, owner=owner, reason=f"diary: {entry.run_id}")
        assert result is not None
        self.enforce_cap(agent, owner=owner)
        return result

    def entries(self, agent: str, *, owner: str | None = None) -> list[Section]:
        snap = self.store.read(agent, DIARY_REL, owner=owner)
        return split_sections(frontmatter.body(snap.text))[1] if snap.exists else []

    def latest(self, agent: str, *, owner: str | None = None) -> str | None:
        entries = self.entries(agent, owner=owner)
        return entries[-1].text.rstrip("\n") if entries else None

    def enforce_cap(self, agent: str, *, owner: str | None = None) -> list[str]:
        """Move the oldest entries to monthly archives until DREAMS.md fits. Returns archive files written."""
        if self.max_chars <= 0:
            return []
        snap = self.store.read(agent, DIARY_REL, owner=owner)
        if not snap.exists or len(snap.text) <= self.max_chars:
            return []
        _, sections = split_sections(frontmatter.body(snap.text))
        size = len(snap.text)
        moving: list[Section] = []
        # Always keep the newest entry, and never move a pinned one.
        for s in sections[:-1]:
            if size <= self.max_chars:
                break
            if s.pinned:
                continue
            moving.append(s)
            size -= len(s.text)
        if not moving:
            return []
        by_month: dict[str, list[Section]] = {}
        for s in moving:
            m = _ENTRY_RE.match(s.title)
            month = f"{m.group(1)}-{m.group(2)}" if m else f"{self.store.clock.now():%Y-%m}"
            by_month.setdefault(month, []).append(s)
        written = []
        for month, entries in sorted(by_month.items()):
            rel = f"{ARCHIVE_DIR}/{month}.md"

            def add(current: str, entries: list[Section] = entries, month: str = month) -> str | None:
                if not current:
                    current = f"---\nenabled: false\n---\n# Dreaming diary — {month}\n"
                new = [e for e in entries if e.text.rstrip("\n") not in current]
                if not new:
                    return None
                return current.rstrip("\n") + "\n\n" + "\n".join(e.text.rstrip("\n") + "\n" for e in new)

            self.store.update(agent, rel, add, actor=ACTOR, owner=owner, reason="diary archive")
            written.append(rel)
        moved = {s.text for s in moving}

        def drop(current: str) -> str | None:
            block, body = frontmatter.split(current)
            preamble, secs = split_sections(body)
            kept = [s for s in secs if s.text not in moved]
            if len(kept) == len(secs):
                return None
            return block + join(preamble, kept)

        self.store.update(agent, DIARY_REL, drop, actor=ACTOR, owner=owner, reason="diary cap: moved old entries")
        return written
