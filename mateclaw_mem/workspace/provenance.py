"""Who wrote what: the bookkeeping behind "machines never cut a person's text".

For every memory file the store keeps a small record under `.mateclaw/provenance/`: a hash of each
`##` section of the version the store last wrote, hashes of the lines a person wrote in each section
(by hand in an editor, or through a person's own write), and the high-water mark of the file since a
person last saw it (size and entries), which the cumulative erosion guard measures against.

A hand edit is found without a watcher: when a machine writer reads a file whose sections differ from
what the store last wrote, the differing sections are the person's. Hashes, not text, are kept, so a
secret the person later removes does not live on here. The record is derived bookkeeping: deleting it
makes every existing section count as the person's (the safe side), never the other way round.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from mateclaw_mem.markdown.sections import PREAMBLE_KEY, split_sections
from mateclaw_mem.workspace.atomic import write_plain

PREAMBLE = PREAMBLE_KEY
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S")


def line_id(line: str) -> str:
    return hashlib.sha1(" ".join(line.split()).encode("utf-8")).hexdigest()[:16]


def _section_hashes(body: str) -> dict[str, str]:
    preamble, sections = split_sections(body)
    out = {PREAMBLE: hashlib.sha1(preamble.strip().encode("utf-8")).hexdigest()[:16]}
    for s in sections:
        out[s.key] = hashlib.sha1(s.text.rstrip().encode("utf-8")).hexdigest()[:16]
    return out


def _section_lines(body: str) -> dict[str, list[str]]:
    preamble, sections = split_sections(body)
    out = {PREAMBLE: [ln for ln in preamble.splitlines() if ln.strip()]}
    for s in sections:
        out[s.key] = [ln for ln in s.text.splitlines()[1:] if ln.strip()]
    return out


def count_entries(body: str) -> int:
    """`##` sections and list items: the unit the loss guards count."""
    _, sections = split_sections(body)
    items = sum(1 for ln in body.splitlines() if _ITEM.match(ln))
    return len(sections) + items


@dataclass
class Record:
    known: bool = False  # False: no record yet (a file made by hand, or one from before provenance)
    last_sha: str = ""
    sections: dict[str, str] = field(default_factory=dict)  # section key -> hash, as the store last wrote it
    person: dict[str, list[str]] = field(default_factory=dict)  # section key -> ids of lines a person wrote
    peak_chars: int = 0
    peak_entries: int = 0

    def person_lines(self, key: str) -> set[str]:
        return set(self.person.get(key, ()))

    def mark_person(self, body: str, keys: set[str] | None = None) -> None:
        """Record the lines of `body`'s sections (all, or those in `keys`) as written by a person."""
        for key, lines in _section_lines(body).items():
            if keys is not None and key not in keys:
                continue
            ids = [line_id(ln) for ln in lines]
            if ids:
                self.person[key] = sorted(set(self.person.get(key, ())) | set(ids))

    def hand_edited_keys(self, body: str) -> set[str]:
        """Sections of `body` that differ from what the store last wrote (all of them without a record)."""
        now = _section_hashes(body)
        if not self.known:
            preamble, _ = split_sections(body)
            return {k for k in now if k != PREAMBLE or preamble.strip()}
        return {k for k, v in now.items() if self.sections.get(k) != v}

    def note_hand_edit(self, body: str, sha: str) -> None:
        """`body` (hash `sha`) is on disk: if the store did not write it, its changed sections are the
        person's and erosion is measured from it (the person has seen and chosen this version)."""
        if self.last_sha == sha:
            return
        self.mark_person(body, self.hand_edited_keys(body))
        self.peak_chars, self.peak_entries = len(body.strip()), count_entries(body)

    def after_write(self, body: str, sha: str, *, by_person: bool) -> None:
        self.known = True
        self.last_sha = sha
        self.sections = _section_hashes(body)
        chars, entries = len(body.strip()), count_entries(body)
        if by_person:
            # The person has seen and chosen this version: erosion is measured from here.
            self.peak_chars, self.peak_entries = chars, entries
        else:
            self.peak_chars, self.peak_entries = max(self.peak_chars, chars), max(self.peak_entries, entries)
        live = _section_lines(body)
        # Forget line ids that are no longer anywhere in their section (the person removed them).
        for key in list(self.person):
            present = {line_id(ln) for ln in live.get(key, ())}
            kept = [i for i in self.person[key] if i in present]
            if kept:
                self.person[key] = kept
            else:
                del self.person[key]


class ProvenanceStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str, rel: str) -> Path:
        return self.root / key / f"{rel}.json"

    def load(self, key: str, rel: str) -> Record:
        try:
            raw = json.loads(self._path(key, rel).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError, OSError):
            return Record()
        with contextlib.suppress(TypeError, ValueError):
            return Record(known=True, last_sha=str(raw.get("last_sha", "")), sections=dict(raw.get("sections", {})),
                          person={k: list(v) for k, v in dict(raw.get("person", {})).items()},
                          peak_chars=int(raw.get("peak_chars", 0)), peak_entries=int(raw.get("peak_entries", 0)))
        return Record()

    def save(self, key: str, rel: str, record: Record) -> None:
        data = {"last_sha": record.last_sha, "sections": record.sections, "person": record.person,
                "peak_chars": record.peak_chars, "peak_entries": record.peak_entries}
        # Derived bookkeeping: no fsync (a crash loses at most one record, which errs to the person's side).
        write_plain(self._path(key, rel), json.dumps(data, ensure_ascii=False, sort_keys=True).encode("utf-8"),
                    fsync=False)

    def drop(self, key: str, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key, rel).unlink()
