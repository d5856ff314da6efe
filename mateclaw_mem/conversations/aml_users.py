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

A kill -9 never leaves a delete half done (SQLite; issue 35's "no half operations"): the delete is an
operation of the workspace journal (workspace/journal.py, op `aml-delete`), durable before the first
row goes, closed only once every file is scrubbed; the users are in its `finish`, and
runtime/recovery.py hands an interrupted one to `finish_interrupted` (at start, in `doctor`, on the
heartbeat), which deletes again what is left and scrubs. The log goes last, so that even without the
journal what remains is what retention finds (it looks users up in log.db). A delete that fails
mid-way (a locked file) or whose scrub failed leaves its journal for that recovery too. PostgreSQL
(`log.path` None) needs none: `log.holding` is one transaction, and its order is as it always was.

Request logs: uvicorn's access log is off (runtime/daemon.py) and no AML code logs a message's text;
a failure log line names ids and the error only.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.memory.forget.scrub import scrub
from mateclaw_mem.workspace.journal import crash_point

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.conversations.aml import AmlService
    from mateclaw_mem.index.files.index import FileIndex
    from mateclaw_mem.workspace.journal import Journal

log = logging.getLogger(__name__)
DAY_MS = 86_400_000
RETENTION_EVERY_S = 3600.0  # the heartbeat runs each minute; looking for expired users once an hour is plenty
OP = "aml-delete"  # the journal's operation (runtime/recovery.py's finisher; MATECLAW_MEM_CRASH_AT=aml-delete:…)


class AmlUsers:
    def __init__(self, aml: AmlService, clock: Clock, *, file_index: FileIndex | None = None,
                 retention_days: float = 0, journal: Journal | None = None) -> None:
        self.aml = aml
        # (only over SQLite files: the PostgreSQL store deletes in one transaction)
        self.journal = journal if aml.log.path is not None else None
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
        with self._intent([user_id]) as scrubbed:
            deleted = self._delete_rows(user_id)
            scrubbed += self._scrub()
        return {"user_id": user_id, "deleted": deleted, "scrubbed": scrubbed}

    @contextmanager
    def _intent(self, users: list[str]) -> Iterator[list[dict[str, Any]]]:
        """The journal of one delete (see the module's doc); yields the list the body puts its scrub
        results in - a failed scrub leaves the journal for recovery, as a failed delete does."""
        scrubbed: list[dict[str, Any]] = []
        if self.journal is None:
            yield scrubbed
            return
        batch = f"{OP}-{uuid.uuid4().hex[:12]}"  # (not the user id: recovered.jsonl keeps the batch)
        self.journal.begin(OP, batch, (), finish={"users": users})
        try:
            yield scrubbed
        except BaseException:
            self.journal.leave(batch)
            raise
        crash_point(OP, "end")
        if any("error" in s for s in scrubbed):
            self.journal.leave(batch)
        else:
            self.journal.end(batch)

    def _delete_rows(self, user_id: str) -> dict[str, int]:
        aml = self.aml
        steps: list[tuple[str, Callable[[str], dict[str, int]]]] = [
            ("messages", self._delete_messages), ("index", self._delete_file_index), ("log", self._delete_log)]
        if self.journal is None:  # PostgreSQL (one transaction): the order it always had
            steps = steps[2:] + steps[:2]
        else:
            # messages.db once more, last: another process sharing the files (its search catches its
            # index up first) may have indexed the user's Adds still in the log - an Add is indexed
            # after its answer - between the first pass and the log's rows going. Once those are
            # gone nothing can bring them back (a sync still reading them holds the file's write
            # lock, which this pass waits for).
            steps.append(("messages again", self._delete_messages))
        out: dict[str, int] = {}
        # Both locks: an Add of this user in this process lands wholly before the delete (and is
        # deleted) or wholly after it (and is kept, as a new Add), and the index's thread indexes
        # the log's tail wholly before or after. The index's lock first, as that thread takes them
        # (sync reads the log under the index's lock): the other order could deadlock with it.
        with ExitStack() as held:
            held.enter_context(aml.index.lock)
            held.enter_context(aml.log.lock)
            held.enter_context(aml.log.holding(aml.agent, user_id))  # (PostgreSQL: one transaction)
            for name, step in steps:
                for key, n in step(user_id).items():
                    out[key] = out.get(key, 0) + n
                crash_point(OP, f"rows:{name}")
        return out

    def _delete_messages(self, user_id: str) -> dict[str, int]:
        return {"messages.db:docs": self.aml.index.delete_owner(self.aml.agent, user_id)}

    def _delete_file_index(self, user_id: str) -> dict[str, int]:
        if self.file_index is None:
            return {}
        return {"index.db:chunks": self.file_index.delete_owner_messages(self.aml.agent, user_id)}

    def _delete_log(self, user_id: str) -> dict[str, int]:
        return {f"log.db:{t}": n for t, n in self.aml.log.delete_owner(self.aml.agent, user_id).items()}

    def _scrub(self) -> list[dict[str, Any]]:
        out = []
        for i, path in enumerate(p for p in self._files() if p.exists()):
            out.append(scrub(path))
            crash_point(OP, f"scrub:{i + 1}")
        return out

    def recover(self) -> list[dict[str, Any]]:
        """`serve --aml-only`'s start over SQLite (it has no workspace store, so no runtime/recovery.py):
        the deletes a crash interrupted, finished; other operations' journals are left to the full
        daemon. What was done, as `Journal.recover` reports it."""
        if self.journal is None or not self.journal.folder.is_dir():
            return []
        return self.journal.recover(None, {OP: self.finish_interrupted}, only={OP},
                                    at=self.clock.now().isoformat(timespec="seconds"))

    def finish_interrupted(self, finish: dict[str, Any]) -> str:
        """runtime/recovery.py's finisher of a delete a crash (or a failure) interrupted: its users'
        rows deleted again where any are left, then every file scrubbed. A scrub that fails raises,
        so that the journal is kept for the next try."""
        users = [str(u) for u in finish.get("users") or []]
        rows = 0
        for user in users:
            rows += sum(self._delete_rows(user).values())
        scrubbed = self._scrub()
        failed = [f"{s['db']}: {s['error']}" for s in scrubbed if "error" in s]
        if failed:
            raise RuntimeError("scrub failed (" + "; ".join(failed) + ")")
        return (f"the Add/Search data of {len(users)} deleted user(s) gone: {rows} row(s) left by the crash "
                f"deleted, {len(scrubbed)} database(s) scrubbed")

    # -- retention ----------------------------------------------------------------------------------

    def expire(self) -> list[str]:
        """Delete every user whose last Add is older than `aml.retention-days` (nothing when 0);
        the users deleted. One scrub after all of them."""
        if self.retention_days <= 0:
            return []
        now_ms = int(self.clock.now().timestamp() * 1000)
        users = self.aml.log.owners_idle_since(self.aml.agent, now_ms - int(self.retention_days * DAY_MS))
        if not users:
            return []
        with self._intent(users) as scrubbed:
            for user in users:
                self._delete_rows(user)
            scrubbed += self._scrub()
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
