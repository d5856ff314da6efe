"""Rules mode: what the person said about themselves that is no profile fact - the day's ledger.

"I went to a support group yesterday", "We adopted a second cat", "我这周在学吉他": events, plans and
what they are doing. No key fits them (so they are not PROFILE.md lines) and nobody asked to keep them
(so not MEMORY.md), but they are what a daily note is for, and what Dreaming consolidates: a thing the
person tells on several days is promoted to MEMORY.md, a one-off stays in its day. Without them rules
mode wrote a note only when PROFILE.md or MEMORY.md changed, so nothing said twice ever recurred (0
promotions in 272 replayed nights).

Kept as said (the person's words, never reworded), one sentence a line, only when it is a statement
about the person: it opens with I / my / we / our (我 / 我们), says something beyond a feeling
("I'm so glad", "I agree"), is not a question, a wish or a hypothetical, and is not about the listener
("I'm proud of you" is a reply, not news).
"""

from __future__ import annotations

import re

from mateclaw_mem.memory.extraction.rules_text import is_question, rx, sentences, src, strip_lead
from mateclaw_mem.redaction import find_secrets

_OPENING = src(r"^(?:i|i'm|i’m|i've|i’ve|i'll|i’ll|my|we|we're|we’re|we've|we’ve|our)\b", re.IGNORECASE)
_ZH_OPENING = src(r"^我(?:们)?")
_NOT_NEWS = src(
    r"\b(?:if|would|wish|hope|hoping|maybe|perhaps|might|could|should|suppose|imagine|guess|wonder|bet)\b"
    r"|\b(?:you|your|yours|yourself|ya)\b|如果|假如|希望|也许|可能|你|您",
    re.IGNORECASE,
)
# What a profile line says (preferences, tools, work, home, name): PROFILE.md territory. Left out of the
# ledger even when the rules could not read a clean value from it ("I prefer dark mode in the editor,
# always"): Dreaming would promote it to MEMORY.md beside the profile, and keep it there after a
# correction of the profile line.
_PROFILE_TALK = src(
    r"^(?:i|we)\s+(?:really\s+|just\s+|still\s+|also\s+|totally\s+)*(?:prefer|like|love|enjoy|adore|hate|dislike|"
    r"use|work|live|come from|grew up)\b|^(?:i'm|i’m|i am)\s+(?:a|an|called|from)\b|^my name\b",
    re.IGNORECASE,
)
_WORD = src(r"[A-Za-z][A-Za-z'’-]*")
# Words that carry no news: pronouns, feelings and fillers. A statement needs 3 words beyond them.
_EMPTY_WORDS = (
    "i i'm i’m i've i’ve i'll i’ll me my mine we we're we’re we've we’ve our us am is are was were be been "
    "so really very too just totally also still a an the it that this to of and or but for with at in on "
    "glad happy sorry excited thrilled thankful grateful sure know think agree see mean feel feeling felt "
    "love like appreciate totally definitely absolutely lol haha yeah yes no not thanks thank good great "
    "awesome amazing cool nice fun true right"
)
_EMPTY = frozenset(_EMPTY_WORDS.split())
MAX_WORDS = 40
MAX_ZH_CHARS = 80


def statements(text: str) -> list[str]:
    """The person's statements about themselves in one message, as said."""
    out = []
    for s in sentences(text):
        s = strip_lead(s)
        if not s or is_question(s) or rx(*_NOT_NEWS).search(s) or find_secrets(s):
            continue
        if rx(*_ZH_OPENING).match(s):
            if 6 <= len(s) <= MAX_ZH_CHARS:
                out.append(s)
            continue
        if not rx(*_OPENING).match(s) or rx(*_PROFILE_TALK).match(s):
            continue
        words = rx(*_WORD).findall(s)
        news = [w for w in words if w.lower() not in _EMPTY]
        if len(words) <= MAX_WORDS and len(news) >= 3:
            out.append(s.rstrip())
    return out
