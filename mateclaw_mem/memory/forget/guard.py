"""What extraction (rules and model) and dreaming check before they write: one owner's tombstones.

A machine writer may keep what is already in a file (a person who typed a forgotten claim back by
hand decided so); what it *adds* is cut where it holds a tombstoned claim. So the same sentence
said again after a forget writes nothing of itself, in either mode.
"""

from __future__ import annotations

from mateclaw_mem.llm.prompts.extraction import DailyEntry
from mateclaw_mem.memory.forget.matching import Matcher, cut_line

GENERIC_TITLE = "Notes"


class Guard:
    def __init__(self, matcher: Matcher) -> None:
        self.matcher = matcher

    def __bool__(self) -> bool:
        return bool(self.matcher)

    def blocks(self, text: str) -> bool:
        return self.matcher.contains(text)

    def body(self, old: str, new: str) -> str:
        """`new` with the tombstoned claims cut from every line `old` did not already have."""
        if not self.matcher:
            return new
        known = set(old.split("\n"))
        out = []
        for line in new.split("\n"):
            if line in known:
                out.append(line)
            elif (cut := cut_line(line, self.matcher, marker=False)) is not None and "[forgotten]" not in cut:
                out.append(cut)
        return "\n".join(out)

    def daily(self, entry: DailyEntry | None) -> DailyEntry | None:
        """A daily entry without the claims; None when nothing else was in it."""
        if entry is None or not self.matcher:
            return entry
        body = self.body("", entry.body)
        if self.blocks(entry.body) and not body.strip():
            return None
        title = GENERIC_TITLE if self.blocks(entry.title) else entry.title
        return entry.model_copy(update={"title": title, "body": body})
