"""Tolerant extraction of one JSON object from a model's text.

Models wrap JSON in ```json fences, put prose before or after it, or think aloud in <think> blocks
first. We accept all of that, but never guess: the result is a dict parsed by `json`, or an error
that says what was wrong (used in the repair prompt).
"""

from __future__ import annotations

import json
import re
from typing import Any

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json|JSON|json5)?[ \t]*\r?\n(.*?)```", re.DOTALL)


class JSONExtractError(ValueError):
    """No JSON object could be found; the message says why, for the repair prompt."""


def extract_json_object(text: str) -> dict[str, Any]:
    if text is None or not text.strip():
        raise JSONExtractError("the answer was empty")
    cleaned = _THINK.sub("", text).strip()
    candidates: list[str] = [cleaned]
    candidates.extend(m.group(1).strip() for m in _FENCE.finditer(cleaned))
    first_error: str | None = None
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError as exc:
            first_error = first_error or f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
            continue
        if isinstance(value, dict):
            return value
        first_error = first_error or f"expected a JSON object, got {type(value).__name__}"
    # Leading/trailing prose: try each '{' as the start of an object.
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", cleaned):
        try:
            value, _ = decoder.raw_decode(cleaned, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise JSONExtractError(first_error or "no JSON object found in the answer")
