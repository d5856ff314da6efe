"""Checks on window summaries: whether a model's "summary" is one, and the key its cache uses.

A base model without a chat template answers the summary prompt with the prompt itself, and some
small models answer with the example's placeholder; either was accepted and cached for 30 minutes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from mateclaw_mem.llm.prompts import summary as summary_prompt
from mateclaw_mem.llm.prompts.echo import mostly_placeholders


class RejectedSummary(Exception):
    """A model "summary" that is a placeholder or its own instructions echoed back."""


def summary_problem(text: str, max_tokens: int) -> str | None:
    """Why a model summary is not one (None when it is): empty or a placeholder ("...", "…"), or the
    summariser's instructions echoed back — a base model without a chat template does exactly that."""
    stripped = text.strip()
    if not stripped or mostly_placeholders(stripped):
        return f"the answer is a placeholder ({stripped[:20]!r})"
    if stripped[:1] in "{[" and stripped[-1:] in "}]":
        try:
            json.loads(stripped)
        except ValueError:
            pass
        else:  # a JSON object is some other step's answer (or an echo of one), never a summary
            return "the answer is a JSON value, not a summary"
    flat = _flat(stripped)
    words = flat.split()
    if len(words) >= 20 and len(set(_ngrams(flat, 3))) < 0.4 * (len(words) - 2):
        return "the answer repeats itself (a small model looping), not a summary"
    if _flat(summary_prompt.SYSTEM_PROMPT.splitlines()[0]) in flat or "<<< earlier conversation >>>" in flat:
        return "the answer echoes the summary instructions"
    # Mostly the instructions: half of the answer's word 6-grams are the prompt's.
    said = _ngrams(flat)
    if said:
        prompt = _ngrams(_flat(summary_prompt.SYSTEM_PROMPT.format(max_tokens=max_tokens)))
        share = len(said & prompt) / len(said)
        if share >= 0.5:
            return f"the answer repeats the summary instructions ({share:.0%} of it is their wording)"
    return None


def _ngrams(flat: str, n: int = 6) -> set[tuple[str, ...]]:
    words = flat.split()
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def _flat(text: str) -> str:
    return " ".join(text.lower().split())


def summary_key(messages: Sequence[Mapping[str, Any]], max_tokens: int) -> str:
    payload = json.dumps([[m.get("role"), m.get("content")] for m in messages], ensure_ascii=False)
    return hashlib.sha256(f"{max_tokens}:{payload}".encode()).hexdigest()
