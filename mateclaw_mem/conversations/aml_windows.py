"""Evidence windows for AML Search (`aml.neighbours: N`): each hit returned with up to N turns
before and after it in its session, so an answer model reads the question a reply answers and the
reply a question got.

One item per hit, its `content` the window in conversation order: the neighbouring turns each on a
line of their own marked `[context] `, the hit's own line as Search renders it without windows (so
the hit is the unmarked line). Read from the conversation log in conversation order (its
`messages_by_conversation` index), never from the search views.

Bounds: the windows never add items - a hit already shown inside an earlier hit's window is not
returned again (its slot goes to the next hit), no turn appears twice in one answer, and at most
`top_k` items come back. Neighbouring turns are added nearest first and count against a character
budget per search (`aml.neighbour-chars`); once it is spent the remaining hits come back bare.
Facts (model mode) have no conversation neighbours and come back as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mateclaw_mem.conversations.aml_records import AmlItem
    from mateclaw_mem.conversations.log import ConversationLog, StoredMessage

MARK = "[context] "


def _message_id(item: AmlItem) -> int | None:
    return int(item.id[1:]) if item.id.startswith("m") and item.id[1:].isdigit() else None


def with_windows(log: ConversationLog, agent: str, user_id: str, items: list[AmlItem], *, n: int, budget: int,
                 limit: int, render: Callable[[StoredMessage], str]) -> list[AmlItem]:
    """`items` (best first) as windows of up to `n` turns each side, deduplicated, at most `limit`;
    `budget` characters of neighbouring turns in all (0: no limit)."""
    shown: set[int] = set()
    left = budget if budget > 0 else None
    out: list[AmlItem] = []
    for item in items:
        if len(out) >= limit:
            break
        mid = _message_id(item)
        if mid is not None and mid in shown:
            continue  # inside an earlier, better-ranked hit's window already
        # Read only while the budget lasts: past it the remaining hits come back bare, unread.
        window = log.around(agent, user_id, [mid], n).get(mid) if mid is not None and left != 0 else None
        if mid is not None:
            shown.add(mid)
        if window is None:
            out.append(item)
            continue
        before, after = window
        before = [m for m in before if m.id not in shown]
        after = [m for m in after if m.id not in shown]
        taken_before: list[str] = []
        taken_after: list[str] = []
        # Nearest first, alternating sides, while the budget lasts.
        for k in range(max(len(before), len(after))):
            for side, taken in ((before, taken_before), (after, taken_after)):
                idx = len(side) - 1 - k if side is before else k
                if not 0 <= idx < len(side):
                    continue
                line = MARK + render(side[idx])
                if left is not None and len(line) > left:
                    left = 0
                    continue
                if left is not None:
                    left -= len(line)
                taken.append(line)
                shown.add(side[idx].id)
        if not taken_before and not taken_after:
            out.append(item)
            continue
        out.append(replace(item, content="\n".join([*reversed(taken_before), item.content, *taken_after])))
    return out
