"""Workspace tools (the seed's list/read/write/edit/enable tools, plus `write_memory` merges).

One implementation for every face: CLI, HTTP, MCP and the agent's own tool calls all come here.
Files a tool creates start `enabled: false` so nothing new is injected into prompts by surprise.
"""

from __future__ import annotations

from dataclasses import dataclass

from mateclaw_mem.errors import InvalidInputError, NotFoundError
from mateclaw_mem.markdown import frontmatter, merge
from mateclaw_mem.workspace.listing import DEFAULT_SORT_ORDER, FileInfo
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
        gets `enabled: false`. Without `expected_sha` the write still cannot lose a concurrent edit:
        it is applied against exactly the version read under the lock."""

        def replace(current: str) -> str:
            new_block, _ = frontmatter.split(content)
            if new_block:
                return content
            old_block, _ = frontmatter.split(current)
            if old_block:
                return old_block + content
            if not current:
                return frontmatter.set_keys(content, {"enabled": False, "sort_order": DEFAULT_SORT_ORDER})
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
        owner: str | None = None,
    ) -> WriteResult:
        """Programmatic write with a merge strategy: append, replace_section, upsert_kv, overwrite."""
        if strategy not in merge.STRATEGIES:
            raise InvalidInputError(f"unknown merge strategy {strategy!r}; use one of {', '.join(merge.STRATEGIES)}")

        def apply(current: str) -> str:
            block, body = frontmatter.split(current)
            if not current:
                block = "---\nenabled: false\n---\n"
            return block + merge.apply(strategy, body, content, section)

        result = self.store.update(agent, rel, apply, actor=actor, owner=owner, reason=f"write_memory {strategy}")
        assert result is not None
        return result
