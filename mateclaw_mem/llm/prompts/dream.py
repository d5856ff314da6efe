"""Dreaming (nightly consolidation): the prompt builder and the response model.

The model sees the current MEMORY.md body and the scored candidates from the recent daily notes
(newest evidence first, bounded), and returns `DreamResult`: `edits` to MEMORY.md (add / update /
remove a bullet or section, each citing the dates of the notes it rests on; `llm/prompts/edits.py`).
The seed's `memory_content`, the FULL new body of MEMORY.md (frontmatter kept by the writer), is
still accepted and goes through the same gates.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ConfigDict, Field, field_validator

from mateclaw_mem.llm.prompts import block
from mateclaw_mem.llm.prompts.echo import problem
from mateclaw_mem.llm.prompts.edits import MAX_EDITS, EditOp
from mateclaw_mem.redaction import redact
from mateclaw_mem.wire import Wire

REASON_MAX = 500
MEMORY_MAX = 40_000  # far above the MEMORY.md ceiling; anything bigger is a runaway answer
CANDIDATE_CHARS = 1200  # one candidate section as the model sees it
PROMPT_CANDIDATE_BUDGET = 24_000  # all candidates together


class DreamResult(Wire):
    """What one consolidation decided. Same schema for the model and for rules mode."""

    model_config = ConfigDict(extra="ignore")

    should_update: bool
    reason: str = ""
    memory_content: str = Field(default="", max_length=MEMORY_MAX)
    edits: list[EditOp] = Field(default_factory=list, max_length=MAX_EDITS)

    @field_validator("edits", mode="before")
    @classmethod
    def _none_is_no_edits(cls, value: object) -> object:
        return [] if value is None else value

    @field_validator("reason", mode="before")
    @classmethod
    def _short_reason(cls, value: object) -> object:
        # Redacted before the cut: a cut must never leave half a key that no pattern recognises.
        if isinstance(value, str):
            return redact(value)[:REASON_MAX] if len(value) > REASON_MAX else value
        return "" if value is None else value

    @field_validator("memory_content", mode="before")
    @classmethod
    def _none_is_unchanged(cls, value: object) -> object:
        return "" if value is None else value


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def note_dates(sources: list[str]) -> set[str]:
    """The daily-note dates a prompt showed, from its candidates' sources."""
    return {d for src in sources for d in _DATE.findall(src)}


def answer_check(prompt: str, dates: set[str]) -> Callable[[DreamResult], None]:
    """`ModelClient.chat_json(check=...)` for one dream: a repair round trip fixes these."""

    def check(result: DreamResult) -> None:
        if result.should_update and not (result.memory_content.strip() or result.edits):
            raise ValueError("should_update is true but there are no edits")
        why = problem("memory_content", result.memory_content, prompt, multiline=True)
        for i, op in enumerate(result.edits):
            why = why or problem(f"edits[{i}].text", op.text, prompt)
            if op.file != "MEMORY.md":
                why = why or f"edits[{i}] names {op.file}; dreaming edits MEMORY.md only"
            cited = {d for e in op.evidence for d in _DATE.findall(e)}
            if not cited:
                why = why or f"edits[{i}] has no evidence: give the dates of the notes it rests on"
            elif not cited <= dates:
                why = why or f"edits[{i}].evidence {sorted(cited - dates)[:3]} are not dates of the notes shown"
        if why:
            raise ValueError(why)

    return check


@dataclass(frozen=True)
class PromptCandidate:
    """One scored daily-note section, as the prompt shows it."""

    source: str  # "memory/2026-11-28.md 09:15 Editor setup"
    score: float
    days: int  # distinct days its most recurring fact was seen on
    sessions: int
    hits: int
    explicit: bool
    text: str


SYSTEM_PROMPT = """You consolidate the long-term memory (MEMORY.md) of an AI assistant about the person it works
with. Each night you receive the current MEMORY.md and candidate notes from the recent daily journal, each
with an evidence score: on how many distinct days and in how many sessions the same fact came up, whether the
person explicitly asked to remember it, and how often a search actually returned it. Return ONE JSON object.

Rules:
- Promote what recurs (seen on 2 or more days), what was explicitly asked to be remembered, and what searches
  keep needing. One-off events stay in the daily notes: do not copy them into MEMORY.md.
- Change MEMORY.md with small edits, never by rewriting it. Each edit is one of
  {"op": "add", "section": "<## heading>", "text": "<one line>", "evidence": ["<YYYY-MM-DD>"]}
  {"op": "update", "old": "<the current line, as written above>", "text": "<new text>", "evidence": [...]}
  {"op": "remove", "old": "<the current line>", "evidence": [...]}
  evidence lists the dates of the daily notes the edit rests on (from the candidates' headings).
- Merge duplicates; a newer fact updates an outdated one. Do not remove entries just to make room.
- Sections containing `<!-- pin -->` are pinned by the person: never edit them.
- Write in the person's own language: keep each fact in the language it was written in; do not translate.
- Never record secrets (passwords, API keys, tokens); text like [REDACTED:...] must not be copied.
- If MEMORY.md needs no change, answer {"should_update": false, "reason": "<why>", "edits": []}.

Answer with JSON only, in exactly this shape:
{"should_update": true, "reason": "<what changed and why, in a few words>", "edits": [...]}"""


def build_messages(
    *,
    agent: str,
    now: str,
    memory: str,
    candidates: list[PromptCandidate],
    topic: str | None = None,
    retry_note: str = "",
    budget: int = PROMPT_CANDIDATE_BUDGET,
) -> list[dict[str, str]]:
    """Chat messages for one consolidation. `candidates` must already be ordered (best first)."""
    parts: list[str] = [f"Agent: {agent}. Now: {now}."]
    if topic:
        parts.append(f"This is a FOCUSED dream about: {topic}. Give priority to candidates about it.")
    if retry_note:
        parts.append(retry_note)
    parts.append(block("MEMORY.md (current body)", memory))
    lines: list[str] = []
    used = 0
    left_out = 0
    for c in candidates:
        flags = [f"score {c.score:.2f}", f"{c.days} day{'s' if c.days != 1 else ''}",
                 f"{c.sessions} session{'s' if c.sessions != 1 else ''}"]
        if c.hits:
            flags.append(f"{c.hits} search hit{'s' if c.hits != 1 else ''}")
        if c.explicit:
            flags.append("asked to remember")
        text = c.text.strip()
        if len(text) > CANDIDATE_CHARS:
            text = text[: CANDIDATE_CHARS - 1].rstrip() + "…"
        item = f"### {c.source} [{', '.join(flags)}]\n{text}\n"
        if used + len(item) > budget:
            left_out += 1
            continue
        lines.append(item)
        used += len(item)
    if left_out:
        lines.append(f"({left_out} lower-scored candidate(s) left out to stay within the prompt budget)")
    parts.append(block("Candidates from the daily notes (best first)", "\n".join(lines)))
    parts.append("Return the JSON object now.")
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "\n\n".join(parts)},
    ]
