"""Rules mode: is a sentence the person's own request to keep something ("remember that I …", "please
note …", "don't forget that my …", "记住…", "请记下…"), and what does it ask to keep?

Between people the same words are mostly advice to the other one ("don't forget to take care of
yourself", "remember, you're not alone", "记得照顾好自己") or a question about the past ("remember when
we …?"): on a replay of LoCoMo chats 21 of the 22 MEMORY.md lines rules mode wrote were such advice.
So a sentence is a request only when

- it is not a question: "can you remember that I take my coffee black?" asks; "remember any good
  hikes near Innsbruck?" does not;
- what it asks to keep is not addressed to the listener: no "you" / "yourself" / 你, and no "to …"
  ("don't forget to smile" is advice to do something, not a fact to keep) - except an instruction
  about how to answer ("remember to always cite sources", "please remember to reply in German"):
  said to an assistant, that is the person's standing request, kept without its "to";
- what it asks to keep is about the person or about something specific: a first-person word (I, my,
  we, our, 我), a number or a date, a name; or, after "remember that" / "note" / "make a note" / "keep
  in mind" / "for the record" / 记住 / 记下, a statement about a definite thing ("the deploy key
  rotates monthly").
  "Remember that life is short" and "别忘了多喝水" are none of these.

The request text never begins with punctuation: "Don't forget - my mom visits" keeps "my mom visits"
(a leading dash would render as a nested bullet in MEMORY.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mateclaw_mem.memory.extraction.rules_text import ZH_QUESTION, is_zh, rx, sentences, src, strip_lead

_EN = src(
    r"^(?:(?:hey|ok(?:ay)?|also|and|oh|so|btw)[,\s]+)*(?P<polite>(?:can|could|would|will) you\s+)?"
    r"(?:please\s+|pls\s+)?"
    r"(?P<verb>remember|note|make a note|keep in mind|don['’]t forget|do not forget|never forget|for the record)"
    r"(?P<that>\s+(?:that|this))?\s*[:,]?\s+(?P<v>.+?)(?:,?\s*please)?[.!?]*$",
    re.IGNORECASE,
)
_ZH = src(
    r"^(?:请|麻烦你?|帮我|你)?(?P<verb>记住|记下|记一下|记得|别忘了|不要忘了|不要忘记|备注一下|备忘)(?:一下)?"
    r"(?:这件事|这个)?[：:，,]?\s*(?P<v>.+?)[。！!]*$"
)
_NOTE_VERBS = ("note", "make a note", "keep in mind", "for the record")
_ZH_NOTE_VERBS = ("记住", "记下", "记一下", "备注一下", "备忘")

LEAD_PUNCT = src(r"^[\s\-–—:;,.…\"'“”‘’*•>~]+")
# "to (always|never) <a verb of answering>": how the person wants to be answered, not advice.
_INSTRUCTION = src(
    r"^to\s+(?:(?:always|never|not|also)\s+)?(?:reply|respond|answer|write|use|cite|call me|speak|format|include|"
    r"add|ask|mention|sign|address|greet|show|give|list|send|summari[sz]e|explain|translate|quote|link|"
    r"keep (?:answers|replies|it) |double-check|check)\b",
    re.IGNORECASE,
)
_RECALL = src(r"^(?:what|where|who|whom|whose|when|which|how|why|if|whether)\b", re.IGNORECASE)
_YOU = src(r"\b(?:you|your|yours|yourself|yourselves|you're|you've|you'll|ya|y'all)\b", re.IGNORECASE)
_FIRST_PERSON = src(r"\b(?:i|i'm|i’m|i've|i'll|i'd|me|my|mine|myself|we|we're|we've|we'll|our|ours|us)\b",
                    re.IGNORECASE)
_ZH_ANCHOR = src(
    r"我|咱|俺|\d|[一二三四五六七八九十两]+(?:月|号|日|点|天|年)|周[一二三四五六日天末]|星期|明天|后天|下周|下个?月|今晚|今天"
)


@dataclass(frozen=True)
class Request:
    content: str  # what the person asks to keep, as said, without leading punctuation
    zh: bool


def _match(s: str) -> tuple[re.Match[str], bool] | None:
    zh = is_zh(s)
    for pattern, is_zh_pattern in ((_ZH, True), (_EN, False)) if zh else ((_EN, False), (_ZH, True)):
        m = rx(*pattern).match(s)
        if m:
            return m, is_zh_pattern
    return None


def looks_like_request(s: str) -> bool:
    """Said in the words of a request, whether or not it is one (advice, a question)."""
    return _match(s) is not None


def request(s: str) -> Request | None:
    """The person's request in sentence `s` (already stripped of list markers), or None."""
    found = _match(s)
    if found is None:
        return None
    m, zh = found
    content = rx(*LEAD_PUNCT).sub("", m.group("v")).strip()
    if zh:
        ok = _zh_request_ok(s, content, m.group("verb"))
    else:
        content = content.rstrip("?").strip()
        if not m.group("that"):  # "Remember Jon, just do it": a name called, not a thing to keep
            content = re.sub(r"^[A-Z][a-z]+,\s+", "", content)
        ok = _en_request_ok(s, content, m)
        if not ok and _instruction(s, content):
            content, ok = content[3:].strip(), True
            content = content[:1].upper() + content[1:]
    return Request(content, zh) if ok and content else None


def _en_request_ok(s: str, content: str, m: re.Match[str]) -> bool:
    if s.rstrip().endswith("?") and not m.group("polite"):
        return False
    if not content or rx(*_RECALL).match(content) or re.match(r"to\b", content, re.IGNORECASE):
        return False
    if rx(*_YOU).search(content):
        return False
    if rx(*_FIRST_PERSON).search(content) or re.search(r"\d", content):
        return True
    words = content.split()
    # A name after the first word, or as the first one after "that" (where a common word is lower case).
    start = 0 if m.group("that") else 1
    if any(w[0].isupper() and w not in ("I", "I'm") for w in words[start:]):
        return True
    # "Please note the deploy key rotates monthly", "remember that the sky is green": a statement about
    # a definite thing, said as one to keep; a bare "remember, the …" is as often a saying.
    definite = words[0].casefold() == "the" and len(words) >= 3
    return definite and (m.group("verb").casefold() in _NOTE_VERBS or bool(m.group("that")))


def _instruction(s: str, content: str) -> bool:
    return (not s.rstrip().endswith("?") and bool(rx(*_INSTRUCTION).match(content))
            and not rx(*_YOU).search(content))


def _zh_request_ok(s: str, content: str, verb: str) -> bool:
    if s.rstrip().endswith(("?", "？")) or rx(*ZH_QUESTION).search(content):
        return False
    if re.search(r"你|您", content):
        return False
    return verb in _ZH_NOTE_VERBS or bool(rx(*_ZH_ANCHOR).search(content))


def is_explicit_remember(text: str) -> bool:
    """True when a message explicitly asks to remember something (bypasses extraction gates)."""
    return any(request(strip_lead(s)) for s in sentences(text))


def remember_payload(text: str) -> str:
    """What an explicit remember request asks to keep ("remember that I take tea" -> "I take tea"),
    its sentences joined; "" when the text is no such request."""
    return " ".join(r.content for s in sentences(text) if (r := request(strip_lead(s))))

