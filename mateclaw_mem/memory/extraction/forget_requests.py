"""In-conversation forget requests: "forget that …" / "please forget …" / "忘记…" (rules and model
mode alike: our code finds them and runs the forget, the model is never asked to).

Only "forget" itself: "remove" / "delete" name files as often as claims, and "don't forget" is a
remember request (`rules.is_explicit_remember`). A request for less than `MIN_TOKENS` tokens
("forget it") is no claim: the message is an ordinary one.
"""

from __future__ import annotations

import re

from mateclaw_mem.memory.extraction.rules import sentences, strip_lead
from mateclaw_mem.memory.forget.matching import MIN_TOKENS, tokens

_EN_FORGET = re.compile(
    r"^(?:(?:hey|ok(?:ay)?|also|and|oh|so|btw)[,\s]+)*(?:(?:can|could|would|will) you\s+)?(?:please\s+|pls\s+)?"
    r"forget(?:\s+(?:that|about|the fact that))?\s*[:,]?\s+(?P<v>.+?)(?:,?\s*please)?[.!?]*$",
    re.IGNORECASE,
)
_ZH_FORGET = re.compile(
    r"^(?:请|麻烦你?|帮我|你)?(?:忘记|忘掉)(?:一下)?(?:这件事|这个)?[：:，,]?\s*(?P<v>.+?)[。！!？?]*$")


def forget_requests(text: str) -> list[str]:
    """The claims a message asks to forget ("please forget that I take tea" -> "I take tea"), one
    per sentence that is such a request; [] for an ordinary message."""
    found = []
    for s in sentences(text):
        m = _EN_FORGET.match(strip_lead(s)) or _ZH_FORGET.match(strip_lead(s))
        claim = m.group("v").strip(" ,，.。") if m else ""
        if len(tokens(claim)) >= MIN_TOKENS:
            found.append(claim)
    return found
