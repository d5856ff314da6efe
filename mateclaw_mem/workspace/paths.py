"""Safe paths. Every refusal names the rule it broke."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from mateclaw_mem.errors import InvalidPathError

MAX_PATH_CHARS = 255
MAX_COMPONENT_CHARS = 120
_AGENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_agent(agent: str) -> str:
    if not isinstance(agent, str) or not _AGENT_RE.match(agent) or agent.endswith("."):
        raise InvalidPathError(
            f"invalid agent name {agent!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return agent


def owner_dirname(owner: str) -> str:
    """Any owner key (an AML user_id, an email) as one safe, reversible directory name."""
    if not owner:
        raise InvalidPathError("owner key must not be empty")
    if len(owner) > 200:
        raise InvalidPathError("owner key is longer than 200 characters")
    encoded = quote(owner, safe="")
    # Percent-encoding keeps '.', so '.' and '..' would still be special names.
    if encoded.startswith("."):
        encoded = "%2E" + encoded[1:]
    return encoded


def check_relative(rel: str) -> PurePosixPath:
    """Validate a memory file path relative to an agent directory."""
    if not isinstance(rel, str) or not rel.strip():
        raise InvalidPathError("path is empty")
    if len(rel) > MAX_PATH_CHARS:
        raise InvalidPathError(f"path is {len(rel)} characters long; the limit is {MAX_PATH_CHARS}")
    if _CONTROL.search(rel):
        raise InvalidPathError("path contains NUL or control characters")
    if _PERCENT.search(rel):
        raise InvalidPathError(f"path {rel!r} contains percent-encoded characters; write the name plainly")
    if "\\" in rel:
        raise InvalidPathError(f"path {rel!r} contains a backslash; use '/' between folders")
    if rel.startswith("/") or re.match(r"^[A-Za-z]:", rel) or rel.startswith("~"):
        raise InvalidPathError(f"path {rel!r} is absolute; give a path inside the agent's workspace")
    pure = PurePosixPath(rel)
    for part in pure.parts:
        if part == "..":
            raise InvalidPathError(f"path {rel!r} contains '..'; paths must stay inside the agent's workspace")
        if part.startswith("."):
            raise InvalidPathError(f"path {rel!r} names a hidden file or folder ({part!r}); those are not memory files")
        if len(part) > MAX_COMPONENT_CHARS:
            raise InvalidPathError(f"path component {part[:20]!r}... is longer than {MAX_COMPONENT_CHARS} characters")
    if pure.suffix.lower() != ".md":
        raise InvalidPathError(f"path {rel!r} is not a Markdown file; only .md files are memory files")
    return pure


def resolve_inside(base: Path, rel: str) -> Path:
    """Join and make sure the result (symlinks followed) is still inside `base`."""
    pure = check_relative(rel)
    candidate = base.joinpath(*pure.parts)
    real_base = base.resolve()
    real = candidate.resolve()
    if real != real_base and real_base not in real.parents:
        raise InvalidPathError(f"path {rel!r} leads outside the agent's workspace (through a symbolic link)")
    return candidate
