"""Model-mode triage: could a model turn this message from the person into memory at all? When no
new message could, a run advances the watermark without a model call (memory/extraction/input.py)."""

from __future__ import annotations

import re

from mateclaw_mem.memory.extraction import rules

_FIRST_PERSON = re.compile(
    r"\b(?:i|i'm|i've|i'd|i'll|im|my|mine|me|myself|we|we're|we've|we'll|our|ours|us|let's)\b|我|咱|俺",
    re.IGNORECASE,
)
_MEMORY_CUE = re.compile(
    r"\b(?:keep (?:that|this|it) in mind|fyi|heads up|for your information|note:)|注意|提醒|备注", re.IGNORECASE
)
_IMPERATIVE = re.compile(
    r"^(?:please\s+)?(?:write|give|show|explain|summari[sz]e|review|translate|fix|create|make|list|generate|help|"
    r"tell|find|convert|refactor|check|compare|describe|draft|rewrite|suggest|add|remove|update|run|implement|"
    r"build|debug|optimi[sz]e|sort|format|calculate|try|use|continue|go on|proceed)\b|^(?:请|帮我|给我|麻烦)",
    re.IGNORECASE,
)
_ACK = re.compile(
    r"^(?:ok(?:ay)?|thanks?|thank you|thx|cool|great|nice|perfect|got it|sure|yes|no|好的?|谢谢|收到|嗯)\b",
    re.IGNORECASE,
)


def worth_extracting(text: str) -> bool:
    """Cheap triage before a model call: could a model turn this message from the person into memory?

    Yes for a fact rules can read, a first-person statement, a memory cue ("keep that in mind"), or
    any other plain statement of a few words ("the launch moved to May"). No for questions, commands
    to the assistant ("Write a bash one-liner…") and acknowledgements ("thanks, that works")."""
    for raw in rules.sentences(text):
        s = rules.strip_lead(raw)
        if rules.facts_from_sentence(s) or _MEMORY_CUE.search(s):
            return True
        if rules.is_question(s) or _IMPERATIVE.match(s):
            continue
        if _FIRST_PERSON.search(s) and len(s) >= 8:
            return True
        if _ACK.match(s):
            continue
        words = len(re.findall(r"[A-Za-z0-9]+", s)) + len(rules.cjk().findall(s)) // 2
        if words >= 4:
            return True
    return False
