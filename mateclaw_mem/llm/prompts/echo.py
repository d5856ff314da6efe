"""Answers checked for meaning, not just shape: placeholders and echoes of the prompt are invalid.

A small model answering a prompt it does not understand tends to copy it: the example's `...`, the
schema's "one sentence: what changed and why", or the instructions themselves. Such an answer is
valid JSON with the right keys and would otherwise be written into someone's memory.
"""

from __future__ import annotations

import re

_PLACEHOLDER_ONLY = re.compile(r"^[\s.\u2026\u00b7\-\u2013\u2014*#>:|`\"'_()\[\]]*$")
_ANGLE = re.compile(r"^\s*<[^<>]{0,80}>\s*$")
_WORD = re.compile(r"\w+")
PLACEHOLDER_WORDS = frozenset({
    "string", "text", "value", "key", "title", "body", "bool", "true", "false", "null", "none", "n/a", "na",
    "tbd", "todo", "placeholder", "example", "one sentence", "a few words", "fact", "the fact", "bullet",
    "reason", "summary", "lorem ipsum",
})
ECHO_LINE_MIN = 25  # shorter instruction lines are too generic to count as an echo
ECHO_LINES = 2


def _norm(text: str) -> str:
    return " ".join(_WORD.findall(text.casefold()))


def placeholder(text: str) -> bool:
    """True for text that stands for nothing: dots, an ellipsis, `<the fact>`, a schema word, or text
    that starts like the prompt's example ("one sentence: …")."""
    stripped = text.strip()
    if _PLACEHOLDER_ONLY.match(stripped) or _ANGLE.match(stripped):
        return True
    norm = _norm(stripped)
    if norm in PLACEHOLDER_WORDS:
        return True
    return norm.startswith("one sentence") and len(norm) < 80


def mostly_placeholders(text: str) -> bool:
    """A multi-line body whose lines are at least half placeholders (`## 08:36 ...` / `...`)."""
    lines = [ln.strip().lstrip("#-*+ ").strip() for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not re.fullmatch(r"\d{1,2}:\d{2}", ln)]
    if not lines:
        return bool(text.strip())
    return sum(1 for ln in lines if placeholder(ln) or (ln.endswith("...") and len(_norm(ln)) < 12)) * 2 >= len(lines)


def echoes(text: str, prompt: str) -> bool:
    """True when `text` repeats the prompt's instructions: two or more of its longer lines, or the
    whole text is one of them."""
    answer = _norm(text)
    if not answer:
        return False
    lines = {_norm(ln) for ln in prompt.splitlines()}
    lines = {ln for ln in lines if len(ln) >= ECHO_LINE_MIN}
    if answer in lines:
        return True
    return sum(1 for ln in lines if ln in answer) >= ECHO_LINES


def problem(field: str, text: str, prompt: str, *, multiline: bool = False) -> str | None:
    """Why `text` (the answer's `field`) is not a real answer, or None."""
    if not text.strip():
        return None
    if (mostly_placeholders(text) if multiline else placeholder(text)):
        return f"{field} is a placeholder ({text.strip()[:40]!r}), not content from the conversation"
    if echoes(text, prompt):
        return f"{field} repeats the instructions instead of answering them"
    return None
