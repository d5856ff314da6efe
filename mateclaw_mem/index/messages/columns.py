"""Per-position numpy columns of an `OwnerView`'s documents: what the ranking steps after the first
stage read for a few hundred turns at a time (messages/scoring.py).

Position p is the p-th document the view met (`OwnerView.ids[p]`). The columns grow by doubling;
a document parsed again overwrites its row, and relinking rewrites its links. Links are positions,
-1 for none: the turn just before and after in its conversation, and the same speaker's turns two
steps away (what `Doc.around` and `Doc.thread` hold as ids).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mateclaw_mem.index.messages.turns import Doc

PREV, NEXT, THREAD_PREV, THREAD_NEXT = range(4)


class Columns:
    def __init__(self, *, links_set_when_read: bool = False) -> None:
        import numpy as np  # here, not at the top: a command that never searches messages skips it

        # True: whoever reads a row's links sets them first (the on-disk view, for the turns it
        # prepares), so rows grow as zeros - filling tens of thousands of rows with -1 that no step
        # reads was a tenth of a search at 100k messages.
        self.links_set_when_read = links_set_when_read
        self.cap = 0
        self.ids: Any = np.zeros(0, dtype=np.int64)
        self.links: Any = np.zeros((0, 4), dtype=np.intp)
        self.conv: Any = np.zeros(0, dtype=np.intp)  # conversation code (`conv_codes`)
        self.speaker: Any = np.zeros(0, dtype=np.intp)  # speaker code (`speaker_codes`), -1 for none
        self.question_share: Any = np.zeros(0)
        self.is_question: Any = np.zeros(0, dtype=bool)
        self.echo: Any = np.zeros(0)
        self.has_time: Any = np.zeros(0, dtype=bool)
        self.has_number: Any = np.zeros(0, dtype=bool)
        # Names (`Doc.names`, space-joined) as codes into `values`: a who/where question's boost tests
        # each distinct set once, not each of its few hundred candidates (a Python object per candidate
        # was a third of such a search).
        self.names: Any = np.zeros(0, dtype=np.int32)
        self.conv_codes: dict[str, int] = {}
        self.speaker_codes: dict[str, int] = {}
        self.names_codes: dict[str, int] = {}
        self.values: list[str] = []  # the strings of `names` codes (the on-disk view: its row tables')

    def _grow(self, p: int) -> None:
        import numpy as np

        cap = max(64, p + p // 4)
        for name in ("ids", "links", "conv", "speaker", "question_share", "is_question", "echo", "has_time",
                     "has_number", "names"):
            old = getattr(self, name)
            new = np.full((cap, 4), -1, dtype=old.dtype) if old.ndim == 2 and not self.links_set_when_read \
                else np.zeros((cap, *old.shape[1:]), dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
        self.cap = cap

    def reserve(self, n: int) -> None:
        """Room for positions 0 .. n - 1."""
        if n > self.cap:
            self._grow(n)

    def put(self, p: int, d: Doc) -> None:
        """Row p from `d` (its echo is set apart, by `put_echo`, once its predecessor is known)."""
        if p >= self.cap:
            self._grow(p)
        self.ids[p] = d.id
        self.conv[p] = self.conv_codes.setdefault(d.conversation_id, len(self.conv_codes))
        self.speaker[p] = -1 if d.speaker is None else self.speaker_codes.setdefault(d.speaker, len(self.speaker_codes))
        self.question_share[p] = d.question_share
        self.is_question[p] = d.is_question
        self.echo[p] = d.echo
        self.has_time[p] = d.has_time
        self.has_number[p] = d.has_number
        names = " ".join(sorted(d.names))
        code = self.names_codes.get(names)
        if code is None:
            code = self.names_codes[names] = len(self.values)
            self.values.append(names)
        self.names[p] = code

    def names_within(self, pos: Any, known: frozenset[str]) -> Any:
        """Whether each turn at `pos` names no one outside `known` (a bool array)."""
        import numpy as np

        from mateclaw_mem.index.messages.ordinals import unique_inverse

        distinct, inverse = unique_inverse(self.names[pos])
        values = self.values
        return np.array([frozenset(values[c].split()) <= known for c in distinct.tolist()], dtype=bool)[inverse]

    def put_echo(self, p: int, echo: float) -> None:
        self.echo[p] = echo

    def put_links(self, p: int, prev: int, nxt: int, thread_prev: int, thread_next: int) -> None:
        self.links[p] = (prev, nxt, thread_prev, thread_next)
