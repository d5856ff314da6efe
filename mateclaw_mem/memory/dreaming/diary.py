"""DREAMS.md: the dreaming diary. One `## YYYY-MM-DD HH:MM Dreaming` entry per run, skipped and
failed runs included, oldest first (it is a journal: new entries go at the end) — except quiet
nights: a run that had no daily note to look at writes a two-line entry at most once a week
(`QUIET_DAYS`). Replaying 272 chat days of LoCoMo wrote 208 entries that said only "no daily notes",
burying the nights that did something; the run log (runs.py) still records every run.

Growth cap (`dreaming.diary-max-chars`): past it, the oldest entries move to monthly archives
`memory/dreams/YYYY-MM.md` — archive first, then remove from DREAMS.md, so a crash in between
leaves an entry twice, never zero times (a re-run skips entries the archive already holds).
In their place one `## Archived dreams` section sums up what the archives hold: per month the runs,
their dates, outcomes and promoted facts, and the file. It is recomputed from the archive files each
time (never added to), so it cannot stack or drift, and it is bounded: the newest months get a line
each, older ones share one. No model is involved.
The diary is never a dreaming input (candidates read `memory/YYYY-MM-DD.md` only).
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.sections import Section, join, split_sections
from mateclaw_mem.memory.dreaming.report import render_lines
from mateclaw_mem.redaction import redact
from mateclaw_mem.workspace import month_archive
from mateclaw_mem.workspace.records import Step

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store import WorkspaceStore, WriteResult

DIARY_REL = "DREAMS.md"
ARCHIVE_DIR = "memory/dreams"
ACTOR = "dreaming"
_ENTRY_RE = re.compile(r"^(\d{4})-(\d{2})-\d{2} \d{2}:\d{2} Dreaming\b")
DIARY_HEAD = (
    "---\nenabled: false\n---\n# DREAMS.md — dreaming diary\n\n"
    "One entry per consolidation run, skipped and failed ones too. Older entries move to "
    "`memory/dreams/YYYY-MM.md`, summed up under `## Archived dreams`.\n"
)
SUMMARY_TITLE = "Archived dreams"
SUMMARY_MONTHS = 12  # months with a line of their own in the summary; older ones share one line
_ARCHIVE_RE = re.compile(rf"^{re.escape(ARCHIVE_DIR)}/(\d{{4}}-\d{{2}})\.md$")
_OUTCOME_RE = re.compile(r"^- Outcome: \*\*(.+?)\*\*", re.MULTILINE)
_MORE_RE = re.compile(r"^- … and (\d+) more")
LIST_LIMIT = 20  # candidates / promoted / kept shown per entry; the rest is counted
QUIET_DAYS = 7  # a quiet night is written when no other quiet entry is this close to its date
QUIET_LINE = "- Looked at: no daily notes"
_QUIET_RE = re.compile(rf"^{re.escape(QUIET_LINE)}\b", re.MULTILINE)
_DAY_RE = re.compile(r"^## (\d{4}-\d{2}-\d{2}) \d{2}:\d{2} Dreaming\b", re.MULTILINE)

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
    report: dict[str, Any] | None = None  # report.py: facts, rejections, contradictions, diff

    @property
    def quiet(self) -> bool:
        """Nothing to look at: no daily-note section, no note that could not be read."""
        return (self.outcome == "nothing_to_do" and not self.sections and not self.topic
                and not any("(skipped" in r for r in self.looked_at))

    @property
    def heading(self) -> str:
        focus = f" [FOCUSED: {' '.join(self.topic.split())}]" if self.topic else ""
        return f"{self.when:%Y-%m-%d %H:%M} Dreaming{focus}"

    def render(self) -> str:
        label = OUTCOME_LABELS.get(self.outcome, self.outcome)
        if self.quiet:
            return (f"## {self.heading}\n\n- Outcome: **{label}** (`{self.run_id}`, {self.mode} mode, {self.trigger})\n"
                    f"{QUIET_LINE} ({_one_line(self.reason)}); quiet nights are noted here at most once every "
                    f"{QUIET_DAYS} days, the run log keeps each run\n")
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
        lines += render_lines(self.report)  # facts, rejections, contradictions, the diff
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


@dataclass
class MonthStats:
    """What one month's archived diary sections hold, read back from their rendered text."""

    runs: int = 0
    other: int = 0  # sections that are not run entries (a person's notes moved along with them)
    first: str = ""  # YYYY-MM-DD of the oldest run
    last: str = ""
    outcomes: Counter[str] = field(default_factory=Counter)
    promoted: int = 0

    def add(self, section: Section) -> None:
        m = _ENTRY_RE.match(section.title)
        if not m:
            self.other += 1
            return
        self.runs += 1
        day = section.title[:10]
        self.first = min(self.first or day, day)
        self.last = max(self.last, day)
        outcome = _OUTCOME_RE.search(section.text)
        self.outcomes[outcome.group(1) if outcome else "unknown"] += 1
        self.promoted += _promoted(section.text)

    def merged(self, other: MonthStats) -> MonthStats:
        days = [d for d in (self.first, self.last, other.first, other.last) if d]
        return MonthStats(self.runs + other.runs, self.other + other.other, min(days, default=""),
                          max(days, default=""), self.outcomes + other.outcomes, self.promoted + other.promoted)


def _promoted(text: str) -> int:
    count, inside = 0, False
    for line in text.splitlines():
        if line.startswith("### "):
            inside = line.strip() == "### Promoted"
        elif inside and line.startswith("- "):
            more = _MORE_RE.match(line)
            count += int(more.group(1)) if more else 1
    return count


def render_summary(months: dict[str, MonthStats], own_lines: int = SUMMARY_MONTHS) -> str:
    """The `## Archived dreams` section for these months ("" when nothing is archived); the newest
    `own_lines` months get a line each, the older ones share the first."""
    if not months:
        return ""
    order = sorted(months)
    cut = max(0, len(order) - own_lines)
    folded, own = order[:cut], order[cut:]
    lines = [f"## {SUMMARY_TITLE}", "",
             "Older entries, moved out to keep this diary short. Every one is kept whole in its month's "
             "file, where search finds it.", ""]
    if folded:
        total = _total([months[m] for m in folded])
        lines.append(f"- **{folded[0]} … {folded[-1]}** — {_stats_line(total)} → `{ARCHIVE_DIR}/`")
    for month in own:
        lines.append(f"- **{month}** — {_stats_line(months[month])} → `{ARCHIVE_DIR}/{month}.md`")
    if len(order) > 1:
        lines.append(f"- In all: {_stats_line(_total(list(months.values())))}")
    return "\n".join(lines) + "\n\n"


def _total(stats: list[MonthStats]) -> MonthStats:
    total = MonthStats()
    for st in stats:
        total = total.merged(st)
    return total


def _stats_line(st: MonthStats) -> str:
    parts = [f"{st.runs} run{'s' if st.runs != 1 else ''}"]
    if st.runs:
        parts[0] += f" ({st.first} … {st.last})" if st.first != st.last else f" ({st.first})"
    known = [label for label in OUTCOME_LABELS.values() if st.outcomes[label]]
    rest = sorted(k for k in st.outcomes if k not in OUTCOME_LABELS.values())
    if known or rest:
        parts.append(", ".join(f"{st.outcomes[k]} {k}" for k in known + rest))
    parts.append(f"{st.promoted} fact{'s' if st.promoted != 1 else ''} promoted")
    if st.other:
        parts.append(f"{st.other} other section{'s' if st.other != 1 else ''}")
    return "; ".join(parts)


def _quiet_near(text: str, day: date) -> bool:
    """Does the diary hold a quiet-night entry (new or older wording) within QUIET_DAYS of `day`?"""
    for section in split_sections(frontmatter.body(text))[1] if text else []:
        m = _DAY_RE.match(section.text)
        if m is None or not _QUIET_RE.search(section.text):
            continue
        outcome = _OUTCOME_RE.search(section.text)
        if outcome and outcome.group(1) == OUTCOME_LABELS["nothing_to_do"] \
                and abs((date.fromisoformat(m.group(1)) - day).days) < QUIET_DAYS:
            return True
    return False


def _is_summary(section: Section) -> bool:
    return section.key == SUMMARY_TITLE.casefold()


class Diary:
    def __init__(self, store: WorkspaceStore, *, max_chars: int) -> None:
        self.store = store
        self.max_chars = max_chars

    def append(self, agent: str, entry: DiaryEntry, *, owner: str | None = None) -> WriteResult | None:
        """Add `entry` at the end; None when it is a quiet night within `QUIET_DAYS` of another quiet
        entry (either side: a replay may dream past nights in any order), which is not written."""
        # Redacted whole: the reason is the model's words, topics and promoted lines come from people.
        text = redact(entry.render())

        def add(current: str) -> str | None:
            if entry.quiet and _quiet_near(current, entry.when.date()):
                return None
            if not current:
                current = DIARY_HEAD
            return current.rstrip("\n") + "\n\n" + text

        result = self.store.update(agent, DIARY_REL, add, actor=ACTOR, owner=owner, reason=f"diary: {entry.run_id}")
        if result is not None:
            self.enforce_cap(agent, owner=owner)
        return result

    def entries(self, agent: str, *, owner: str | None = None) -> list[Section]:
        """The diary's sections, the summary of archived ones left out."""
        snap = self.store.read(agent, DIARY_REL, owner=owner)
        if not snap.exists:
            return []
        return [s for s in split_sections(frontmatter.body(snap.text))[1] if not _is_summary(s)]

    def archived(self, agent: str, *, owner: str | None = None,
                 planned: dict[str, str] | None = None) -> dict[str, MonthStats]:
        """Month -> what its archive file holds (the summary's source of truth); `planned`: archive
        texts about to be written, read instead of the files (the cap plans its summary before them)."""
        months: dict[str, MonthStats] = {}
        planned = planned or {}
        rels = {info.rel for info in self.store.list_files(agent, owner=owner, prefix=f"{ARCHIVE_DIR}/")}
        for rel in sorted(rels | set(planned)):
            m = _ARCHIVE_RE.match(rel)
            if not m:
                continue
            text = planned[rel] if rel in planned else self.store.read(agent, rel, owner=owner).text
            stats = months.setdefault(m.group(1), MonthStats())
            for section in split_sections(frontmatter.body(text))[1]:
                stats.add(section)
        # Months the rotation rolled into the compressed month archives still count in the summary.
        for row in month_archive.months(self.store, agent, owner=owner):
            got = None if row["error"] else month_archive.read_month(self.store, agent, row["month"], owner=owner)
            for rel, text in got.texts() if got is not None else []:
                m = _ARCHIVE_RE.match(rel)
                if m and m.group(1) not in months:
                    stats = months.setdefault(m.group(1), MonthStats())
                    for section in split_sections(frontmatter.body(text))[1]:
                        stats.add(section)
        return months

    def latest(self, agent: str, *, owner: str | None = None) -> str | None:
        entries = self.entries(agent, owner=owner)
        return entries[-1].text.rstrip("\n") if entries else None

    def enforce_cap(self, agent: str, *, owner: str | None = None) -> list[str]:
        """Move the oldest entries to monthly archives until DREAMS.md fits, leaving the summary of
        all archived ones in their place. Returns archive files written.

        The cap holds for what machines write: the summary gives fewer months a line of their own
        when that is what fits, and the newest entry stays unless even with every older one moved
        and the summary at its shortest it does not fit (then it is archived whole too, and the
        summary names its file). Only a person's text - pinned entries, a pinned summary - or a cap
        below the heading and the shortest summary leaves the file over it. (Keeping the newest entry
        and a summary of a dozen months whatever their size let a 1,500-char cap hold 1,967.)"""
        if self.max_chars <= 0:
            return []
        snap = self.store.read(agent, DIARY_REL, owner=owner)
        if not snap.exists or len(snap.text) <= self.max_chars:
            return []
        _, sections = split_sections(frontmatter.body(snap.text))
        old_summary = next((s for s in sections if _is_summary(s)), None)
        # A summary a person pinned is theirs: it stays as it is and is not rewritten.
        frozen = old_summary is not None and old_summary.pinned
        months = self.archived(agent, owner=owner)
        size = len(snap.text) - (len(old_summary.text) if old_summary and not frozen else 0)
        pending: dict[str, MonthStats] = {}

        def summary_within(stats: dict[str, MonthStats], room: int) -> str:
            for own_lines in range(SUMMARY_MONTHS, 0, -1):
                text = render_summary(stats, own_lines)
                if len(text) <= room:
                    return text
            return render_summary(stats, 0)

        def fits() -> bool:
            if frozen:
                return size <= self.max_chars
            merged = {m: months.get(m, MonthStats()).merged(pending.get(m, MonthStats()))
                      for m in set(months) | set(pending)}
            return size + len(summary_within(merged, self.max_chars - size)) <= self.max_chars

        by_month: dict[str, list[Section]] = {}
        # Oldest first; the newest only when nothing else makes it fit. Never a pinned one.
        for s in sections:
            if fits():
                break
            if s.pinned or _is_summary(s):
                continue
            m = _ENTRY_RE.match(s.title)
            month = f"{m.group(1)}-{m.group(2)}" if m else f"{self.store.clock.now():%Y-%m}"
            by_month.setdefault(month, []).append(s)
            pending.setdefault(month, MonthStats()).add(s)
            size -= len(s.text)
        if not by_month:  # nothing to move: at most the summary shortens
            if frozen or old_summary is None:
                return []
            summary = summary_within(self.archived(agent, owner=owner), self.max_chars - size)
            if summary == old_summary.text:
                return []
        adds: dict[str, Callable[[str], str | None]] = {}
        for month, entries in sorted(by_month.items()):

            def add(current: str, entries: list[Section] = entries, month: str = month) -> str | None:
                if not current:
                    current = f"---\nenabled: false\n---\n# Dreaming diary — {month}\n"
                new = [e for e in entries if e.text.rstrip("\n") not in current]
                if not new:
                    return None
                return current.rstrip("\n") + "\n\n" + "\n".join(e.text.rstrip("\n") + "\n" for e in new)

            adds[f"{ARCHIVE_DIR}/{month}.md"] = add
        moved = {s.text for entries in by_month.values() for s in entries}
        steps: list[Step] = []
        if by_month:
            # From the archives as they will be (each one's current text with its entries added), not
            # from the entries alone: the summary tells what is there.
            planned = {}
            for rel, update in adds.items():
                current = self.store.read(agent, rel, owner=owner)
                text = update(current.text)
                planned[rel] = current.text if text is None else text
                if text is not None:
                    steps.append(Step(agent, owner, rel, current.sha, text.encode("utf-8"), ACTOR, "diary archive"))
            summary = "" if frozen else summary_within(self.archived(agent, owner=owner, planned=planned),
                                                       self.max_chars - size)

        def drop(current: str) -> str | None:
            block, body = frontmatter.split(current)
            preamble, secs = split_sections(body)
            kept = [s for s in secs if s.text not in moved]
            if len(kept) == len(secs) and not any(_is_summary(s) and s.text != summary for s in secs):
                return None
            if summary:
                at = next((i for i, s in enumerate(kept) if _is_summary(s)), 0)
                kept = [s for s in kept if not _is_summary(s)]
                kept.insert(min(at, len(kept)), Section(SUMMARY_TITLE, summary))
            return block + join(preamble, kept)

        if not by_month:  # the summary alone, one file
            self.store.update(agent, DIARY_REL, drop, actor=ACTOR, owner=owner, reason="diary cap: moved old entries")
            return []
        diary = self.store.read(agent, DIARY_REL, owner=owner)
        if (dropped := drop(diary.text)) is not None:
            steps.append(Step(agent, owner, DIARY_REL, diary.sha, dropped.encode("utf-8"), ACTOR,
                              "diary cap: moved old entries"))
        # Journaled (workspace/journal.py): killed between an archive and DREAMS.md, the next start
        # finishes the move - never an entry both in DREAMS.md and its month's file, nor half the months.
        batch = f"diary-cap-{uuid.uuid4().hex[:12]}"
        with self.store.journal.operation("diary-cap", batch, steps):
            for rel, update in adds.items():
                self.store.update(agent, rel, update, actor=ACTOR, owner=owner, reason="diary archive", batch=batch)
            self.store.update(agent, DIARY_REL, drop, actor=ACTOR, owner=owner, reason="diary cap: moved old entries",
                              batch=batch)
        return list(adds)
