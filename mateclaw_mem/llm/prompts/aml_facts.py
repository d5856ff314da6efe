"""AML fact extraction: the prompt builder and the response model.

After an Add (model mode), the model reads the chunk's new messages (plus a few earlier turns of
the same session as context) and returns short, self-contained facts. Each fact names the ids of
the messages it comes from; those ids are the bond between a fact and the raw record, which stays
the truth. Facts are searched alongside the raw messages.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ConfigDict, Field, field_validator, model_validator

from mateclaw_mem.redaction import redact
from mateclaw_mem.wire import Wire

FACT_MAX_CHARS = 400
MAX_FACTS = 40


class AmlFact(Wire):
    model_config = ConfigDict(extra="ignore")

    text: str = Field(min_length=1)
    sources: list[int] = Field(min_length=1)

    @field_validator("text")
    @classmethod
    def _one_line(cls, value: str) -> str:
        value = " ".join(value.split())
        if not value:
            raise ValueError("text is empty")
        # A long fact is a style slip, not worth a repair round trip: cut it - redacted first, so a
        # cut never leaves half a key that no pattern recognises any more.
        if len(value) <= FACT_MAX_CHARS:
            return value
        value = redact(value)
        return value if len(value) <= FACT_MAX_CHARS else value[: FACT_MAX_CHARS - 1].rstrip() + "…"


class AmlFactsResult(Wire):
    model_config = ConfigDict(extra="ignore")

    facts: list[AmlFact] = Field(max_length=MAX_FACTS)

    @model_validator(mode="before")
    @classmethod
    def _facts_is_a_list(cls, data: object) -> object:
        # `{"facts": []}` is a real "nothing to keep"; `{}`, `{"facts": null}` or a list under another
        # name is not an answer at all (small models do this): refused here, so the repair round trip
        # names it and a second miss fails the job instead of passing as a success with 0 facts.
        if not isinstance(data, dict) or not isinstance(data.get("facts"), list):
            got = "no such key" if not isinstance(data, dict) or "facts" not in data else (
                f"{type(data['facts']).__name__ if data['facts'] is not None else 'null'}")
            raise ValueError(f'the answer has no "facts" list ({got}); answer {{"facts": []}} when there is '
                             "nothing to keep")
        return data


@dataclass(frozen=True)
class SourceMessage:
    ref: int  # the number the model cites (1..n), mapped back to a log id by the caller
    date: str  # "2023-05-08 (Mon)"
    speaker: str
    text: str
    new: bool  # False = earlier turn, context only (may be cited, but facts come from new turns)


SYSTEM_PROMPT = """You turn a conversation excerpt into short, self-contained facts for a memory search index.

Rules:
- Extract facts only from messages marked NEW; earlier messages are context for resolving who and what.
- One fact per line of knowledge: who did/has/likes/plans what, when, where, with whom, how many, names.
- Each fact must stand alone: use the person's name instead of I/you/he/she, and resolve relative time
  ("yesterday", "last week") into an absolute date using the message date (write both when unsure,
  e.g. "the week before 2023-05-08").
- Cite the message numbers each fact comes from in "sources" (at least one; only numbers shown below).
- No opinions about the conversation, no greetings or small talk, nothing that is not stated.
- Write in the language of the messages. At most 40 facts; fewer is fine; none is fine.

Answer with JSON only, in exactly this shape:
{"facts": [{"text": "...", "sources": [1, 2]}]}"""


def build_messages(messages: list[SourceMessage]) -> list[dict[str, str]]:
    lines = []
    for m in messages:
        mark = "NEW" if m.new else "EARLIER"
        lines.append(f"[{m.ref}] {mark} {m.date} {m.speaker}: {m.text}")
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "Messages:\n" + "\n".join(lines)},
    ]


def check_sources(refs: set[int]):
    """A `chat_json` check: every cited number must be one of the messages shown."""

    def check(result: AmlFactsResult) -> None:
        for i, fact in enumerate(result.facts):
            unknown = [s for s in fact.sources if s not in refs]
            if unknown:
                raise ValueError(f"facts[{i}].sources cites {unknown}, which are not message numbers shown")

    return check
