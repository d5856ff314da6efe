"""YAML frontmatter that round-trips: the body's bytes and unknown keys are never reformatted.

Reading: we find the block ourselves (byte-exact, CRLF, a `...` closer) and hand its inside to
python-frontmatter's YAML handler for the values. Not `frontmatter.loads` whole: it strips the text
(the body's bytes would change) and turns a block that is not a mapping into `{}` without a word,
where we must tell the person what is wrong with their file.

Writing: line by line, never through the library's dump, because re-dumping YAML would reorder keys,
drop comments and change quoting in files people wrote by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import frontmatter as library
import yaml

# Safe loading only; the handler picks libyaml's loader when it is there (~8x the pure-Python one).
_YAML = library.YAMLHandler()
_OPEN = re.compile(r"\A---[ \t]*\r?\n")
MAX_BLOCK_CHARS = 65_536  # a longer front matter is not parsed (its values would go into every listing)
_CLOSE = re.compile(r"^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.MULTILINE)


@dataclass(frozen=True)
class Parsed:
    block: str  # the frontmatter block with its delimiters and trailing newline, "" if none
    body: str
    meta: dict[str, Any]
    error: str | None = None  # set when the block exists but is not a YAML mapping


def split(text: str) -> tuple[str, str]:
    """Return (frontmatter block incl. delimiters, body). Block is "" when there is none."""
    m = _OPEN.match(text)
    if not m:
        return "", text
    close = _CLOSE.search(text, m.end())
    if not close:
        return "", text
    return text[: close.end()], text[close.end() :]


def parse(text: str) -> Parsed:
    block, body = split(text)
    if not block:
        return Parsed("", body, {})
    inner = block[_OPEN.match(block).end() : _CLOSE.search(block, 4).start()]  # type: ignore[union-attr]
    if refused := _refused(inner):
        return Parsed(block, body, {}, refused)
    try:
        meta = _YAML.load(inner) if inner.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        return Parsed(block, body, {}, f"frontmatter is not valid YAML{where}")
    except (ValueError, RecursionError) as exc:
        # The loader builds dates and numbers itself: `updated: 2026-02-30` parses as YAML and then
        # fails as a date. Still the person's file, so still a message, never a crash on the prompt path.
        return Parsed(block, body, {}, f"frontmatter has a value that cannot be read: {exc}")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        return Parsed(block, body, {}, "frontmatter is not a mapping of keys")
    return Parsed(block, body, meta)


def _refused(inner: str) -> str | None:
    """Front matter we do not hand to the YAML loader: a block past MAX_BLOCK_CHARS, or one with
    aliases (`*name`): nine lines of them expand to 10^9 values ("billion laughs"), which every
    later reader of the values (a JSON answer, a listing) would walk."""
    if len(inner) > MAX_BLOCK_CHARS:
        return f"frontmatter is {len(inner):,} characters, over {MAX_BLOCK_CHARS:,}; it is not read"
    if "*" not in inner:
        return None
    try:
        for event in yaml.parse(inner, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if isinstance(event, yaml.AliasEvent):
                return f"frontmatter uses a YAML alias (*{event.anchor}); aliases are not read"
    except yaml.YAMLError:
        return None  # the loader reports it, with its line
    return None


def body(text: str) -> str:
    return split(text)[1]


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return yaml.safe_dump(value, default_flow_style=True, allow_unicode=True).strip().removesuffix("...").strip()


def set_keys(text: str, updates: dict[str, Any]) -> str:
    """Set top-level scalar keys, editing only their lines; add a block if the file has none."""
    block, rest = split(text)
    newline = "\r\n" if block.endswith("\r\n") or (not block and "\r\n" in text) else "\n"
    if not block:
        lines = [f"{k}: {_yaml_scalar(v)}" for k, v in updates.items()]
        return "---" + newline + newline.join(lines) + newline + "---" + newline + rest
    head_end = _OPEN.match(block).end()  # type: ignore[union-attr]
    close = _CLOSE.search(block, head_end)
    assert close is not None
    inner = block[head_end : close.start()]
    lines = inner.splitlines(keepends=True)
    for key, value in updates.items():
        rendered = f"{key}: {_yaml_scalar(value)}"
        pattern = re.compile(rf"^{re.escape(key)}[ \t]*:")
        for i, line in enumerate(lines):
            if pattern.match(line):
                ending = line[len(line.rstrip("\r\n")) :]
                lines[i] = rendered + (ending or newline)
                break
        else:
            if lines and not lines[-1].endswith(("\n", "\r")):
                lines[-1] += newline
            lines.append(rendered + newline)
    return block[:head_end] + "".join(lines) + block[close.start() :] + rest


def with_body(text: str, new_body: str) -> str:
    """Replace the body, keeping the frontmatter block byte for byte."""
    return split(text)[0] + new_body
