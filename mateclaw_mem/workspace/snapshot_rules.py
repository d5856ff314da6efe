"""What a snapshot (export/import) may carry: the seed's whitelist, its limits, and the wider vault import.

The seed exchanges an employee's memory as AGENTS/MEMORY/PROFILE/SOUL/KNOWLEDGE.md and daily notes
`memory/YYYY-MM-DD.md` with real dates, at most 500 entries of 1 MB each and 16 MB in all. Extras
(structured entries, DREAMS.md, per-owner memory) ride along only when their flag is on. A vault
import (`mate.memory.snapshot-vault-import`) takes any `.md` of a folder or zip, as the CLI always
did, within wider limits that are still bounded because every entry is streamed.

`enabled` and `sort_order` never travel: they say how the *target* agent uses a file, so an export
leaves them out and an import keeps the target's values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.markdown import frontmatter

SEED_FILES: tuple[str, ...] = ("AGENTS.md", "MEMORY.md", "PROFILE.md", "SOUL.md", "KNOWLEDGE.md")
STRUCTURED_FILES: tuple[str, ...] = tuple(f"structured/{k}.md" for k in ("user", "feedback", "project", "reference"))
EXTRAS: tuple[str, ...] = ("structured", "dreams", "facts", "owners")
TARGET_KEYS: tuple[str, ...] = ("enabled", "sort_order")
_DAILY = re.compile(r"memory/(\d{4})-(\d{2})-(\d{2})\.md")
_DAILY_LIKE = re.compile(r"memory/\d+-\d+-\d+\.md")
_KEY_LINE = re.compile(r"^(?:enabled|sort_order)[ \t]*:")


@dataclass(frozen=True)
class Limits:
    max_file_bytes: int = 1024 * 1024
    max_total_bytes: int = 16 * 1024 * 1024
    max_entries: int = 500


SEED_LIMITS = Limits()
# The vault import's limits: each entry is streamed and never kept, so these bound time, not memory.
VAULT_LIMITS = Limits(max_file_bytes=5 * 1024 * 1024, max_total_bytes=200 * 1024 * 1024, max_entries=20_000)


@dataclass(frozen=True)
class Policy:
    vault: bool = False
    extras: frozenset[str] = field(default_factory=frozenset)
    limits: Limits | None = None  # None: the mode's own limits
    data_files: frozenset[str] = field(default_factory=frozenset)  # sidecars (facts/events.jsonl), not Markdown

    @property
    def bounds(self) -> Limits:
        return self.limits or (VAULT_LIMITS if self.vault else SEED_LIMITS)

    @property
    def strict(self) -> bool:
        """Seed mode refuses an archive whose content is damaged instead of skipping the file."""
        return not self.vault

    def skip_reason(self, rel: str) -> str:
        """Why `rel` is not part of a snapshot ("" = it is). A daily note with an impossible date
        raises: only a hand-made or hostile archive has one."""
        if self.vault or rel in self.data_files:
            return ""
        inner = rel
        if rel.startswith("owners/"):
            parts = rel.split("/", 2)
            if "owners" not in self.extras:
                return "per-owner memory; set mate.memory.snapshot-extras: [owners] to carry it"
            if len(parts) < 3:
                return "not a file of an owner's folder"
            inner = parts[2]
        if inner in SEED_FILES:
            return ""
        if _DAILY_LIKE.fullmatch(inner):
            check_daily(inner)
            return ""
        if inner in STRUCTURED_FILES:
            return "" if "structured" in self.extras else \
                "structured entries; set mate.memory.snapshot-extras: [structured] to carry them"
        if inner == "DREAMS.md":
            return "" if "dreams" in self.extras else \
                "the dream diary; set mate.memory.snapshot-extras: [dreams] to carry it"
        return ("not in the seed's whitelist (AGENTS/MEMORY/PROFILE/SOUL/KNOWLEDGE.md, memory/YYYY-MM-DD.md); "
                "set mate.memory.snapshot-vault-import: true to import any .md")


def check_daily(rel: str) -> None:
    m = _DAILY.fullmatch(rel)
    try:
        if m is None:
            raise ValueError("not YYYY-MM-DD")
        date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError as exc:
        raise InvalidInputError(f"entry {rel!r} is a daily note with an impossible date ({exc}); "
                                "refusing the whole archive") from None


def policy_from(vault: bool, extras: Any) -> Policy:
    return Policy(vault=vault, extras=frozenset(extras or ()))


def strip_target_keys(text: str) -> str:
    """The file without `enabled` / `sort_order` (a block left empty goes too): the target decides."""
    block, rest = frontmatter.split(text)
    if not block:
        return text
    lines = block.splitlines(keepends=True)
    inner = [ln for ln in lines[1:-1] if not _KEY_LINE.match(ln)]
    if len(inner) == len(lines) - 2:
        return text
    return "".join([lines[0], *inner, lines[-1]]) + rest if inner else rest


def adopt_target_keys(incoming: str, current: str) -> str:
    """The incoming file with the target's own `enabled` / `sort_order` lines (verbatim, at the top of
    the frontmatter) instead of its own: a file that goes back where it came from is byte for byte
    what was there, and a new file gets no keys, so the target's defaults apply."""
    text = strip_target_keys(incoming)
    block = frontmatter.split(current)[0] if current else ""
    keys = [ln for ln in block.splitlines(keepends=True)[1:-1] if _KEY_LINE.match(ln)]
    if not keys:
        return text
    if not keys[-1].endswith(("\n", "\r")):
        keys[-1] += "\n"
    own, rest = frontmatter.split(text)
    if not own:
        opening = block.splitlines(keepends=True)[0]
        closing = block.splitlines(keepends=True)[-1]
        if not closing.endswith(("\n", "\r")):
            closing += "\n"
        return opening + "".join(keys) + closing + rest
    first, *others = own.splitlines(keepends=True)
    return first + "".join(keys) + "".join(others) + rest
