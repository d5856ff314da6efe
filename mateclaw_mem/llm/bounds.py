"""How much one model call may cost: its answer tokens and its wall-clock time.

Every request carries `max_tokens`: the caller's value, else the step's entry in
`model.step-max-tokens` (a `<step>.repair` round trip uses its base step's), else `model.max-tokens`.
An unbounded answer from a small local model was seen running 768 s and 7,013 tokens.

The deadline of one call is `model.timeout-seconds` plus `timeout-per-1k-prompt-tokens` per 1,000
estimated prompt tokens plus `timeout-per-1k-answer-tokens` per 1,000 max_tokens, so a CPU server
gets the time its prompt and answer need while a hosted API keeps the flat timeout (both default 0).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mateclaw_mem.errors import ConfigError

# Friendly names a person may write in `model.step-max-tokens` for the step names the code records.
STEP_ALIASES = {"dream": "consolidation", "dreaming": "consolidation", "summary": "window.summary"}

_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff]")


def estimate_tokens(text: str) -> int:
    """The project's estimate (memory/context/tokens.py has the same rule): CJK 1 each, else 4 chars."""
    if not text:
        return 0
    cjk = 0 if text.isascii() else len(_CJK.findall(text))
    return cjk + -(-(len(text) - cjk) // 4)


def estimate_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    total = 2
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += estimate_tokens(str(content or "")) + 4
    return total


def _canon(step: str) -> str:
    name = step.strip().lower().replace("-", "_")
    return STEP_ALIASES.get(name, name)


@dataclass(frozen=True)
class CallBounds:
    timeout_seconds: float = 60.0
    max_tokens: int = 1024
    step_max_tokens: Mapping[str, int] = field(default_factory=dict)
    timeout_per_1k_prompt_tokens: float = 0.0
    timeout_per_1k_answer_tokens: float = 0.0

    def __post_init__(self) -> None:
        bad = [k for k, v in self.step_max_tokens.items() if not isinstance(v, int) or v < 1]
        if bad or self.max_tokens < 1:
            raise ConfigError(f"model.step-max-tokens / model.max-tokens must be whole numbers >= 1 (bad: "
                              f"{', '.join(bad) or 'max-tokens'})")

    def max_tokens_for(self, step: str) -> int:
        """The answer-token limit of `step` when its caller passes none."""
        base = step[: -len(".repair")] if step.endswith(".repair") else step
        wanted = _canon(base)
        for key, value in reversed(self.step_max_tokens.items()):  # later entries win
            if _canon(key) == wanted:
                return value
        return self.max_tokens

    def timeout_for(self, prompt_tokens: int, max_tokens: int) -> float:
        """Seconds one call may take in all, waiting for a slot included."""
        return (self.timeout_seconds
                + self.timeout_per_1k_prompt_tokens * prompt_tokens / 1000.0
                + self.timeout_per_1k_answer_tokens * max_tokens / 1000.0)
