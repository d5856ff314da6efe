"""Snippets: about ±80 characters around the best place a chunk matched, terms marked `[[term]]`."""

from __future__ import annotations

from dataclasses import dataclass

from mateclaw_mem.index.tokenizer import term_spans

RADIUS = 80
_PLACES_PER_TERM = 16  # places per query term considered for the window: bounds the pair scan below


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


def _matches(text: str, terms: set[str]) -> list[tuple[str, int, int]]:
    """Query-term spans in `text`. Tokenizing a whole 1,500-character chunk was most of a search's
    time; `term_spans` finds the terms by substring and checks only the words around them."""
    return term_spans(text, terms, per_term=_PLACES_PER_TERM)


def _widen(text: str, lo: int, hi: int) -> tuple[int, int]:
    """Widen to whitespace so no word is cut (CJK has none; a cut there costs at most one bigram)."""
    floor, ceiling = max(0, lo - 40), min(len(text), hi + 40)
    while lo > floor and not text[lo - 1].isspace():
        lo -= 1
    while hi < ceiling and not text[hi].isspace():
        hi += 1
    return lo, hi


def make_snippet(text: str, terms: set[str], radius: int = RADIUS) -> Snippet:
    matches = _matches(text, terms)
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
    # Every occurrence inside the window is highlighted, not only the first places looked at above;
    # words cut by the window edge are read whole (widened to whitespace) so no cut word is matched.
    wlo, whi = _widen(text, lo, hi)
    spans = _merge([(wlo + s, wlo + e) for _, s, e in term_spans(text[wlo:whi], terms)
                    if lo <= wlo + s and wlo + e <= hi])
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
