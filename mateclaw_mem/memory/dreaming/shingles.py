"""Shingles and similarity of short texts (facts, MEMORY.md lines): what dreaming clusters and
compares candidates with. Latin words (stemmed, stopwords dropped) plus adjacent-word pairs, and CJK
character bigrams and content characters, from the shared tokenizer."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable

from mateclaw_mem.index.tokenizer import STOPWORDS, tokenize

_CJK_TOKEN = re.compile(
    r"^[\u1100-\u11ff\u3040-\u30ff\u31f0-\u31ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
)
_CJK_STOP_CHARS = frozenset("的了在是去我你他她它们这那和与也都就要会对把被很还又再每个一")
_SOURCE_TAIL = re.compile(r"\s*\((?:Source|来源)[:：].*\)\s*$")


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
