"""SOUL.md evolution (model mode): the prompt builder and the response model.

The model sees SOUL.md (who the agent is), PROFILE.md and MEMORY.md (what it knows about the
person), each bounded, and proposes the FULL new body of SOUL.md (`soul_content`) or no change.
The answer is only a proposal: memory/soul/ redacts it, puts pinned and person-written sections
back, shows it with its diff and writes it only when a person confirms (or `soul.auto-apply`).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ConfigDict, Field, field_validator

from mateclaw_mem.llm.prompts import block
from mateclaw_mem.redaction import redact
from mateclaw_mem.wire import Wire

MODEL_STEP = "soul"
REASON_MAX = 500
SOUL_MAX = 12_000  # a SOUL.md answer longer than this is a runaway, not a personality
INPUT_CHARS = 6_000  # each of SOUL / PROFILE / MEMORY as the model sees it


class SoulResult(Wire):
    model_config = ConfigDict(extra="ignore")

    should_update: bool
    reason: str = ""
    soul_content: str = Field(default="", max_length=SOUL_MAX)

    @field_validator("reason", mode="before")
    @classmethod
    def _short_reason(cls, value: object) -> object:
        if isinstance(value, str):  # redacted before the cut: never half a key no pattern knows
            return redact(value)[:REASON_MAX]
        return "" if value is None else value

    @field_validator("soul_content", mode="before")
    @classmethod
    def _none_is_unchanged(cls, value: object) -> object:
        return "" if value is None else value


SYSTEM = """You maintain SOUL.md, the file that says who an AI assistant is and how it works with one person.
Propose an improved SOUL.md only when PROFILE.md and MEMORY.md show something durable about how the
person likes to work with the assistant (tone, format, habits, boundaries) that SOUL.md does not say yet.
Rules:
- Keep every `##` section that is there; change wording only where the memory shows a reason.
- Never copy secrets, passwords, keys or one-off facts (dates, errands) into SOUL.md.
- Never add or remove `<!-- pin -->` markers.
- Keep it short: SOUL.md is in every prompt.
Answer with one JSON object: {"should_update": true|false, "reason": "<one sentence>",
"soul_content": "<the FULL new body of SOUL.md, without frontmatter, when should_update is true>"}"""


def _cut(text: str) -> str:
    text = text.strip()
    return text if len(text) <= INPUT_CHARS else text[:INPUT_CHARS] + "\n[… cut]"


def build_messages(*, agent: str, soul: str, profile: str, memory: str) -> list[dict[str, str]]:
    user = "\n\n".join([
        f"Agent: {agent}",
        block("SOUL.md (current)", _cut(soul)),
        block("PROFILE.md", _cut(profile)),
        block("MEMORY.md", _cut(memory)),
        "Propose the new SOUL.md, or should_update false.",
    ])
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def answer_check(old_body: str) -> Callable[[SoulResult], None]:
    """ValueError (told to the model in the repair round trip) for an answer that cannot be a SOUL.md."""

    def check(result: SoulResult) -> None:
        if not result.should_update:
            return
        body = result.soul_content.strip()
        if not body:
            raise ValueError("should_update is true but soul_content is empty")
        if body.startswith("---"):
            raise ValueError("soul_content must be the body only, without frontmatter")
        if old_body.strip() and len(body) < len(old_body.strip()) // 3:
            raise ValueError("soul_content drops most of SOUL.md; keep its sections")

    return check
