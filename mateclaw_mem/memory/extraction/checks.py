"""What a model's extraction answer must mean, beyond its shape (told to the model as a repair).

- no placeholder or echo of the prompt in anything that would be written (`llm/prompts/echo.py`);
- every edit cites NEW messages shown in the transcript;
- `should_update: true` comes with something to write;
- an explicit "remember …" gets a write unless what was asked is already in memory: "no update"
  to a remember request is a wrong answer, not a decision.
"""

from __future__ import annotations

from collections.abc import Callable

from mateclaw_mem.index.tokenizer import STOPWORDS, tokenize
from mateclaw_mem.llm.prompts.echo import problem
from mateclaw_mem.llm.prompts.edits import check_evidence
from mateclaw_mem.llm.prompts.extraction import ExtractionResult
from mateclaw_mem.memory.extraction import rules

KNOWN_SHARE = 0.8  # this share of a request's words already in memory = already recorded
# Besides the search tokenizer's stopwords: the words that frame a request, not what it asks to keep.
_FRAME = frozenset({"please", "remember", "note", "keep", "mind"})


def _words(text: str) -> set[str]:
    """The search index's tokens (stemmed words, CJK bigrams): "take" and "takes" are one word."""
    return set(tokenize(text)) - STOPWORDS - _FRAME


def remember_core(text: str) -> str:
    """What a remember request asks to keep, without the "please remember that" around it."""
    return rules.remember_payload(text) or text


def already_known(request: str, memory_texts: list[str]) -> bool:
    want = _words(remember_core(request))
    if not want:
        return True
    have: set[str] = set()
    for text in memory_texts:
        have |= _words(text)
    return len(want & have) >= KNOWN_SHARE * len(want)




def answer_check(prompt: str, *, new_ids: set[str], remember_requests: list[str],
                 memory_texts: list[str]) -> Callable[[ExtractionResult], None]:
    """A `chat_json(check=...)` for one run: raises ValueError naming what is wrong."""
    unrecorded = [r for r in remember_requests if not already_known(r, memory_texts)]

    def check(result: ExtractionResult) -> None:
        wrote = bool(result.memory_update.strip() or result.profile_update.strip() or result.daily_entry
                     or result.structured or result.edits)
        if result.should_update and not wrote:
            raise ValueError("should_update is true but there are no edits, daily_entry or structured entries")
        if unrecorded and not (result.should_update and wrote):
            raise ValueError("the person explicitly asked to remember " + repr(unrecorded[0][:200])
                             + "; record it (an edit or a daily_entry)")
        fields: list[tuple[str, str, bool]] = [
            ("memory_update", result.memory_update, True), ("profile_update", result.profile_update, True)]
        if result.daily_entry is not None:
            fields += [("daily_entry.title", result.daily_entry.title, False),
                       ("daily_entry.body", result.daily_entry.body, True)]
        fields += [(f"edits[{i}].text", e.text, False) for i, e in enumerate(result.edits)]
        fields += [(f"structured[{i}].text", s.text, False) for i, s in enumerate(result.structured)]
        for name, text, multiline in fields:
            why = problem(name, text, prompt, multiline=multiline)
            if why:
                raise ValueError(why)
        check_evidence(result.edits, new_ids, "NEW message id")

    return check
