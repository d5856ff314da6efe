"""The standard file-memory command set agents already know: view, create, str_replace, insert,
delete, rename — over one agent's workspace.

Agents address files as `/memories/<path>`; that prefix is the agent's directory (bare relative
paths are accepted too). Every path then goes through the store's path rules (no `..`, no hidden
names, no absolute paths, `.md` only, no escape through symlinks), and every change is an ordinary
store write: atomic, compare-and-swap under the file lock, kept in history, undoable.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from mateclaw_mem.errors import InvalidInputError, InvalidPathError, NotFoundError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.workspace import moves
from mateclaw_mem.workspace.paths import check_relative
from mateclaw_mem.workspace.store import FileInfo, WorkspaceStore
from mateclaw_mem.workspace.tools import WorkspaceTools

ROOT = "/memories"
MAX_VIEW_LINES = 2000


@dataclass(frozen=True)
class CommandResult:
    """What a command did, as text for the agent (the model reads this)."""

    text: str
    path: str = ""
    changed: bool = False


def _display(rel: str) -> str:
    return f"{ROOT}/{rel}" if rel else ROOT


class FileCommands:
    def __init__(self, store: WorkspaceStore, tools: WorkspaceTools) -> None:
        self.store = store
        self.tools = tools

    # -- paths -----------------------------------------------------------------------------------

    @staticmethod
    def relative(path: str) -> str:
        """`/memories/a/b.md` -> `a/b.md`; `/memories` -> "" (the agent's root folder).

        Anything absolute outside `/memories` is refused rather than guessed at."""
        if not isinstance(path, str) or not path.strip():
            raise InvalidPathError("path is empty; use /memories or /memories/<file>.md")
        p = path.strip()
        if p == ROOT or p == ROOT + "/":
            return ""
        if p.startswith(ROOT + "/"):
            return p[len(ROOT) + 1 :].rstrip("/")
        if p.startswith("/"):
            raise InvalidPathError(f"path {path!r} is outside {ROOT}; memory paths start with {ROOT}/")
        return p.rstrip("/")

    def _file_rel(self, path: str) -> str:
        if isinstance(path, str) and path.strip().endswith("/"):
            # `relative` drops it for folders; for a file it would name keep.md and replace it.
            raise InvalidPathError(f"path {path.strip()!r} ends with '/', which names a folder, not a file")
        rel = self.relative(path)
        if not rel:
            raise InvalidPathError(f"{ROOT} is the memory folder, not a file; name a file such as {ROOT}/notes.md")
        check_relative(rel)
        return rel

    def _files_under(self, agent: str, folder: str, owner: str | None) -> list[FileInfo]:
        if folder:
            # A folder name must obey the same rules as a file path segment (no '..', no hidden names).
            check_relative(folder + "/x.md")
        prefix = folder + "/" if folder else ""
        return self.store.list_files(agent, owner=owner, prefix=prefix)

    # -- commands --------------------------------------------------------------------------------

    def view(
        self, agent: str, path: str = ROOT, *, view_range: tuple[int, int] | None = None, owner: str | None = None
    ) -> CommandResult:
        """A folder: the files under it with sizes. A file: its lines, numbered from 1."""
        rel = self.relative(path)
        if not rel.endswith(".md"):
            files = self._files_under(agent, rel, owner)
            if rel and not files:
                raise NotFoundError(f"{_display(rel)} does not exist")
            lines = [f"Files in {_display(rel)} ({len(files)}):"]
            lines += [f"{f.size:>8} bytes  {_display(f.rel)}" for f in sorted(files, key=lambda f: f.rel)]
            return CommandResult("\n".join(lines), _display(rel))
        snap = self.tools.read(agent, self._file_rel(path), owner=owner)
        all_lines = snap.text.split("\n")
        if all_lines and all_lines[-1] == "":
            all_lines.pop()
        start, end = 1, len(all_lines)
        if view_range is not None:
            start, end = view_range
            if end == -1:
                end = len(all_lines)
            if start < 1 or end < start or start > max(len(all_lines), 1):
                raise InvalidInputError(
                    f"view_range {list(view_range)} is outside {_display(snap.rel)} (lines 1-{len(all_lines)})"
                )
        end = min(end, len(all_lines), start + MAX_VIEW_LINES - 1)
        body = "\n".join(f"{n:>6}\t{all_lines[n - 1]}" for n in range(start, end + 1))
        return CommandResult(f"Content of {_display(snap.rel)}:\n{body}", _display(snap.rel))

    def create(self, agent: str, path: str, file_text: str, *, actor: str, owner: str | None = None) -> CommandResult:
        """Create a file, or replace its content (the file's frontmatter is kept)."""
        rel = self._file_rel(path)
        existed = self.store.read(agent, rel, owner=owner).exists
        result = self.tools.write(agent, rel, file_text, actor=actor, owner=owner)
        verb = "replaced" if existed else "created"
        return CommandResult(f"{_display(rel)} {verb}", _display(rel), result.changed)

    def str_replace(
        self, agent: str, path: str, old_str: str, new_str: str, *, actor: str, owner: str | None = None
    ) -> CommandResult:
        """Replace text that occurs exactly once."""
        rel = self._file_rel(path)
        result = self.tools.edit(agent, rel, old_str, new_str, actor=actor, owner=owner,
                                 all_flag="a str_replace that quotes more context (it replaces exactly one)")
        return CommandResult(f"{_display(rel)} edited", _display(rel), result.write.changed)

    def insert(
        self, agent: str, path: str, insert_line: int, insert_text: str, *, actor: str, owner: str | None = None
    ) -> CommandResult:
        """Insert text after line `insert_line` (0 = at the top), numbered as `view` shows them."""
        rel = self._file_rel(path)
        if insert_line < 0:
            raise InvalidInputError(f"insert_line {insert_line} is negative; use 0 to insert at the top")

        def apply(current: str) -> str:
            if not current and not self.store.read(agent, rel, owner=owner).exists:
                raise NotFoundError(f"{_display(rel)} does not exist")
            lines = current.split("\n")
            trailing = lines[-1] == ""
            if trailing:
                lines.pop()
            if insert_line > len(lines):
                raise InvalidInputError(
                    f"insert_line {insert_line} is past the end of {_display(rel)} ({len(lines)} lines)"
                )
            head = frontmatter.split(current)[0].count("\n")
            if insert_line < head:
                # Text above or inside the frontmatter would break it (and the store would restore it).
                raise InvalidInputError(
                    f"lines 1-{head} of {_display(rel)} are its frontmatter; insert after line {head} or later"
                )
            new = insert_text.rstrip("\n").split("\n")
            lines[insert_line:insert_line] = new
            return "\n".join(lines) + ("\n" if trailing else "")

        result = self.store.update(agent, rel, apply, actor=actor, owner=owner, reason="insert")
        assert result is not None
        return CommandResult(f"text inserted into {_display(rel)} after line {insert_line}", _display(rel),
                             result.changed)

    def delete(self, agent: str, path: str, *, actor: str, owner: str | None = None) -> CommandResult:
        """Delete a file, or every file under a folder. Each one stays in history (undoable)."""
        rel = self.relative(path)
        if rel.endswith(".md"):
            rel = self._file_rel(path)
            self.store.delete(agent, rel, expected_sha=None, actor=actor, owner=owner, reason="delete")
            return CommandResult(f"{_display(rel)} deleted", _display(rel), True)
        if not rel:
            raise InvalidPathError(f"refusing to delete the whole memory folder {ROOT}; delete files one by one")
        files = self._files_under(agent, rel, owner)
        if not files:
            raise NotFoundError(f"{_display(rel)} does not exist")
        # One journaled operation (workspace/moves.py): a kill half-way is finished at the next start.
        moves.delete_files(self.store, agent, [f.rel for f in files], actor=actor, owner=owner)
        return CommandResult(f"{_display(rel)} deleted ({len(files)} file(s))", _display(rel), True)

    def rename(
        self, agent: str, old_path: str, new_path: str, *, actor: str, owner: str | None = None
    ) -> CommandResult:
        """Rename a file, or move every file under a folder to a new folder."""
        old = self.relative(old_path)
        new = self.relative(new_path)
        if not old or not new:
            raise InvalidPathError(f"cannot rename the memory folder {ROOT} itself")
        if old.endswith(".md") != new.endswith(".md"):
            raise InvalidPathError(f"rename {old_path!r} to {new_path!r}: a file must stay a .md file")
        if old.endswith(".md"):
            self.store.rename(agent, self._file_rel(old_path), self._file_rel(new_path), actor=actor, owner=owner)
            return CommandResult(f"{_display(old)} renamed to {_display(new)}", _display(new), True)
        files = self._files_under(agent, old, owner)
        if not files:
            raise NotFoundError(f"{_display(old)} does not exist")
        pairs = [(f.rel, check_relative((PurePosixPath(new) / PurePosixPath(f.rel).relative_to(old)).as_posix())
                  .as_posix()) for f in files]
        moves.move_files(self.store, agent, pairs, actor=actor, owner=owner)  # one journaled operation
        return CommandResult(f"{_display(old)} renamed to {_display(new)} ({len(files)} file(s))", _display(new), True)
