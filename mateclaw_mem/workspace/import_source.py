"""Reading an import source — a zip, an export folder, any folder of .md files — without trusting it.

Refused as a whole, because they only come from a broken or hostile archive: entries that climb out
(`..`) or are absolute, symbolic links, the same name twice, more entries or more bytes than the
limits (measured while reading, never taken from a header). In seed mode (snapshot_rules.Policy)
also a file over the per-file limit, one that is not UTF-8 text and a daily note with an impossible
date. Skipped one by one, each with its reason, because a real folder is full of them: hidden files
and folders (`.obsidian/`, `.git/`, editor swap files), non-Markdown files, files outside the seed's
whitelist, encrypted zip entries (and, in a vault import, oversized or non-UTF-8 files).

Nothing is kept in memory: the first pass measures and hashes every entry with a bounded read; the
importer reads an entry again (`Source.load`, checked against that hash) only when it writes it.
Nothing here writes anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mateclaw_mem.errors import InvalidInputError, NotFoundError, TooLargeError
from mateclaw_mem.workspace.snapshot_rules import Limits, Policy

MANIFEST = "manifest.json"
STATE_PREFIX = ".mateclaw/"
_DRIVE = re.compile(r"^[A-Za-z]:")
_SEPARATORS = re.compile(r"[\\/]")
# Folders of an agent's own layout: a zip holding only `memory/…` is daily notes, not a wrapper folder.
AGENT_FOLDERS = frozenset({"memory", "structured", "owners", "archive"})

__all__ = ["MANIFEST", "Limits", "Source", "SourceFile", "read_source"]


@dataclass(frozen=True)
class SourceFile:
    path: str  # '/'-separated, relative to the source root
    size: int = 0
    sha: str = ""
    skipped: str = ""  # why it is not imported ("" = importable as far as the container goes)
    origin: str = field(default="", repr=False)  # the zip entry name or the file path to read again


@dataclass
class Source:
    name: str
    files: list[SourceFile] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    manifest_error: str = ""
    limits: Limits = field(default_factory=Limits)
    zf: zipfile.ZipFile | None = field(default=None, repr=False)

    def load(self, f: SourceFile) -> bytes:
        """The entry's bytes, read again within the limit and checked against the first read."""
        data = _read_zip_entry(self.zf, f.origin, self.limits) if self.zf else _read_file(Path(f.origin), self.limits)
        if data is None or hashlib.sha256(data).hexdigest() != f.sha:
            raise InvalidInputError(f"{self.name}: {f.path} changed or became unreadable during the import")
        return data

    def close(self) -> None:
        if self.zf is not None:
            self.zf.close()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def read_source(path: Path, limits: Limits | None = None, policy: Policy | None = None) -> Source:
    policy = policy or Policy(vault=True)
    limits = limits or policy.bounds
    if not path.exists():
        raise NotFoundError(f"{path} does not exist")
    if path.is_dir():
        return _read_folder(path, limits, policy)
    if zipfile.is_zipfile(path):
        return _read_zip(path, limits, policy)
    if path.suffix.lower() == ".md":
        source = Source(path.name, limits=limits)  # one loose note: imported under its own name
        _measure(source, path.name, str(path), lambda: _read_file(path, limits), policy, path.stat().st_size)
        return source
    raise InvalidInputError(f"{path} is neither a zip archive, a folder nor a .md file")


def _hostile(name: str) -> str:
    """Why an entry name escapes the import root, or "" if it does not."""
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        return "is an absolute path"
    if ".." in _SEPARATORS.split(name):
        return "climbs out of the archive with '..'"
    if "\x00" in name:
        return "contains a NUL character"
    return ""


def _too_big(size: int, limits: Limits) -> str:
    return f"{size} bytes; the limit per file is {limits.max_file_bytes}"


def _classify(rel: str, policy: Policy) -> str:
    """Skip reason from the name alone ("" = a Markdown file worth reading)."""
    parts = rel.split("/")
    if rel.startswith(STATE_PREFIX):
        return "mateclaw state (history), kept in the archive for reference, not imported"
    if any(p.startswith(".") for p in parts) or parts[0] == "__MACOSX":
        return "hidden file or folder"
    if not rel.lower().endswith(".md") and rel not in policy.data_files:
        return "not a Markdown (.md) file"
    return policy.skip_reason(rel)


def _measure(source: Source, rel: str, origin: str, read: Any, policy: Policy, declared: int) -> int:
    """Read one entry (bounded), check it, record its size and hash; returns the bytes it held."""
    why = _classify(rel, policy)
    limits = source.limits
    if not why and declared > limits.max_file_bytes:
        if policy.strict:
            raise TooLargeError(f"{source.name}: {rel} is {_too_big(declared, limits)}; refusing the archive")
        why = _too_big(declared, limits)
    if why:
        source.files.append(SourceFile(rel, skipped=why))
        return 0
    data = read()
    problem = ""
    if data is None:
        problem = "unreadable (larger than declared, over the limit, or corrupt)"
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            problem = f"not UTF-8 text (byte {exc.start}); save it as UTF-8"
        else:
            if "\x00" in text:
                problem = "contains NUL characters"
    if problem:
        if policy.strict:
            raise InvalidInputError(f"{source.name}: {rel} is {problem}; refusing the whole archive")
        source.files.append(SourceFile(rel, skipped=problem))
        return 0
    assert data is not None
    source.files.append(SourceFile(rel, len(data), hashlib.sha256(data).hexdigest(), origin=origin))
    return len(data)


def _check_total(source: Source, total: int) -> None:
    if total > source.limits.max_total_bytes:
        raise TooLargeError(
            f"{source.name} unpacks to more than {source.limits.max_total_bytes} bytes; refusing the archive")


def _read_zip(path: Path, limits: Limits, policy: Policy) -> Source:
    source = Source(path.name, limits=limits)
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InvalidInputError(f"{path.name} is not a readable zip archive ({exc})") from None
    source.zf = zf
    try:
        infos = zf.infolist()
        if len(infos) > limits.max_entries:
            raise TooLargeError(
                f"{path.name} has {len(infos)} entries; the limit is {limits.max_entries}; refusing the archive")
        seen: set[str] = set()
        entries = []
        for info in infos:
            name = info.filename
            why = _hostile(name)
            if why:
                raise InvalidInputError(f"{path.name}: entry {name!r} {why}; refusing the whole archive")
            if stat.S_ISLNK(info.external_attr >> 16):
                raise InvalidInputError(
                    f"{path.name}: entry {name!r} is a symbolic link; refusing the whole archive")
            if info.is_dir():
                continue
            if name in seen:
                raise InvalidInputError(f"{path.name}: entry {name!r} appears twice; refusing the whole archive")
            seen.add(name)
            entries.append(info)
        prefix = _common_folder([i.filename for i in entries])
        total = 0
        for info in entries:
            rel = info.filename[len(prefix):]
            if rel == MANIFEST:
                _load_manifest(source, lambda i=info: _read_zip_entry(zf, i.filename, limits))
                continue
            if info.flag_bits & 0x1 and not _classify(rel, policy):
                source.files.append(SourceFile(rel, skipped="encrypted zip entry"))
                continue
            total += _measure(source, rel, info.filename, lambda i=info: _read_zip_entry(zf, i.filename, limits),
                              policy, info.file_size)
            _check_total(source, total)
    except BaseException:
        zf.close()
        raise
    source.files = _group_hidden(source.files)
    return source


def _read_zip_entry(zf: zipfile.ZipFile | None, name: str, limits: Limits) -> bytes | None:
    """Read at most the limit: a header that lies about the size must not fill memory."""
    assert zf is not None
    try:
        with zf.open(name) as fh:
            data = fh.read(limits.max_file_bytes + 1)
    except (zipfile.BadZipFile, OSError, RuntimeError, EOFError, ValueError, NotImplementedError):
        return None
    return None if len(data) > limits.max_file_bytes else data


def _common_folder(names: list[str]) -> str:
    """A zip made by zipping a folder holds `Vault/...` for every entry: import the folder's content.
    An agent's own folder (`memory/…` only) is kept: those are daily notes, not a wrapper."""
    visible = [n for n in names if not n.startswith((".", "__MACOSX/"))]
    if not visible:
        return ""
    firsts = {n.split("/", 1)[0] for n in visible}
    if len(firsts) != 1 or any("/" not in n for n in visible) or next(iter(firsts)) in AGENT_FOLDERS:
        return ""
    return next(iter(firsts)) + "/"


def _read_folder(root: Path, limits: Limits, policy: Policy) -> Source:
    source = Source(root.name or str(root), limits=limits)
    total = 0
    count = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
        keep = []
        for d in sorted(dirnames):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            if os.path.islink(os.path.join(dirpath, d)):
                raise InvalidInputError(f"{rel} is a symbolic link; symbolic links are not followed on import")
            if d.startswith("."):
                source.files.append(SourceFile(rel + "/", skipped=_classify(rel + "/", policy)))
            else:
                keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                raise InvalidInputError(f"{rel} is a symbolic link; symbolic links are not followed on import")
            count += 1
            if count > limits.max_entries:
                raise TooLargeError(
                    f"{root} holds more than {limits.max_entries} files; the limit is {limits.max_entries}")
            if rel == MANIFEST:
                _load_manifest(source, lambda f=full: _read_file(Path(f), limits))
                continue
            total += _measure(source, rel, full, lambda f=full: _read_file(Path(f), limits), policy,
                              os.stat(full).st_size)
            _check_total(source, total)
    return source


def _read_file(path: Path, limits: Limits) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read(limits.max_file_bytes + 1)
    except OSError:
        return None
    return None if len(data) > limits.max_file_bytes else data


# Our manifest nests three levels; json.loads recurses once per level and a few thousand of them
# (a hostile or broken file) raised RecursionError out of the import.
MAX_MANIFEST_DEPTH = 32


def _json_depth(data: bytes) -> int:
    """The deepest nesting of [ and { in JSON text, brackets inside strings not counted."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


def _load_manifest(source: Source, read: Any) -> None:
    data = read()
    if data is not None and (depth := _json_depth(data)) > MAX_MANIFEST_DEPTH:
        raise InvalidInputError(
            f"{source.name}: {MANIFEST} nests {depth} levels deep (an export manifest has 3; the limit is "
            f"{MAX_MANIFEST_DEPTH}); refusing the import")
    try:
        manifest = json.loads(data.decode("utf-8")) if data is not None else None
    except (UnicodeDecodeError, ValueError):
        manifest = None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files", []), list):
        source.manifest_error = f"{MANIFEST} is not a readable export manifest; imported without its checks"
        return
    source.manifest = manifest


def _group_hidden(files: list[SourceFile]) -> list[SourceFile]:
    """One line for a whole hidden folder (`.git/` holds thousands of files), not one per file."""
    out: list[SourceFile] = []
    seen: set[str] = set()
    for f in files:
        parts = f.path.split("/")
        hidden_at = next((i for i, p in enumerate(parts[:-1]) if p.startswith(".") or p == "__MACOSX"), None)
        if f.skipped and hidden_at is not None:
            folder = "/".join(parts[: hidden_at + 1]) + "/"
            if folder not in seen:
                seen.add(folder)
                out.append(SourceFile(folder, skipped=f.skipped))
            continue
        out.append(f)
    return out
