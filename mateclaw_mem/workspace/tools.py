"""Workspace tools (the seed's list/read/write/edit/enable tools, plus `write_memory` merges).

One implementation for every face: CLI, HTTP, MCP and the agent's own tool calls all come here.
Files a tool creates start `enabled: false` so nothing new is injected into prompts by surprise,
except the always-on files (AGENTS.md, SOUL.md, PROFILE.md, MEMORY.md): they exist to be in the
prompt, and one first made by a write (an owner's PROFILE.md under owner isolation, which seeding
does not make) would otherwise never reach it.

The answers' shape is shared too (`listing`, `file_read`, `write_answer`): the seed's field names
(`agentId`, `count`, `filename`, `fileSize`, `enabled`, `replacements`) plus ours (`sha`, `chars`,
`ceiling`, ...). The older `path` / `size` stay beside `filename` / `fileSize` so existing clients
keep working.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mateclaw_mem.errors import InvalidInputError, NotFoundError
from mateclaw_mem.markdown import frontmatter, merge
from mateclaw_mem.workspace import oversized
from mateclaw_mem.workspace.listing import ALWAYS_ON, DEFAULT_SORT_ORDER, FileInfo
from mateclaw_mem.workspace.store import Snapshot, WorkspaceStore, WriteResult


@dataclass(frozen=True)
class EditResult:
    write: WriteResult
    replacements: int


class WorkspaceTools:
    def __init__(self, store: WorkspaceStore) -> None:
        self.store = store

    def list(self, agent: str, *, prefix: str = "", owner: str | None = None) -> list[FileInfo]:
        return self.store.list_files(agent, owner=owner, prefix=prefix)

    def read(self, agent: str, rel: str, *, owner: str | None = None) -> Snapshot:
        snap = self.store.read(agent, rel, owner=owner)
        if not snap.exists:
            raise NotFoundError(f"{rel} does not exist in agent {agent!r}")
        return snap

    def describe(self, agent: str, rel: str, *, owner: str | None = None) -> FileInfo | None:
        """One file as `list` shows it (enabled, sort_order, size): the listing's own rules and cache."""
        return next((f for f in self.store.list_files(agent, owner=owner, prefix=rel) if f.rel == rel), None)

    def write(
        self,
        agent: str,
        rel: str,
        content: str,
        *,
        actor: str,
        owner: str | None = None,
        expected_sha: str | None = None,
    ) -> WriteResult:
        """Full replace. Content without frontmatter keeps the file's existing frontmatter; a new file
        gets `enabled: false` (an always-on file `enabled: true`, as seeded). Without `expected_sha`
        the write still cannot lose a concurrent edit: it is applied against exactly the version read under the lock."""

        def replace(current: str) -> str:
            new_block, _ = frontmatter.split(content)
            if new_block:
                return content
            old_block, _ = frontmatter.split(current)
            if old_block:
                return old_block + content
            if not current:
                return frontmatter.set_keys(content, _new_file_meta(rel))
            return content

        if expected_sha is not None:
            snap = self.store.read(agent, rel, owner=owner)
            return self.store.write(
                agent, rel, replace(snap.text), expected_sha=expected_sha, actor=actor, owner=owner, reason="write"
            )
        result = self.store.update(agent, rel, replace, actor=actor, owner=owner, reason="write")
        assert result is not None
        return result

    def edit(
        self,
        agent: str,
        rel: str,
        old: str,
        new: str,
        *,
        actor: str,
        owner: str | None = None,
        replace_all: bool = False,
        all_flag: str = "replace_all",
    ) -> EditResult:
        """Find and replace in the body. The frontmatter is never searched or changed here (a replace
        of "true" must not flip `enabled`); it changes through enable/disable/sort only. `all_flag`
        is the face's own name for "replace every occurrence", used in the error message."""
        if not old:
            raise InvalidInputError("the text to find is empty")
        count = 0

        def apply(current: str) -> str:
            nonlocal count
            if not current and not self.store.read(agent, rel, owner=owner).exists:
                raise NotFoundError(f"{rel} does not exist in agent {agent!r}")
            block, body = frontmatter.split(current)
            count = body.count(old)
            if count == 0:
                hidden = " (it is only in the frontmatter, which edits do not touch)" if old in block else ""
                raise InvalidInputError(f"{rel}: the text to replace was not found{hidden}")
            if count > 1 and not replace_all:
                raise InvalidInputError(
                    f"{rel}: the text to replace occurs {count} times; make it unique or use {all_flag}"
                )
            return block + (body.replace(old, new) if replace_all else body.replace(old, new, 1))

        result = self.store.update(agent, rel, apply, actor=actor, owner=owner, reason="edit")
        assert result is not None
        return EditResult(result, count if replace_all else 1)

    def set_enabled(self, agent: str, rel: str, enabled: bool, *, actor: str, owner: str | None = None) -> WriteResult:
        return self._set_meta(agent, rel, {"enabled": enabled}, actor=actor, owner=owner)

    def set_sort_order(
        self, agent: str, rel: str, sort_order: int, *, actor: str, owner: str | None = None
    ) -> WriteResult:
        return self._set_meta(agent, rel, {"sort_order": int(sort_order)}, actor=actor, owner=owner)

    def _set_meta(self, agent: str, rel: str, updates: dict, *, actor: str, owner: str | None) -> WriteResult:
        def apply(current: str) -> str:
            if not current and not self.store.read(agent, rel, owner=owner).exists:
                raise NotFoundError(f"{rel} does not exist in agent {agent!r}")
            parsed = frontmatter.parse(current)
            if parsed.error:
                raise InvalidInputError(f"{rel}: {parsed.error}; fix it by hand first")
            return frontmatter.set_keys(current, updates)

        result = self.store.update(agent, rel, apply, actor=actor, owner=owner, reason=f"set {', '.join(updates)}")
        assert result is not None
        return result

    def write_memory(
        self,
        agent: str,
        rel: str,
        content: str,
        *,
        strategy: str,
        actor: str,
        section: str | None = None,
        key: str | None = None,
        owner: str | None = None,
    ) -> WriteResult:
        """Programmatic write with a merge strategy: append, replace_section, upsert_kv, overwrite.

        `key` (upsert_kv only) sets one `key: content` line, so a caller need not format it."""
        if strategy not in merge.STRATEGIES:
            raise InvalidInputError(f"unknown merge strategy {strategy!r}; use one of {', '.join(merge.STRATEGIES)}")
        if section is not None and not section.strip():
            raise InvalidInputError("section must be a non-empty title (or left out)")
        if section is not None and strategy == "overwrite":
            raise InvalidInputError("overwrite replaces the whole file; a section does not apply (use replace_section)")
        if key is not None:
            content = _kv_line(strategy, key, content)

        def apply(current: str) -> str:
            block, body = frontmatter.split(current)
            if not current:
                new = _new_file_meta(rel)
                block = frontmatter.set_keys("", new) if rel in ALWAYS_ON else "---\nenabled: false\n---\n"
            return block + merge.apply(strategy, body, content, section)

        result = self.store.update(agent, rel, apply, actor=actor, owner=owner, reason=f"write_memory {strategy}")
        assert result is not None
        return result


def _new_file_meta(rel: str) -> dict[str, Any]:
    if rel in ALWAYS_ON:
        return {"enabled": True, "sort_order": ALWAYS_ON.index(rel)}
    return {"enabled": False, "sort_order": DEFAULT_SORT_ORDER}


def _kv_line(strategy: str, key: str, value: str) -> str:
    if strategy != "upsert_kv":
        raise InvalidInputError(f"a key applies to upsert_kv only, not to {strategy}")
    key = key.strip()
    if not key or key.startswith("#") or any(c in key for c in ":：\n"):
        raise InvalidInputError(f"key {key!r} must be non-empty, on one line, without ':' and not start with '#'")
    if "\n" in value.strip():
        raise InvalidInputError(f"the value for key {key!r} must be one line")
    return f"{key}: {value.strip()}"


# -- the answers every face gives (HTTP, MCP): the seed's names first --------------------------------------


def file_entry(f: FileInfo) -> dict[str, Any]:
    return {
        "filename": f.rel, "fileSize": f.size, "enabled": f.enabled, "sort_order": f.sort_order,
        "chars": f.chars, "ceiling": f.ceiling, "over_budget": f.over_budget, "frontmatter_error": f.meta_error,
        "path": f.rel, "size": f.size,
    }


def listing(agent: str, files: list[FileInfo]) -> dict[str, Any]:
    return {"agentId": agent, "count": len(files), "files": [file_entry(f) for f in files]}


def file_read(agent: str, snap: Snapshot, info: FileInfo | None, *, max_bytes: int = 0,
              part: int = 1) -> dict[str, Any]:
    """A file as the faces answer it. With `max_bytes` (the oversized-file limit; 0 = whole), a file
    over it comes a part at a time, with `part`, `parts`, `first_line` and a warning saying how to go on
    (its `sha` is still the whole file's: a machine write into it is refused anyway)."""
    size = info.size if info is not None else len(snap.text.encode("utf-8"))
    out: dict[str, Any] = {
        "agentId": agent, "filename": snap.rel, "content": snap.text,
        # A file the listing skips (it cannot be listed, so it is never injected) reads as disabled.
        "enabled": info.enabled if info is not None else False,
        "sort_order": info.sort_order if info is not None else DEFAULT_SORT_ORDER,
        "fileSize": size, "sha": snap.sha, "path": snap.rel, "size": size,
    }
    over = oversized.size_over(snap.text, max_bytes)
    if over is not None:
        p = oversized.part(snap.text, min(max_bytes, oversized.PART_CHARS), part)
        more = f"; read part={p.number + 1} for the next" if p.number < p.count else ""
        out.update(content=p.text, part=p.number, parts=p.count, first_line=p.first_line,
                   warning=f"{oversized.describe(snap.rel, over, max_bytes)}: this is part {p.number} of {p.count}, "
                           f"from line {p.first_line}{more}")
    return out


def write_answer(agent: str, r: WriteResult, **extra: Any) -> dict[str, Any]:
    return {
        "agentId": agent, "filename": r.rel, "sha": r.sha, "previous_sha": r.previous_sha, "changed": r.changed,
        "archived": list(r.archived), "version": r.version, "path": r.rel, **extra,
    }
