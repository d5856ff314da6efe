"""Reading an export: a file or an upload, bounded by MAX_IMPORT_BYTES, a zip or not; its format told.

    read_export(source, name=..., fmt=None, tz=...) -> Parsed   # every record checked; nothing written

The format is detected from the first record when it is not named: a `mapping` is ChatGPT's,
`chat_messages` Claude's, a `chat` with `history` or `messages` Open WebUI's, and `role` + `content`
lines (or an array of them) are JSONL. A zip (how ChatGPT and Claude deliver an export) is opened and
its `conversations.json` read; the limit applies to that member's uncompressed size as well.
"""

from __future__ import annotations

import json
import zipfile
from io import BytesIO
from pathlib import Path
from typing import IO, Any

from mateclaw_mem.conversations.imports import chatgpt, claude, jsonl, openwebui
from mateclaw_mem.conversations.imports.records import FORMATS, MAX_IMPORT_BYTES, MalformedExport, Parsed
from mateclaw_mem.errors import InvalidInputError, NotFoundError, TooLargeError

_LOOKS = (("chatgpt", chatgpt.looks_like), ("claude", claude.looks_like), ("openwebui", openwebui.looks_like),
          ("jsonl", jsonl.looks_like))
_ZIP_MEMBER = "conversations.json"


def read_export(source: Path | IO[bytes], *, name: str, fmt: str | None, tz: Any,
                max_bytes: int = MAX_IMPORT_BYTES) -> Parsed:
    """The export at `source` (a path, or a binary stream such as an upload), parsed and checked whole.
    `name` is what messages call it. Raises MalformedExport naming the record, TooLargeError past
    `max_bytes`, NotFoundError for a missing file."""
    if fmt is not None and fmt not in FORMATS:
        raise InvalidInputError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    raw = _read(source, name, max_bytes)
    if raw[:4] == b"PK\x03\x04":
        name, raw = _from_zip(raw, name, max_bytes)
    raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark, as some Windows tools write
    data, lines = _decode(raw, name, fmt)
    del raw
    kind = fmt or ("jsonl" if lines is not None else _detect(data, name))
    if fmt is not None and data is not None:
        _check_named(data, name, fmt)
    parsed = Parsed(file=name, format=kind)
    if kind == "jsonl":
        if lines is not None:
            jsonl.parse_lines(lines, parsed, tz)
        else:
            jsonl.parse_array(data, parsed, tz)
    elif kind == "chatgpt":
        chatgpt.parse(data, parsed)
    elif kind == "claude":
        claude.parse(data, parsed, tz)
    elif kind == "openwebui":
        openwebui.parse(data, parsed)
    return parsed.finish()


def _read(source: Path | IO[bytes], name: str, max_bytes: int) -> bytes:
    too_big = f"{name} is larger than {max_bytes} bytes (the chat import limit); split the export and import the parts"
    if isinstance(source, Path):
        if not source.is_file():
            raise NotFoundError(f"{source}: no such file")
        if source.stat().st_size > max_bytes:
            raise TooLargeError(too_big)
        return source.read_bytes()
    data = source.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TooLargeError(too_big)
    return data


def _from_zip(raw: bytes, name: str, max_bytes: int) -> tuple[str, bytes]:
    try:
        with zipfile.ZipFile(BytesIO(raw)) as zf:
            members = [i for i in zf.infolist() if i.filename.rsplit("/", 1)[-1] == _ZIP_MEMBER and not i.is_dir()]
            if not members:
                raise MalformedExport(f"{name}: a zip without a {_ZIP_MEMBER} (the file ChatGPT's and Claude's "
                                      "exports hold the chats in)")
            member = min(members, key=lambda i: i.filename.count("/"))
            if member.file_size > max_bytes:
                raise TooLargeError(f"{name}: {member.filename} is larger than {max_bytes} bytes unpacked (the chat "
                                    "import limit); split the export and import the parts")
            with zf.open(member) as f:
                data = f.read(max_bytes + 1)  # the header's size is a claim: count what comes out
            if len(data) > max_bytes:
                raise TooLargeError(f"{name}: {member.filename} unpacks to more than {max_bytes} bytes")
            return f"{name}/{member.filename}", data
    except zipfile.BadZipFile as exc:
        raise MalformedExport(f"{name}: not a readable zip ({exc})") from None


def _decode(raw: bytes, name: str, fmt: str | None) -> tuple[Any, list[bytes] | None]:
    """(the JSON document, None) or (None, its lines) for JSON lines."""
    head = raw.lstrip()[:1]
    if not head:
        raise MalformedExport(f"{name}: the file is empty")
    if head == b"{" and fmt == "jsonl":
        return None, raw.splitlines()
    if head == b"{" and fmt is None:
        first = raw.lstrip().split(b"\n", 1)
        if len(first) > 1 and first[1].strip():  # more than one line: JSON lines (a pretty-printed object fails here)
            try:
                json.loads(first[0])
                return None, raw.splitlines()
            except ValueError:
                pass
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        raise MalformedExport(f"{name}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise MalformedExport(f"{name}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    if isinstance(data, dict):
        if any(looks(data) for kind, looks in _LOOKS if kind != "jsonl"):
            data = [data]  # one conversation exported on its own
        elif isinstance(data.get("conversations"), list):
            data = data["conversations"]  # an export wrapped in an object
        elif jsonl.looks_like(data):
            return None, [raw]  # JSON lines of a single line
    return data, None


def _detect(data: Any, name: str) -> str:
    if not isinstance(data, list):
        raise MalformedExport(f"{name}: neither a JSON array of conversations nor JSON lines of messages")
    if not data:
        return "empty"
    first = data[0]
    for kind, looks in _LOOKS:
        if looks(first):
            return kind
    keys = ", ".join(sorted(first)[:8]) if isinstance(first, dict) else type(first).__name__
    raise MalformedExport(f"{name}: cannot tell which export this is (its first record has {keys}); name the format "
                          f"with --format {'|'.join(FORMATS)}")


def _check_named(data: Any, name: str, fmt: str) -> None:
    """A named format that the first record plainly is not: say which one it looks like."""
    if not isinstance(data, list) or not data:
        return
    looks = dict(_LOOKS)
    if looks[fmt](data[0]):
        return
    other = next((kind for kind, test in _LOOKS if test(data[0])), None)
    if other is not None:
        raise MalformedExport(f"{name}: looks like a {other} export, not {fmt} (--format {other}, or leave it out)")
