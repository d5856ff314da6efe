"""The shape of a store that can hold a person's words, as a forget sees it.

A `Holder` is one store: its name, what it holds, how a claim is forgotten in it (`forget(cut)`,
answering a dict with at least `removed`), the SQLite tables it answers for (`"log.db:messages"`:
tests/test_forget_census.py checks that every table with a text column is claimed by one holder
or declared free of words) and the databases its forget may change (scrubbed afterwards, so the
old bytes leave the file too). Which stores exist is runtime/holders.py's business, the one
registry; this module only knows their shape, so the service runs them without knowing any.

`Cut` is what every holder is handed: who (agent, the owner asked for, the owner whose files those
are), the matcher (a fingerprint: a resumed forget no longer has the words), and the two ways a
stored record gives the claim up - `holds(text)` and `cut(text)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mateclaw_mem.memory.forget.matching import MARKER, Fingerprint, Matcher, cut_text, loosely, tokens

if TYPE_CHECKING:
    from mateclaw_mem.memory.forget.receipt import ForgetReport


@dataclass
class Cut:
    agent: str
    owner: str | None  # as asked: the conversation log's owner
    files_owner: str | None  # whose files (None with owner isolation off: everyone shares the agent's)
    matcher: Matcher
    fingerprint: Fingerprint
    batch: str
    actor: str
    now: bool  # history copies purged at once instead of after the undo window
    claim: str | None  # the words; None when a pending forget is run again from its fingerprint
    report: ForgetReport = field(repr=False)  # the built-in holders fill its long-standing fields
    _loose: Callable[[str], bool] | None = field(default=None, repr=False)

    def holds(self, text: str) -> bool:
        return self.matcher.contains(text)

    def holds_loosely(self, text: str) -> bool:
        """For stores that reword what they keep (a provider such as Mem0): every content word of the
        claim, in any order (`matching.loosely`); exactly as `holds` when the words are gone (a
        resumed forget)."""
        if self.claim is None:
            return self.holds(text)
        if self._loose is None:
            self._loose = loosely(self.claim)
        return self._loose(text)

    def cut(self, text: str) -> str:
        """A stored record's text without the sentences holding the claim; lines left empty go, and
        a record left with nothing says `[forgotten]` (a run log still reads as a row)."""
        if not self.matcher.contains(text):
            return text
        out, _ = cut_text(text, self.matcher)
        return out if tokens(out.replace(MARKER, "")) else MARKER


@dataclass(frozen=True)
class Holder:
    name: str
    holds: str  # what of a person's words it keeps, in one line
    forget: Callable[[Cut], dict[str, Any]]
    tables: tuple[str, ...] = ()  # "file.db:table" it answers for (the census)
    databases: tuple[str, ...] = ()  # state files its forget may change: scrubbed when it removed something
