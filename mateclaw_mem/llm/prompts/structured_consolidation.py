"""Structured consolidation: merge near-duplicate entries of one (agent, owner, type) bucket.

The model gets the bucket's entries (key, text, updated, locked) and returns what to keep, what was
merged into what, and what to drop with a reason. `check_plan` is the safety gate shared with rules
mode; `chat_json(check=...)` gives the model one repair round trip before the bucket is rejected.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ConfigDict, Field

from mateclaw_mem.wire import Wire

TEXT_MAX = 2000
REASON_MAX = 300


class KeptEntry(Wire):
    model_config = ConfigDict(extra="ignore")

    key: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1, max_length=TEXT_MAX)
    merged_from: list[str] = Field(default_factory=list)


class DroppedEntry(Wire):
    model_config = ConfigDict(extra="ignore")

    key: str = Field(min_length=1, max_length=200)
    reason: str = Field(min_length=1, max_length=REASON_MAX)


class ConsolidationPlan(Wire):
    """Same schema for the model and for rules mode."""

    model_config = ConfigDict(extra="ignore")

    entries: list[KeptEntry]
    dropped: list[DroppedEntry] = Field(default_factory=list)


@dataclass(frozen=True)
class InputEntry:
    key: str
    text: str
    updated: str
    locked: bool  # pinned or edited by a person since the last machine write


SYSTEM_PROMPT = """You tidy a list of structured memory entries that an AI assistant keeps about {what}.
Entries were added over time and some say the same thing twice. Merge near-duplicates and drop entries
that are obsolete (superseded by a newer entry with the same meaning). Keep everything else as it is.

Rules:
- Every input key must be accounted for exactly once: as the key of a kept entry, in the merged_from
  list of the kept entry that absorbed it, or in dropped with a reason.
- A kept entry's key must be one of the input keys. Never invent new entries or keys.
- Entries marked "locked": true must be kept under their own key with their text unchanged; they may
  absorb duplicates (listed in merged_from) but are never merged away or dropped.
- When merging, keep the newer information if entries disagree, in the entries' own language.
- The result must have fewer or as many entries as the input.

Answer with JSON only, in exactly this shape:
{{"entries": [{{"key": "...", "text": "...", "merged_from": ["other key", ...]}}],
 "dropped": [{{"key": "...", "reason": "..."}}]}}"""

_WHAT = {"user": "the person (facts and preferences)", "feedback": "how the person wants it to work",
         "project": "ongoing projects", "reference": "reference material"}


def build_messages(type_: str, entries: Sequence[InputEntry]) -> list[dict[str, str]]:
    payload = [{"key": e.key, "text": e.text, "updated": e.updated or None, "locked": e.locked} for e in entries]
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(what=_WHAT.get(type_, type_))},
        {"role": "user", "content": f"Entries of type {type_!r} ({len(entries)}):\n"
         + json.dumps(payload, ensure_ascii=False, indent=1) + "\n\nReturn the JSON object now."},
    ]


def _norm(key: str) -> str:
    return " ".join(key.split()).casefold()


def check_plan(plan: ConsolidationPlan, entries: Sequence[InputEntry]) -> None:
    """Raise ValueError naming the first broken rule: no new keys, every key accounted for exactly
    once, locked entries kept under their own key, and the count never grows."""
    inputs = {_norm(e.key): e for e in entries}
    seen: dict[str, str] = {}

    def account(key: str, how: str) -> None:
        k = _norm(key)
        if k not in inputs:
            raise ValueError(f"{how} names key {key!r}, which is not one of the input keys")
        if k in seen:
            raise ValueError(f"key {key!r} is accounted for twice ({seen[k]} and {how})")
        seen[k] = how

    for kept in plan.entries:
        account(kept.key, "a kept entry")
        for src in kept.merged_from:
            if _norm(src) == _norm(kept.key):
                continue
            account(src, f"merged into {kept.key!r}")
    for dropped in plan.dropped:
        account(dropped.key, "dropped")
    missing = [e.key for k, e in inputs.items() if k not in seen]
    if missing:
        raise ValueError(f"input keys not accounted for: {', '.join(repr(k) for k in missing[:10])}")
    for k, e in inputs.items():
        if e.locked and seen[k] != "a kept entry":
            raise ValueError(f"entry {e.key!r} is locked (pinned or edited by a person) but was {seen[k]}")
    if len(plan.entries) > len(entries):
        raise ValueError(f"the answer has {len(plan.entries)} entries for {len(entries)} inputs")
