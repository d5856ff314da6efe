"""The compressed month archive: `memory/archive/YYYY-MM.md.gz`, one per month, holding old daily
notes and diary archives byte for byte.

Why gzip of one Markdown document and not a zip: `zcat memory/archive/2026-10.md.gz` (or `zgrep`)
shows a person every word with tools they already have, and a single stream is simple to make
deterministic (no name, mtime 0, members sorted by path), so a rotation re-run writes the same
bytes and the store sees no change. Inside, every kept file is framed by its byte count and hash:

    <!-- file: memory/2026-10-03.md bytes=123 sha256=<hex> -->
    ...exactly 123 bytes...
    <!-- end: memory/2026-10-03.md -->

so a note that itself contains such a line cannot confuse the reader, and a damaged archive is
detected (hash, length, gzip CRC) and refused with a message rather than half read.

Writes go through `blobs` (lock, compare-and-swap, history, listeners); restoring a month writes its
files back as the person's decision (byte for byte, like an undo) and removes the archive, all under
one batch id, and refuses -- writing nothing -- when a file of the same name holds something else.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import BusyError, ConflictError, InvalidInputError, NotFoundError
from mateclaw_mem.workspace import blobs
from mateclaw_mem.workspace.journal import Step
from mateclaw_mem.workspace.records import sha256

if TYPE_CHECKING:
    from mateclaw_mem.workspace.records import WriteResult
    from mateclaw_mem.workspace.store_port import StorePort

ARCHIVE_DIR = "memory/archive"
MAX_BYTES = 256 * 1024 * 1024  # a month unpacking past this is a damaged (or hostile) file, not notes
_ARCHIVE_RE = re.compile(r"^memory/archive/(\d{4}-(?:0[1-9]|1[0-2]))\.md\.gz$")
_MONTH_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")
_MEMBER_RE = re.compile(r"^memory/[A-Za-z0-9_.\-/]+\.md$")
_FILE_RE = re.compile(rb"<!-- file: (\S+) bytes=(\d+) sha256=([0-9a-f]{64}) -->\n")
_DAILY_RE = re.compile(r"^memory/(\d{4}-\d{2}-\d{2})\.md$")
PERSON = "person"


def archive_rel(month: str) -> str:
    return f"{ARCHIVE_DIR}/{check_month(month)}.md.gz"


def is_archive(rel: str) -> bool:
    return _ARCHIVE_RE.match(rel) is not None


def month_of(rel: str) -> str | None:
    m = _ARCHIVE_RE.match(rel)
    return m.group(1) if m else None


def check_month(month: str) -> str:
    if not _MONTH_RE.match(month or ""):
        raise InvalidInputError(f"{month!r} is not a month; write it as YYYY-MM (e.g. 2026-10)")
    return month


@dataclass(frozen=True)
class Month:
    month: str
    rel: str
    sha: str
    size: int  # compressed bytes on disk
    members: dict[str, bytes] = field(default_factory=dict)  # file path -> its exact bytes

    def texts(self) -> list[tuple[str, str]]:
        """(file, text) of every kept file, for the search index."""
        return [(rel, data.decode("utf-8")) for rel, data in sorted(self.members.items())]


# -- the format --------------------------------------------------------------------------------------


def pack(month: str, members: dict[str, bytes]) -> bytes:
    """The archive's bytes: the same members always give the same bytes."""
    out = [f"# Memory archive — {month}\n".encode(),
           b"<!-- mateclaw-archive v1: each file below is kept byte for byte; "
           b"`mateclaw-mem archive AGENT restore " + month.encode() + b"` puts them back -->\n"]
    for rel in sorted(members):
        data = members[rel]
        out.append(f"\n<!-- file: {rel} bytes={len(data)} sha256={sha256(data)} -->\n".encode())
        out.append(data)
        out.append(f"\n<!-- end: {rel} -->\n".encode())
    return gzip.compress(b"".join(out), compresslevel=9, mtime=0)


def unpack(rel: str, blob: bytes) -> dict[str, bytes]:
    """The members of an archive; InvalidInputError naming the damage when it is not whole."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(blob), mode="rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise InvalidInputError(f"{rel}: damaged archive, not a whole gzip file ({exc})") from None
    if len(raw) > MAX_BYTES:
        raise InvalidInputError(f"{rel}: archive unpacks to more than {MAX_BYTES} bytes; refusing it")
    if not raw.startswith(b"# Memory archive"):
        raise InvalidInputError(f"{rel}: not a mateclaw month archive (no '# Memory archive' heading)")
    members: dict[str, bytes] = {}
    at = raw.find(b"\n<!-- file: ")
    while at != -1:
        m = _FILE_RE.match(raw, at + 1)
        if m is None:
            raise InvalidInputError(f"{rel}: damaged archive, unreadable file header at byte {at + 1}")
        name, size = m.group(1).decode("utf-8", "replace"), int(m.group(2))
        start = m.end()
        data = raw[start:start + size]
        end = f"\n<!-- end: {name} -->\n".encode()
        if len(data) != size or raw[start + size:start + size + len(end)] != end:
            raise InvalidInputError(f"{rel}: damaged archive, {name} is cut short")
        if sha256(data) != m.group(3).decode():
            raise InvalidInputError(f"{rel}: damaged archive, {name} does not match its hash")
        if not _MEMBER_RE.match(name) or ".." in name.split("/") or name in members:
            raise InvalidInputError(f"{rel}: archive names {name!r}, which is not a memory note it can hold")
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInputError(f"{rel}: damaged archive, {name} is not UTF-8 text") from None
        members[name] = data
        nxt = start + size + len(end)
        at = raw.find(b"\n<!-- file: ", nxt - 1) if nxt < len(raw) else -1
    return members


# -- reading -----------------------------------------------------------------------------------------


def read_rel(store: StorePort, agent: str, rel: str, *, owner: str | None = None) -> Month | None:
    """One archive, unpacked; None when there is none. InvalidInputError when it is damaged."""
    month = month_of(rel)
    if month is None:
        raise InvalidInputError(f"{rel} is not a month archive (memory/archive/YYYY-MM.md.gz)")
    blob = blobs.read(store, agent, rel, owner=owner)
    if not blob.exists:
        return None
    return Month(month, rel, blob.sha, len(blob.data), unpack(rel, blob.data))


def read_month(store: StorePort, agent: str, month: str, *, owner: str | None = None) -> Month | None:
    return read_rel(store, agent, archive_rel(month), owner=owner)


def months(store: StorePort, agent: str, *, owner: str | None = None) -> list[dict[str, Any]]:
    """Every archived month, oldest first, for the timeline: the notes' dates, the entries they
    hold, sizes. A damaged archive is listed with its `error` (and nothing else read from it)."""
    folder = store.agent_dir(agent, owner) / ARCHIVE_DIR
    out: list[dict[str, Any]] = []
    names = sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
    for name in names:
        rel = f"{ARCHIVE_DIR}/{name}"
        if not is_archive(rel):
            continue
        row: dict[str, Any] = {"month": month_of(rel), "file": rel, "size": 0, "bytes": 0, "notes": [],
                               "noteEntries": 0, "diaryEntries": 0, "files": [], "error": None}
        try:
            got = read_rel(store, agent, rel, owner=owner)
        except InvalidInputError as exc:
            row["error"] = str(exc)
            out.append(row)
            continue
        if got is None:
            continue
        row["size"], row["bytes"] = got.size, sum(len(d) for d in got.members.values())
        for member, text in got.texts():
            entries = sum(1 for line in text.splitlines() if line.startswith("## "))
            row["files"].append({"file": member, "bytes": len(got.members[member]), "entries": entries})
            daily = _DAILY_RE.match(member)
            if daily:
                row["notes"].append(daily.group(1))
                row["noteEntries"] += entries
            elif member.startswith("memory/dreams/"):
                row["diaryEntries"] += entries
        out.append(row)
    return out


# -- writing -----------------------------------------------------------------------------------------


def update_month(
    store: StorePort, agent: str, month: str, fn: Callable[[dict[str, bytes]], dict[str, bytes] | None], *,
    actor: str, owner: str | None = None, reason: str = "", batch: str | None = None,
) -> WriteResult | None:
    """Read-modify-write of one month's members (`fn` gets a copy; None = no change; an empty dict
    removes the archive). A damaged archive raises InvalidInputError and is never written over."""
    rel = archive_rel(month)
    for _ in range(blobs.REPLAN_LIMIT):
        current = read_month(store, agent, month, owner=owner)
        members = fn(dict(current.members) if current else {})
        if members is None:
            return None
        expected = current.sha if current else ""
        try:
            if not members:
                if current is None:
                    return None
                return blobs.delete(store, agent, rel, expected_sha=expected, actor=actor, owner=owner,
                                    reason=reason, batch=batch)
            return blobs.write(store, agent, rel, pack(month, members), expected_sha=expected, actor=actor,
                               owner=owner, reason=reason, batch=batch)
        except ConflictError:
            continue  # another writer got there first: plan again on what it wrote
    raise BusyError(f"{rel} kept changing while it was being written; try again")


@dataclass
class Restored:
    month: str
    archive: str
    restored: list[str] = field(default_factory=list)  # files written back
    already: list[str] = field(default_factory=list)  # files already on disk with the same bytes
    batch: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"month": self.month, "archive": self.archive, "restored": self.restored,
                "alreadyThere": self.already, "run": self.batch}


def restore_month(store: StorePort, agent: str, month: str, *, owner: str | None = None) -> Restored:
    """Put a month's files back byte for byte and remove its archive (one batch: undoable as a whole).
    Refused, with nothing written, when a file of the same name exists with other content."""
    rel = archive_rel(month)
    got = read_month(store, agent, month, owner=owner)
    if got is None:
        raise NotFoundError(f"no archive for {month} ({rel}); `mateclaw-mem archive {agent} list` shows the months")
    report = Restored(month, rel, batch=f"restore-{agent}-{month}-{store.clock.now():%Y%m%dT%H%M%S}")
    clashes = []
    for member, data in sorted(got.members.items()):
        snap = store.read(agent, member, owner=owner)
        if not snap.exists:
            report.restored.append(member)
        elif snap.sha == sha256(data):
            report.already.append(member)
        else:
            clashes.append(member)
    if clashes:
        raise ConflictError(
            f"restore of {month} refused, nothing written: {', '.join(clashes)} already exist(s) with other content "
            f"(a newer note of the same date?); rename or move {'them' if len(clashes) > 1 else 'it'} "
            "and restore again")
    steps = [Step(agent, owner, m, "", got.members[m], PERSON, f"restored from {rel}") for m in report.restored]
    steps.append(Step(agent, owner, rel, got.sha, None, PERSON, f"{month} restored"))
    # Journaled (workspace/journal.py): killed half-way, the next start puts the rest back.
    with store.journal.operation("month-restore", report.batch, steps):
        for member in report.restored:
            # The person's decision, like an undo: byte for byte, no machine rewriting of pins.
            store.write(agent, member, got.members[member].decode("utf-8"), expected_sha="", actor=PERSON,
                        owner=owner, reason=f"restored from {rel}", batch=report.batch)
        blobs.delete(store, agent, rel, expected_sha=got.sha, actor=PERSON, owner=owner,
                     reason=f"{month} restored", batch=report.batch)
    return report
