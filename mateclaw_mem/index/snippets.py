"""Snippets: about ±80 characters around the best place a chunk matched, terms marked `[[term]]`."""

from __future__ import annotations

from dataclasses import dataclass

from mateclaw_mem.index.tokenizer import token_spans

RADIUS = 80
_PLACES_PER_TERM = 3  # first places per query term considered for the snippet window


@dataclass(frozen=True)
class Snippet:
    text: str
    offset: int  # character offset in the chunk of the first highlighted term (-1 if none)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping spans become one (the CJK bigrams of "周日早上" -> one highlight)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _key(term: str) -> str:
    """A prefix every word that stems to `term` starts with (the stemmer only changes word endings)."""
    return term if len(term) <= 2 else term[: min(4, len(term) - 1)]


def _matches(text: str, terms: set[str], radius: int) -> list[tuple[str, int, int]]:
    """Query-term spans in `text`. Tokenizing a whole 1,500-character chunk is most of a search's
    time, so only windows around places where a term's prefix occurs are tokenized."""
    lowered = text.lower()
    windows: list[tuple[int, int]] = []
    for term in terms:
        key = _key(term)
        at, seen = lowered.find(key), 0
        while at != -1 and seen < _PLACES_PER_TERM:
            windows.append((max(0, at - radius), min(len(text), at + len(key) + radius)))
            at, seen = lowered.find(key, at + 1), seen + 1
    out: list[tuple[str, int, int]] = []
    for lo, hi in _merge_windows(windows, text):
        out.extend((tok, lo + s, lo + e) for tok, s, e in token_spans(text[lo:hi]) if tok in terms)
    return out


def _merge_windows(windows: list[tuple[int, int]], text: str) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(windows):
        # Widen to whitespace so no word is cut (CJK has none; a cut there costs at most one bigram).
        floor, ceiling = max(0, lo - 40), min(len(text), hi + 40)
        while lo > floor and not text[lo - 1].isspace():
            lo -= 1
        while hi < ceiling and not text[hi].isspace():
            hi += 1
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def make_snippet(text: str, terms: set[str], radius: int = RADIUS) -> Snippet:
    matches = _matches(text, terms, radius)
    if not matches:
        end = min(len(text), 2 * radius)
        return Snippet(_flat(text[:end]) + ("…" if end < len(text) else ""), -1)
    # The window (centred on a match) holding the most distinct query terms wins; earliest on ties.
    best_start, best_count = matches[0][1], 0
    for _, s, _e in matches:
        lo, hi = s - radius, s + radius
        count = len({t for t, s2, e2 in matches if s2 >= lo and e2 <= hi})
        if count > best_count:
            best_start, best_count = s, count
    lo = max(0, best_start - radius)
    hi = min(len(text), best_start + radius)
    spans = _merge([(s, e) for _, s, e in matches if s >= lo and e <= hi])
    parts: list[str] = []
    pos = lo
    for s, e in spans:
        parts.append(text[pos:s])
        parts.append(f"[[{text[s:e]}]]")
        pos = e
    parts.append(text[pos:hi])
    out = _flat("".join(parts))
    first = spans[0][0] if spans else best_start
    return Snippet(("…" if lo > 0 else "") + out + ("…" if hi < len(text) else ""), first)


def _flat(text: str) -> str:
    """One line: a snippet is shown in lists and tool results."""
    return " ".join(text.split())
