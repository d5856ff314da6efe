"""A claim's line in its file as the file view numbers it.

Facts and contradiction sides count lines in a file's body (memory/facts/projection.py: what the
file says, after its YAML frontmatter), while the file view anchors every line of the whole file
(`id="L<n>"`, view.render_markdown). A link built from the body line landed as many lines too high
as the frontmatter has (4 on a seeded file), so links add it back. Each file is read once a page.
"""

from __future__ import annotations

from mateclaw_mem.errors import MateclawError
from mateclaw_mem.workspace.store import WorkspaceStore


class FileLines:
    """Built from the page's store, agent and owner, not the page: the page imports this module."""

    def __init__(self, store: WorkspaceStore, agent: str, owner: str | None) -> None:
        self._store, self._agent, self._owner = store, agent, owner
        self._offsets: dict[tuple[str, str], int] = {}

    def __call__(self, file: str, scope: str, body_line: int) -> int:
        """`scope` as a fact names it: "personal" is the page's owner, "team" the shared files."""
        key = (file, scope)
        if key not in self._offsets:
            self._offsets[key] = self._offset(file, scope)
        return body_line + self._offsets[key]

    def _offset(self, file: str, scope: str) -> int:
        if scope not in ("personal", "team"):
            return 0  # `global/` files have no file view to link into
        try:
            snap = self._store.read(self._agent, file, owner=self._owner if scope == "personal" else None)
        except MateclawError:
            return 0  # the link still opens the file view, which says what is wrong
        if not snap.exists:
            return 0
        return snap.text[: len(snap.text) - len(snap.body)].count("\n")
