"""Which imported conversations were handed to extraction: `chat_imports` in log.db.

A row says: this conversation, with exactly this content (`content_sha` over its messages), is in the
log and extraction has had it (queued through the gates, run, or turned away by a gate). It is
written after that hand-over, so a run killed before it leaves no row and the next run hands the
conversation over again (a second trigger of a conversation already examined costs a look at its
watermark, nothing more). With the row there, a second import of the same file skips the
conversation without reading its messages. An export in which the conversation grew has another
content hash: its new messages are appended and handed over.

In log.db, beside the messages it describes, because deleting the log must forget it too. It holds
ids, hashes and counts, never a word of what was said.
"""

from __future__ import annotations

from pathlib import Path

from mateclaw_mem.db import SharedConnection, owner_column

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chat_imports (
    agent TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    conversation_id TEXT NOT NULL,
    content_sha TEXT NOT NULL,
    messages INTEGER NOT NULL,
    handed_to TEXT NOT NULL,
    imported_ms INTEGER NOT NULL,
    PRIMARY KEY (agent, owner, conversation_id, content_sha)
);
"""


class ImportLedger(SharedConnection):
    def __init__(self, db_path: Path) -> None:
        super().__init__(db_path, _SCHEMA)

    def handed_over(self, agent: str, owner: str | None) -> set[tuple[str, str]]:
        """(conversation id, content hash) of every conversation of this agent and owner handed over."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT conversation_id, content_sha FROM chat_imports WHERE agent = ? AND owner = ?",
                (agent, owner_column(owner)),
            ).fetchall()
        return {(r["conversation_id"], r["content_sha"]) for r in rows}

    def record(self, agent: str, owner: str | None, conversation_id: str, content_sha: str, messages: int,
               handed_to: str, now_ms: int) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO chat_imports (agent, owner, conversation_id, content_sha, messages,"
                " handed_to, imported_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (agent, owner_column(owner), conversation_id, content_sha, messages, handed_to[:500], now_ms),
            )
