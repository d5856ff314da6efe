"""The `--- RECALLED MEMORY ---` block: what the memory providers prefetched for this turn.

- Deduplicated: an item whose text the prompt already carries (the always-on files, the structured
  block, the conversation itself) or that repeats an item already admitted is dropped; an item that
  holds an admitted one whole (a dated message a daily-note line was taken from) replaces it. Compared as
  word sequences (case, punctuation and Markdown markers folded away), so a search snippet of
  MEMORY.md matches the MEMORY.md block it came from.
  Word *sequences*, not word sets: a new fact made of words the files use elsewhere still gets in.
- Fair across providers: items are taken round-robin by each provider's own rank (scores of
  different providers are not comparable), so one chatty provider cannot crowd out the others.
- Bounded: the block, title and footer included, stays within `max_chars`; an item longer than
  `ITEM_MAX_CHARS` is cut with an ellipsis, items that do not fit are counted in a footer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import zip_longest
from typing import TYPE_CHECKING, Any

from mateclaw_mem.memory.context.tokens import estimate_tokens

if TYPE_CHECKING:
    from mateclaw_mem.providers.base import ProviderItem

RECALLED_TITLE = "--- RECALLED MEMORY ---"
CONVERSATION_SOURCE = "conversations/"
ITEM_MAX_CHARS = 500
_NON_WORD = re.compile(r"[^\w]+")
_FOOTER_ROOM = 100  # "(N more recalled items not shown: over the N-char budget)" always fits
_MIN_ITEM = 24  # room below which no item fits (a dated line is longer): the rest is counted, not read


@dataclass(frozen=True)
class RecalledItem:
    provider: str
    text: str
    source: str
    score: float

    @property
    def line(self) -> str:
        # A recalled message opens with its date and speaker, which say more than its conversation id;
        # the tag would cost ~30 chars of the budget on every line.
        if self.source.startswith(CONVERSATION_SOURCE):
            return f"- {self.text}"
        return f"- [{self.source}] {self.text}"

    def as_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "text": self.text, "source": self.source, "score": self.score}


@dataclass(frozen=True)
class RecalledBlock:
    text: str
    max_chars: int
    items: list[RecalledItem] = field(default_factory=list)
    duplicates: int = 0  # dropped: the prompt already holds their text
    omitted: int = 0  # dropped: over the budget

    def as_dict(self) -> dict[str, Any]:
        return {"chars": len(self.text), "tokens": estimate_tokens(self.text), "budget": self.max_chars,
                "items": [i.as_dict() for i in self.items], "duplicates": self.duplicates,
                "omitted": self.omitted}


def recalled_block(by_provider: Mapping[str, Sequence[ProviderItem]], seen: Sequence[str],
                   max_chars: int) -> RecalledBlock:
    """`by_provider`: each provider's items, best first; `seen`: text the prompt already carries."""
    haystack = "\n".join(fold_prompt(s) for s in seen)
    room = max_chars - len(RECALLED_TITLE) - 1 - _FOOTER_ROOM
    admitted: list[RecalledItem] = []
    folded: list[str] = []
    duplicates = omitted = 0
    joined = ""  # the admitted keys, "\0"-separated: one substring search instead of one per key
    ranked = zip_longest(*[[(name, i) for i in items] for name, items in by_provider.items()])
    for name, item in (pair for rank in ranked for pair in rank if pair is not None):
        if room < _MIN_ITEM:  # full: what is left is not shown, whatever it says
            omitted += 1
            continue
        text = _one_line(item.text)
        key = _fold_item(text)
        if not key or key in haystack or key in joined:
            duplicates += 1
            continue
        entry = RecalledItem(name, _cut(text), item.source, item.score)
        # An item holding one already admitted (the dated message a note line was copied from) takes
        # its place: the same words, with the day and the speaker.
        held = next((j for j, f in enumerate(folded) if f in key), None)
        if held is not None:
            duplicates += 1
            grow = len(entry.line) - len(admitted[held].line)
            if grow <= room:
                room -= grow
                admitted[held], folded[held] = entry, key
                joined = "\0".join(folded)
            continue
        if len(entry.line) + 1 > room:
            omitted += 1
            continue
        room -= len(entry.line) + 1
        admitted.append(entry)
        folded.append(key)
        joined = f"{joined}\0{key}"
    if not admitted:
        return RecalledBlock("", max_chars, [], duplicates, omitted)
    lines = [RECALLED_TITLE, *(i.line for i in admitted)]
    if omitted:
        noun = "item" if omitted == 1 else "items"
        lines.append(f"({omitted} more recalled {noun} not shown: over the {max_chars}-char budget)")
    return RecalledBlock("\n".join(lines), max_chars, admitted, duplicates, omitted)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cut(text: str) -> str:
    return text if len(text) <= ITEM_MAX_CHARS else text[: ITEM_MAX_CHARS - 1].rstrip() + "…"


def fold(text: str) -> str:
    """Words only, lower case, one space apart. Compared unpadded, so a word a snippet window cut
    at its `…` edge (or CJK, which has no spaces) still matches as a substring."""
    return " ".join(_NON_WORD.sub(" ", text.lower()).split())


# Cached: every prompt folds the same always-on files and mostly the same recalled lines again (a
# third of the block's time with 60 conversation hits). Sized by what one entry can weigh: a few
# system texts (large), many recalled lines (each short, cut to an item's size).
fold_prompt = lru_cache(maxsize=16)(fold)
_fold_item = lru_cache(maxsize=2048)(fold)
