"""Snippets: about ±80 characters around the best place a chunk matched, terms marked `[[term]]`."""

from __future__ import annotations

from dataclasses import dataclass

from mateclaw_mem.index.tokenizer import token_spans

RADIUS = 80


@dataclass(frozen=True)
class Snippet:
    text: str
    offset: int  # character offset in the chunk of the first highlighted term (-1 if none)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping or touching spans become one (CJK bigrams of "周日早上" -> one highlight)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def make_snippet(text: str, terms: set[str], radius: int = RADIUS) -> Snippet:
    matches = [(tok, s, e) for tok, s, e in token_spans(text) if tok in terms]
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
