"""What the store hands out: a file as read (with its hash), the result of a write, the event its
listeners get; and a planned change of a multi-file operation (`Step`, journal.py). Plain values;
the store in workspace/store.py makes them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from mateclaw_mem.markdown import frontmatter


def sha256(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Snapshot:
    rel: str
    path: Path
    text: str
    sha: str  # "" when the file does not exist
    exists: bool

    @property
    def body(self) -> str:
        return frontmatter.body(self.text)


@dataclass(frozen=True)
class WriteResult:
    rel: str
    path: Path
    sha: str
    previous_sha: str
    changed: bool
    archived: tuple[str, ...] = ()
    version: int | None = None  # history version that holds the previous content
    pins_stripped: int = 0  # pin markers removed from a machine's text (only a person pins)
    replans: int = 0  # concurrent saves found at the final step (each kept, then re-planned on)

    @property
    def truncated(self) -> bool:
        return bool(self.archived)


@dataclass(frozen=True)
class WriteEvent:
    agent: str
    owner: str | None
    rel: str
    path: Path
    sha: str  # "" after a delete
    actor: str


@dataclass(frozen=True)
class Step:
    """One planned change: `data` the new bytes (None: the file is removed), `before` the hash the
    file had when it was planned ("" = it did not exist)."""

    agent: str
    owner: str | None
    rel: str
    before: str
    data: bytes | None
    actor: str
    reason: str = ""

    @property
    def after(self) -> str:
        return "" if self.data is None else sha256(self.data)
