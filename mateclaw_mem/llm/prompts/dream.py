"""Dreaming (nightly consolidation): the prompt builder and the response model.

The model sees the current MEMORY.md body and the scored candidates from the recent daily notes
(newest evidence first, bounded), and returns `DreamResult`: `memory_content` is the FULL new body
of MEMORY.md (frontmatter is kept by the writer), or "" with `should_update: false`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mateclaw_mem.llm.prompts import block
from mateclaw_mem.redaction import redact

REASON_MAX = 500
MEMORY_MAX = 40_000  # far above the MEMORY.md ceiling; anything bigger is a runaway answer
CANDIDATE_CHARS = 1200  # one candidate section as the model sees it
PROMPT_CANDIDATE_BUDGET = 24_000  # all candidates together


class DreamResult(BaseModel):
    """What one consolidation decided. Same schema for the model and for rules mode."""

    model_config = ConfigDict(extra="ignore")

    should_update: bool
    reason: str = ""
    memory_content: str = Field(default="", max_length=MEMORY_MAX)

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


def check_result(result: DreamResult) -> None:
    """Extra validation for `ModelClient.chat_json(check=...)`: a repair round trip fixes these."""
    if result.should_update and not result.memory_content.strip():
        raise ValueError("should_update is true but memory_content is empty; give the full new MEMORY.md body")


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
- memory_content is the FULL new body of MEMORY.md in Markdown. Keep its `## ` headings, sections and
  wording that do not need to change. Merge duplicates; a newer fact replaces an outdated one. Do not drop
  entries just to make room.
- Sections containing `<!-- pin -->` are pinned by the person: keep them exactly as they are, character for
  character.
- Write in the person's own language: keep each fact in the language it was written in; do not translate.
- Never record secrets (passwords, API keys, tokens); text like [REDACTED:...] must not be copied.
- If MEMORY.md needs no change, answer {"should_update": false, "reason": "...", "memory_content": ""}.

Answer with JSON only, in exactly this shape:
{"should_update": true, "reason": "one sentence: what changed and why", "memory_content": "..."}"""


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
