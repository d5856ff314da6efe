"""Reading an import source — a zip, an export folder, any folder of .md files — without trusting it.

Refused as a whole, because they only come from a broken or hostile archive: entries that climb out
(`..`) or are absolute, symbolic links, the same name twice, more entries or more bytes than the
limits. Skipped one by one, each with its reason, because a real folder is full of them: hidden files
and folders (`.obsidian/`, `.git/`, editor swap files), non-Markdown files, files over the size limit,
encrypted zip entries. Nothing here writes anything; content checks (UTF-8, path rules, manifest
hashes) belong to the importer.
"""

from __future__ import annotations

import json
import os
import re
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mateclaw_mem.errors import InvalidInputError, NotFoundError

MANIFEST = "manifest.json"
STATE_PREFIX = ".mateclaw/"
_DRIVE = re.compile(r"^[A-Za-z]:")
_SEPARATORS = re.compile(r"[\\/]")


@dataclass(frozen=True)
class Limits:
    max_file_bytes: int = 5 * 1024 * 1024  # far above any memory file; a bigger .md is not a note
    max_total_bytes: int = 200 * 1024 * 1024  # everything is held in memory while the plan is made
    max_entries: int = 20_000


@dataclass(frozen=True)
class SourceFile:
    path: str  # '/'-separated, relative to the source root
    data: bytes | None = None  # None when skipped
    skipped: str = ""  # why it is not imported ("" = importable as far as the container goes)


@dataclass
class Source:
    name: str
    files: list[SourceFile] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    manifest_error: str = ""


def read_source(path: Path, limits: Limits | None = None) -> Source:
    limits = limits or Limits()
    if not path.exists():
        raise NotFoundError(f"{path} does not exist")
    if path.is_dir():
        return _read_folder(path, limits)
    if zipfile.is_zipfile(path):
        return _read_zip(path, limits)
    if path.suffix.lower() == ".md":
        # One loose note: imported under its own name.
        size = path.stat().st_size
        source = Source(path.name)
        if size > limits.max_file_bytes:
            source.files.append(SourceFile(path.name, None, _too_big(size, limits)))
        else:
            source.files.append(SourceFile(path.name, path.read_bytes()))
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


def _classify(rel: str) -> str:
    """Skip reason from the name alone ("" = a Markdown file worth reading)."""
    parts = rel.split("/")
    if rel.startswith(STATE_PREFIX):
        return "mateclaw state (history), kept in the archive for reference, not imported"
    if any(p.startswith(".") for p in parts) or parts[0] == "__MACOSX":
        return "hidden file or folder"
    if not rel.lower().endswith(".md"):
        return "not a Markdown (.md) file"
    return ""


def _read_zip(path: Path, limits: Limits) -> Source:
    source = Source(path.name)
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InvalidInputError(f"{path.name} is not a readable zip archive ({exc})") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > limits.max_entries:
            raise InvalidInputError(
                f"{path.name} has {len(infos)} entries; the limit is {limits.max_entries}; refusing the archive")
        seen: set[str] = set()
        total = 0
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
            total += info.file_size
            if total > limits.max_total_bytes:
                raise InvalidInputError(
                    f"{path.name} unpacks to more than {limits.max_total_bytes} bytes; refusing the archive")
            entries.append(info)
        prefix = _common_folder([i.filename for i in entries])
        for info in entries:
            rel = info.filename[len(prefix):]
            if rel == MANIFEST:
                _load_manifest(source, lambda i=info: _read_entry(zf, i, limits))
                continue
            why = _classify(rel)
            if not why and info.flag_bits & 0x1:
                why = "encrypted zip entry"
            if not why and info.file_size > limits.max_file_bytes:
                why = _too_big(info.file_size, limits)
            if why:
                source.files.append(SourceFile(rel, None, why))
                continue
            data = _read_entry(zf, info, limits)
            if data is None:
                source.files.append(SourceFile(rel, None, "unreadable zip entry (larger than declared or corrupt)"))
            else:
                source.files.append(SourceFile(rel, data))
    source.files = _group_hidden(source.files)
    return source


def _read_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limits: Limits) -> bytes | None:
    """Read at most the limit: a header that lies about the size must not fill memory."""
    try:
        with zf.open(info) as fh:
            data = fh.read(limits.max_file_bytes + 1)
    except (zipfile.BadZipFile, OSError, RuntimeError, EOFError, ValueError):
        return None
    return None if len(data) > limits.max_file_bytes else data


def _common_folder(names: list[str]) -> str:
    """A zip made by zipping a folder holds `Vault/...` for every entry: import the folder's content."""
    visible = [n for n in names if not n.startswith((".", "__MACOSX/"))]
    if not visible:
        return ""
    firsts = {n.split("/", 1)[0] for n in visible}
    if len(firsts) != 1 or any("/" not in n for n in visible):
        return ""
    return next(iter(firsts)) + "/"


def _read_folder(root: Path, limits: Limits) -> Source:
    source = Source(root.name or str(root))
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
                why = _classify(rel + "/")
                source.files.append(SourceFile(rel + "/", None, why))
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
                raise InvalidInputError(
                    f"{root} holds more than {limits.max_entries} files; the limit is {limits.max_entries}")
            if rel == MANIFEST:
                _load_manifest(source, lambda f=full: _read_file(Path(f), limits))
                continue
            why = _classify(rel)
            size = os.stat(full).st_size
            if not why and size > limits.max_file_bytes:
                why = _too_big(size, limits)
            if why:
                source.files.append(SourceFile(rel, None, why))
                continue
            total += size
            if total > limits.max_total_bytes:
                raise InvalidInputError(f"{root} holds more than {limits.max_total_bytes} bytes of Markdown")
            data = _read_file(Path(full), limits)
            source.files.append(SourceFile(rel, data) if data is not None else SourceFile(rel, None, "unreadable"))
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
        if f.data is None and hidden_at is not None:
            folder = "/".join(parts[: hidden_at + 1]) + "/"
            if folder not in seen:
                seen.add(folder)
                out.append(SourceFile(folder, None, f.skipped))
            continue
        out.append(f)
    return out
