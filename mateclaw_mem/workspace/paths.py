"""Safe paths. Every refusal names the rule it broke."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from mateclaw_mem.errors import ConflictError, InvalidPathError

MAX_PATH_CHARS = 255
MAX_COMPONENT_CHARS = 120
_AGENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# GLOBAL memory's folder at the workspace root (workspace/walk.py): no agent may take its name, in any
# case (a case-insensitive file system would make `Global` the same folder).
GLOBAL_DIR = "global"


def check_agent(agent: str) -> str:
    if not isinstance(agent, str) or not _AGENT_RE.match(agent) or agent.endswith("."):
        raise InvalidPathError(
            f"invalid agent name {agent!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if agent.casefold() == GLOBAL_DIR:
        raise InvalidPathError(f"agent name {agent!r} is reserved: `{GLOBAL_DIR}/` holds the workspace's GLOBAL "
                               "memory, which every agent sees")
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
    # Before PurePosixPath, which folds `a//b.md` into `a/b.md` and drops a trailing '/': the path
    # stored in history and answers must be the file's one spelling, and `x.md/` names a folder.
    for part in rel.split("/"):
        if not part:
            where = "ends with '/', which names a folder" if rel.endswith("/") else "has an empty part ('//')"
            raise InvalidPathError(f"path {rel!r} {where}; name the file as folder/file.md")
        if not part.strip():
            raise InvalidPathError(f"path {rel!r} has a blank folder or file name; name it with letters")
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


def _real(path: Path) -> Path:
    """`path` with every link followed. A link swapped for a folder while it is being followed
    makes resolve() fail (readlink on what is no longer a link: EINVAL); that is a path changing
    under us, so look again, and after a few tries call it a conflict rather than a crash."""
    for _ in range(3):
        try:
            return path.resolve()
        except OSError as exc:
            error = exc
    raise ConflictError(f"a folder on the path {path.name!r} kept changing while it was checked "
                        f"({error.strerror}); try again") from None


def agent_folder(root: Path, key: str) -> Path:
    """`root/key` (an agent's or owner's folder), refused when, links followed, it is not that very
    folder of the workspace root (a link to another agent's folder included): an agent folder that is
    a symbolic link to elsewhere would otherwise take every read and write of that agent with it
    (checking paths against the agent folder alone cannot see that, the folder itself being the link)."""
    candidate = root.joinpath(*key.split("/"))
    real_root = _real_roots[root] = _real(root)
    real = _real(candidate)
    if real_root not in real.parents:
        raise InvalidPathError(
            f"agent folder {key!r} leads outside the workspace (through a symbolic link); refusing it")
    if real.relative_to(real_root).parts[0].startswith("."):
        raise InvalidPathError(
            f"agent folder {key!r} leads into the workspace's hidden state folder (through a symbolic link)")
    inside = real.relative_to(real_root).as_posix()
    if inside != key:
        # A link to another agent's (or owner's) folder would make two agents one: each one's writes,
        # history and index rows landing in the other's files. Refused like a linked memory file.
        raise InvalidPathError(
            f"agent folder {key!r} is a symbolic link to {inside!r} inside the workspace; refusing it "
            f"(make {key!r} a real folder)")
    return candidate


# The workspace root with its links followed, per root: every read resolves a file's path, and
# resolving the root and the agent folder again each time was most of reading the always-on files
# (8 of them per prompt). Only `agent_file`'s fast path trusts it; whatever it refuses goes through
# the full checks, which resolve everything afresh, so a stale entry can only cost a slow path.
_real_roots: dict[Path, Path] = {}


def agent_file(root: Path, key: str, rel: str) -> Path:
    """`resolve_inside(agent_folder(root, key), rel)` - the same answer and the same refusals - with
    one path resolved instead of four when the file is plainly inside the agent's own folder: its
    real path under the (cached) real root's `key` folder means neither the agent folder nor a link
    on the way leads elsewhere."""
    pure = check_relative(rel)
    parts = key.split("/")
    candidate = root.joinpath(*parts, *pure.parts)
    real_root = _real_roots.get(root)
    if real_root is not None and _real(candidate).is_relative_to(real_root.joinpath(*parts)):
        return candidate
    return resolve_inside(agent_folder(root, key), rel)


def escapes(root: Path, key: str) -> bool:
    """True when `agent_folder(root, key)` would refuse the folder."""
    try:
        agent_folder(root, key)
    except InvalidPathError:
        return True
    return False


def resolve_inside(base: Path, rel: str) -> Path:
    """Join and make sure the result (symlinks followed) is still inside `base`."""
    pure = check_relative(rel)
    candidate = base.joinpath(*pure.parts)
    real_base = _real(base)
    real = _real(candidate)
    if real != real_base and real_base not in real.parents:
        raise InvalidPathError(f"path {rel!r} leads outside the agent's workspace (through a symbolic link)")
    return candidate
