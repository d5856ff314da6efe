"""How a claim is recognised wherever it is written, and what is cut when it is.

A claim is normalised to a token sequence: Unicode NFKC, case-folded, punctuation and spacing
dropped, each CJK character one token, every other run of letters/digits one token. So "I take my
tea WITHOUT sugar!" and "- i take my tea, without sugar" are the same claim. A text *contains* the
claim when the claim's tokens occur in it contiguously.

The tombstone keeps only `sha256` of the joined tokens and their count (`Fingerprint`), never the
words; containment is checked by hashing every window of that many tokens of the text, so a
tombstone can block a claim it cannot spell.

What is cut: the sentence that contains the claim, or the whole line when the claim spans its
sentences (or the line has nothing else). Headings keep their place with `[forgotten]` in place of
the sentence; log messages get the marker too, so a conversation still reads in order.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass

MARKER = "[forgotten]"
MIN_TOKENS = 2  # one word ("tea") would wipe every line that mentions it: too blunt to be a claim

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
# A sentence: up to a terminator followed by a space or the end (so "3.5" and "e.g" stay whole),
# or a CJK terminator; the spacing after it belongs to it, so the pieces join back to the line.
_SENTENCE = re.compile(r".+?(?:[.!?;]+(?=\s|$)|[。！？；]+|$)\s*")
_PREFIX = re.compile(r"^(\s*(?:#{1,6}\s+|>\s*|(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?)*)")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


def _digest(toks: Iterable[str]) -> str:
    return hashlib.sha256(" ".join(toks).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    sha: str
    n: int  # how many tokens the claim has

    @classmethod
    def of(cls, claim: str) -> Fingerprint:
        toks = tokens(claim)
        return cls(_digest(toks), len(toks))


class Matcher:
    """Containment of any of a set of fingerprints, checked window by window."""

    def __init__(self, prints: Iterable[Fingerprint]) -> None:
        self.by_len: dict[int, set[str]] = {}
        for p in prints:
            self.by_len.setdefault(p.n, set()).add(p.sha)

    def __bool__(self) -> bool:
        return bool(self.by_len)

    def contains(self, text: str) -> bool:
        if not self.by_len:
            return False
        toks = tokens(text)
        for n, shas in self.by_len.items():
            if any(_digest(toks[i:i + n]) in shas for i in range(len(toks) - n + 1)):
                return True
        return False


def cut_line(line: str, matcher: Matcher, *, marker: bool) -> str | None:
    """The line without the sentences holding a claim; None when nothing of it is left (or the
    claim spans sentences). Returns the line itself when it holds no claim. `marker`: put
    `[forgotten]` where each cut sentence was instead of removing it (headings, log messages)."""
    if not matcher.contains(line):
        return line
    prefix = _PREFIX.match(line).group(1)  # type: ignore[union-attr]
    heading = prefix.lstrip().startswith("#")
    pieces = _SENTENCE.findall(line[len(prefix):])
    kept, cut = [], False
    for piece in pieces:
        if matcher.contains(piece):
            cut = True
            if marker or heading:
                kept.append(MARKER + (" " if piece != piece.rstrip() else ""))
        else:
            kept.append(piece)
    rest = "".join(kept).rstrip()
    if not cut:  # the claim runs across sentences: the whole line goes
        rest = MARKER if (marker or heading) else ""
    if not tokens(rest.replace(MARKER, "")) and not (marker or heading):
        return None
    return prefix + rest


def cut_text(text: str, matcher: Matcher, *, marker: bool = False, drop_empty_sections: bool = False
             ) -> tuple[str, int]:
    """Every line of `text` through `cut_line`; returns the new text and how many lines changed.
    `drop_empty_sections`: a `##` section that had content and has none left but `>` metadata goes
    as a whole, heading included (a structured entry, a daily-note entry)."""
    out: list[str] = []
    changed = 0
    for section in _sections(text.split("\n")):
        kept: list[str] = []
        lost = 0
        for line in section:
            new = cut_line(line, matcher, marker=marker)
            lost += new != line
            if new is not None:
                kept.append(new)
        if drop_empty_sections and lost and section[0].startswith("## ") and _content(section) \
                and not _content(kept):
            lost = sum(1 for ln in section if ln.strip())
            kept = []
        changed += lost
        out.extend(kept)
    return "\n".join(out), changed


def _sections(lines: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for ln in lines:
        if ln.startswith("## ") and out[-1]:
            out.append([])
        out[-1].append(ln)
    return out


def _content(section: list[str]) -> bool:
    body = section[1:] if section and section[0].startswith("## ") else section
    return any(ln.strip() and not ln.lstrip().startswith(">") for ln in body)


# Words that carry no claim of their own: a store that rewords what it keeps ("Takes tea without
# sugar" for "I take my tea without sugar") drops exactly these.
_FUNCTION_WORDS = frozenset((
    "i", "me", "my", "mine", "we", "us", "our", "you", "your", "he", "him", "his", "she", "her", "they", "them",
    "their", "it", "its", "a", "an", "the", "this", "that", "these", "those", "is", "am", "are", "was", "were", "be",
    "been", "being", "do", "does", "did", "have", "has", "had", "to", "of", "in", "on", "at", "for", "with", "by",
    "from", "and", "or", "but", "so", "as", "about", "into", "than", "then", "also", "just", "really", "very",
    "please", "remember", "user"))


def loosely(claim: str) -> Callable[[str], bool]:
    """For stores that reword what they keep (Mem0): a text holds the claim when it has every content
    word of it (stemmed, as the search index stems them), in any order. A claim of fewer than two
    content words is matched exactly: one word alone is too blunt (see MIN_TOKENS)."""
    from mateclaw_mem.index.tokenizer import tokenize

    exact = Matcher([Fingerprint.of(claim)])
    words = {t for t in tokenize(claim) if t.strip() and t not in _FUNCTION_WORDS}
    if len(words) < MIN_TOKENS:
        return exact.contains
    return lambda text: exact.contains(text) or words <= set(tokenize(text))
