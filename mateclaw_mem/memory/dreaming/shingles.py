"""Shingles and similarity of short texts (facts, MEMORY.md lines): what dreaming clusters and
compares candidates with, from the shared tokenizer.

- `shingles`: Latin words (stemmed, stopwords dropped) plus adjacent-word pairs, CJK character bigrams
  and content characters: whether a fact is already in MEMORY.md, and a focused dream's topic match.
- `words` / `content_words`: the same claim in other words (memory/dreaming/claims.py). Word order
  and inflection are folded away, and so are the words a note adds around a claim without changing
  it ("the user", "really", "always"), so "I really like hiking" and "User likes hiking" read alike.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable
from functools import lru_cache

from mateclaw_mem.index.tokenizer import STOPWORDS, tokenize

_CJK_TOKEN = re.compile(
    r"^[\u1100-\u11ff\u3040-\u30ff\u31f0-\u31ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
)
_CJK_STOP_CHARS = frozenset("的了在是去我你他她它们这那和与也都就要会对把被很还又再每个一")
_SOURCE_TAIL = re.compile(r"\s*\((?:Source|来源)[:：].*\)\s*$")
_PIECE = re.compile(r"[\u1100-\u11ff\u3040-\u30ff\u31f0-\u31ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
                    r"\uf900-\ufaff]|[^\W_]+(?:'[^\W_]+)?")


def _stems(*words: str) -> frozenset[str]:
    # Through the tokenizer, so the lists below follow its stemmer instead of spelling its output.
    return frozenset(t for w in words for t in tokenize(w))


# Words a note puts around a claim without changing what it claims: who it is about (a daily note is
# about the person), emphasis and habit ("really", "always"), the "actually" of a correction (the
# correction itself is read from the whole text, memory/contradictions/detect.py) and what is left of
# a negation (claims.py compares negations on their own, as "not" already is a stopword).
_FILLERS = _stems("user", "users", "person", "very", "always", "usually", "actually", "currently", "still",
                  "also", "definitely", "generally", "truly", "absolutely", "lot", "never", "cannot", "doesn",
                  "don", "didn", "isn", "aren", "wasn", "weren", "won", "hasn", "haven")
_CJK_FILLERS = re.compile(r"用户|提醒[:：]?")
# Verbs extraction already reads as one key ("I love / enjoy / adore X" is `likes: X`).
_FOLD = {next(iter(_stems(a))): next(iter(_stems(b)))
         for a, b in (("loves", "likes"), ("enjoys", "likes"), ("adores", "likes"), ("hates", "dislikes"))}


def shingles(text: str) -> frozenset[str]:
    """Content words (stemmed, stopwords dropped), adjacent Latin word pairs, CJK bigrams, and CJK
    content characters.

    Why the single CJK characters: a bigram that spans a particle ("去公", "在公") differs between
    two phrasings of the same fact and would split them; the characters themselves still match, and
    IDF weighting keeps common ones (用, 户) from gluing unrelated facts together."""
    tokens = [t for t in tokenize(_SOURCE_TAIL.sub("", text)) if t not in STOPWORDS]
    out = set(tokens)
    for a, b in itertools.pairwise(tokens):
        # CJK tokens are already bigrams; pairing them again would only add noise.
        if not _CJK_TOKEN.match(a) and not _CJK_TOKEN.match(b):
            out.add(f"{a} {b}")
    for t in tokens:
        if _CJK_TOKEN.match(t):
            out.update(ch for ch in t if ch not in _CJK_STOP_CHARS)
    return frozenset(out)


def strip_source(text: str) -> str:
    """A MEMORY.md line without the `(Source: … · dreamed …)` dreaming put after it."""
    return _SOURCE_TAIL.sub("", text)


def idf_weights(docs: Iterable[frozenset[str]]) -> dict[str, float]:
    docs = list(docs)
    df: dict[str, int] = {}
    for d in docs:
        for s in d:
            df[s] = df.get(s, 0) + 1
    n = max(1, len(docs))
    return {s: math.log(1.0 + n / c) for s, c in df.items()}


def similarity(a: frozenset[str], b: frozenset[str], weights: dict[str, float]) -> float:
    """Weighted Jaccard: shared rare shingles count more than shared common ones."""
    if not a or not b:
        return 0.0
    inter = sum(weights.get(s, 1.0) for s in a & b)
    if not inter:
        return 0.0
    union = sum(weights.get(s, 1.0) for s in a | b)
    return inter / union if union else 0.0


def containment(a: frozenset[str], b: frozenset[str]) -> float:
    """How much of `a` is inside `b` (1.0 = all of it)."""
    return len(a & b) / len(a) if a else 0.0


@lru_cache(maxsize=8192)  # a night compares each fact with many others; its text is all this depends on
def content_words(text: str) -> tuple[str, ...]:
    """What a text says, in order: Latin content words (stemmed, stopwords and fillers dropped, a few
    verbs folded), and CJK content characters (a CJK run has no word boundaries to keep)."""
    out: list[str] = []
    for piece in _PIECE.findall(_CJK_FILLERS.sub(" ", _SOURCE_TAIL.sub("", text)).lower()):
        if _CJK_TOKEN.match(piece):
            if piece not in _CJK_STOP_CHARS:
                out.append(piece)
            continue
        for t in tokenize(piece):
            if t not in STOPWORDS and t not in _FILLERS:
                out.append(_FOLD.get(t, t))
    return tuple(out)


@lru_cache(maxsize=8192)
def words(text: str) -> frozenset[str]:
    """The set two phrasings of one claim are compared on: content words without their order, and CJK
    bigrams beside the characters (a shared bigram says more than two shared characters)."""
    bigrams = (t for t in tokenize(_CJK_FILLERS.sub(" ", _SOURCE_TAIL.sub("", text)))
               if _CJK_TOKEN.match(t) and len(t) == 2)
    return frozenset(content_words(text)) | frozenset(b for b in bigrams if not set(b) & _CJK_STOP_CHARS)
