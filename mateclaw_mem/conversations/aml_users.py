"""A person's Add/Search data deleted: on request (`DELETE /v1/aml/users/{user_id}`) or once their
last Add is older than `aml.retention-days` (the evaluation guide: data used only for the run and
deleted within 30 days).

What one user is, on disk (owner = `user_id` under the AML agent):

- `log.db`: their messages (with image references), the idempotency records of their requests, the
  AML facts and fact jobs made from them, the model-step failures filed under them
  (`ConversationLog.delete_owner`);
- `messages.db`: their documents and field tokens (`index.messages.storage.delete_owner`);
- `index.db`: the file index's copies of their messages, and the scope row naming them
  (`FileIndex.delete_owner_messages`).

A delete is a forget of everything: the rows go, then each of the three files is scrubbed the way a
forget scrubs (memory/forget/scrub.py: FTS5 optimized, WAL truncated, VACUUM), because a DELETE only
unlinks the old bytes. tests/test_aml_users.py scans every byte of the workspace afterwards, with
another user's words as the positive control. Not on disk, so not here: a search's in-memory view of
the user, which no search can reach once the documents are gone and which is dropped when evicted.
Embeddings (`messages.db:vectors`) are floats keyed by a text hash and shared by equal texts: kept.

Request logs: uvicorn's access log is off (runtime/daemon.py) and no AML code logs a message's text;
a failure log line names ids and the error only.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.memory.forget.scrub import scrub

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.conversations.aml import AmlService
    from mateclaw_mem.index.files.index import FileIndex

log = logging.getLogger(__name__)
DAY_MS = 86_400_000
RETENTION_EVERY_S = 3600.0  # the heartbeat runs each minute; looking for expired users once an hour is plenty


class AmlUsers:
    def __init__(self, aml: AmlService, clock: Clock, *, file_index: FileIndex | None = None,
                 retention_days: float = 0) -> None:
        self.aml = aml
        self.clock = clock
        self.file_index = file_index
        self.retention_days = retention_days
        self._last_expiry = float("-inf")

    def _files(self) -> list[Path]:
        # (None: the PostgreSQL store, whose deleted rows autovacuum reclaims: docs/postgresql.md)
        paths = [p for p in (self.aml.log.path, self.aml.index.path) if p is not None]
        if self.file_index is not None:
            paths.append(self.file_index.path)
        return paths

    def delete(self, user_id: str) -> dict[str, Any]:
        """Every row of `user_id` gone from every store, and the files scrubbed. Idempotent: a user
        with nothing stored answers with zero counts (the files are scrubbed all the same)."""
        if not user_id.strip():
            raise InvalidInputError("user_id must be a non-empty string")
        deleted = self._delete_rows(user_id)
        return {"user_id": user_id, "deleted": deleted, "scrubbed": self._scrub()}

    def _delete_rows(self, user_id: str) -> dict[str, int]:
        aml = self.aml
        # Both locks, as an Add holds them in turn: an Add of this user in this process lands wholly
        # before the delete (and is deleted) or wholly after it (and is kept, as a new Add).
        with ExitStack() as held:
            held.enter_context(aml.log.lock)
            held.enter_context(aml.index.lock)
            held.enter_context(aml.log.holding(aml.agent, user_id))  # (PostgreSQL: one transaction)
            out = {f"log.db:{t}": n for t, n in aml.log.delete_owner(aml.agent, user_id).items()}
            out["messages.db:docs"] = aml.index.delete_owner(aml.agent, user_id)
            if self.file_index is not None:
                out["index.db:chunks"] = self.file_index.delete_owner_messages(aml.agent, user_id)
        return out

    def _scrub(self) -> list[dict[str, Any]]:
        return [scrub(path) for path in self._files() if path.exists()]

    # -- retention ----------------------------------------------------------------------------------

    def expire(self) -> list[str]:
        """Delete every user whose last Add is older than `aml.retention-days` (nothing when 0);
        the users deleted. One scrub after all of them."""
        if self.retention_days <= 0:
            return []
        now_ms = int(self.clock.now().timestamp() * 1000)
        users = self.aml.log.owners_idle_since(self.aml.agent, now_ms - int(self.retention_days * DAY_MS))
        for user in users:
            self._delete_rows(user)
        if users:
            self._scrub()
            log.info("AML retention: %d user(s) whose last Add is over %g days old deleted", len(users),
                     self.retention_days)
        return users

    def expire_due(self) -> list[str]:
        """`expire`, at most once an hour (the scheduler's heartbeat, whose first beat is at start)."""
        now = time.monotonic()
        if self.retention_days <= 0 or now - self._last_expiry < RETENTION_EVERY_S:
            return []
        self._last_expiry = now
        return self.expire()
