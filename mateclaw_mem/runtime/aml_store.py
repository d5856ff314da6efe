"""The Add/Search store's parts over `aml.store` (log, message index, fact store), and moving a store
between SQLite and PostgreSQL (`mateclaw-mem aml export|import`; the file format: conversations/aml_transfer.py).

`open_parts` is what `serve --aml-only` builds its SQLite service from, and what export and import
open on either backend without starting a service. Import runs the store's own catch-up afterwards
(`MessageIndex.sync` and `sync_facts`, as a daemon's start does), so the ranking's tables are built by
the same code that builds them for an Add.
"""

from __future__ import annotations

import io
import os
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from mateclaw_mem.errors import BusyError, ConfigError, InvalidInputError

if TYPE_CHECKING:
    from mateclaw_mem.conversations.aml_transfer import InTransaction, Moved
    from mateclaw_mem.conversations.facts import FactStore
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.messages.index import MessageIndex
    from mateclaw_mem.settings import Settings


@dataclass
class StoreParts:
    backend: str
    log: ConversationLog
    index: MessageIndex
    facts: FactStore
    closers: list[Any] = field(default_factory=list)

    def close(self) -> None:
        while self.closers:
            self.closers.pop().close()


def open_parts(settings: Settings) -> StoreParts:
    """The store `aml.store` names, opened (PostgreSQL: connected and migrated), nothing started."""
    if settings.aml.store == "postgresql":
        return _pg_parts(settings)
    from mateclaw_mem.conversations.facts import FactStore
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.messages.index import MessageIndex
    from mateclaw_mem.runtime.build.index import retokenize

    settings.state_dir.mkdir(parents=True, exist_ok=True)
    closers: list[Any] = []
    try:
        log = ConversationLog(settings.log_db)
        closers.append(log)
        index = MessageIndex(settings.messages_db, dense_weight=settings.search.dense_weight,
                             cache_bytes=settings.aml.cache_bytes, log_db=settings.log_db,
                             index_process=settings.aml.index_process)
        closers.append(index)
        facts = FactStore(settings.log_db)
        closers.append(facts)
        # An index written by another tokenizer version would silently stop matching: rebuilt (derived
        # data) by one process while the others wait - the full daemon's own step.
        retokenize(settings.state_dir, "Add/Search message index", index, lambda: index.rebuild(log, facts))
    except BaseException:
        for closer in reversed(closers):
            closer.close()
        raise
    return StoreParts("sqlite", log, index, facts, closers)


def _pg_parts(settings: Settings) -> StoreParts:
    try:
        from mateclaw_mem.conversations.pg import dsn_from, open_store
    except ImportError as exc:
        raise ConfigError(f"aml.store: postgresql needs the PostgreSQL driver ({exc.name or exc} is missing): "
                          "pip install 'mateclaw-mem[postgresql]'") from None
    dsn = dsn_from(settings)
    with why_unreachable(dsn):
        store = open_store(dsn, cache_bytes=settings.aml.cache_bytes)
    facts = store.fact_store(lambda: int(time.time() * 1000))
    return StoreParts("postgresql", store.log, store.index, facts, [store, facts])


def store_report(settings: Settings) -> dict[str, Any]:
    """What `aml status` shows without a daemon: the backend, where it is (never a password), its
    migrations and pool (PostgreSQL: `pg_health`), and how much it holds. Raises StoreUnavailableError
    when the database cannot be reached."""
    parts = open_parts(settings)
    try:
        report: dict[str, Any] = {"backend": parts.backend}
        if parts.backend == "postgresql":
            from types import SimpleNamespace

            from mateclaw_mem.conversations.pg import pg_health

            report.update(pg_health(SimpleNamespace(pg=parts.closers[0])))  # type: ignore[arg-type]
        else:
            report["files"] = {"log": str(settings.log_db), "index": str(settings.messages_db)}
        conn = parts.log._conn
        agent = settings.aml_agent
        with parts.log.lock:
            row = conn.execute("SELECT COUNT(*) AS n, COUNT(DISTINCT owner) AS users FROM messages WHERE agent = ?",
                               (agent,)).fetchone()
        report.update(agent=agent, messages=row["n"], users=row["users"], facts=parts.facts.counts())
        return report
    finally:
        parts.close()


@contextmanager
def why_unreachable(dsn: str) -> Iterator[None]:
    """A StoreUnavailableError from opening the pool says only that no connection came in time; the
    cause (no such database, a refused password, a host that refuses) is in one direct attempt's
    error, which is added to the reason here (libpq's messages carry no password)."""
    from mateclaw_mem.errors import StoreUnavailableError

    try:
        yield
    except StoreUnavailableError as exc:
        import psycopg

        try:
            psycopg.connect(dsn, connect_timeout=5).close()
        except psycopg.Error as direct:
            from mateclaw_mem.conversations.pg.connection import scrub

            cause = " ".join(str(direct).split())
            raise StoreUnavailableError(scrub(f"{exc.message} - {cause}", dsn)) from None
        raise StoreUnavailableError(scrub(exc.message, dsn)) from None


def export_to(settings: Settings, target: str, *, facts: bool = True, force: bool = False) -> Moved:
    """The store, written to `target` (a path: `.gz` compresses; "-": stdout) from one snapshot. A file
    is written beside and renamed when complete, so a cut export never looks like a whole one."""
    from mateclaw_mem.conversations.aml_transfer import export_store, open_out

    now_ms = int(time.time() * 1000)
    parts = open_parts(settings)
    try:
        if target == "-":
            return export_store(parts.log, settings.aml_agent, sys.stdout, source=parts.backend, now_ms=now_ms,
                                facts=facts)
        path = Path(target)
        if path.exists() and not force:
            raise InvalidInputError(f"{path} exists; name a new file, or pass --force to replace it")
        partial = path.with_name(path.name + ".partial")
        try:
            with open_out(partial, compress=path.suffix == ".gz") as out:
                moved = export_store(parts.log, settings.aml_agent, out, source=parts.backend, now_ms=now_ms,
                                     facts=facts)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
        return moved
    finally:
        parts.close()


def import_from(settings: Settings, source: str) -> Moved:
    """`source` (a path, or "-": stdin) into the store `aml.store` names: one transaction, then the
    message index caught up through the store's own path. On SQLite the daemon lock is taken (no
    daemon may run on the workspace meanwhile); on PostgreSQL import before the daemons take traffic."""
    from mateclaw_mem.conversations.aml_transfer import import_store

    with ExitStack() as stack:
        if settings.aml.store == "sqlite":
            stack.enter_context(daemon_lock(settings, "stop it before importing into its store"))
        raw: IO[bytes]
        if source == "-":
            raw = sys.stdin.buffer
        else:
            try:
                raw = stack.enter_context(Path(source).open("rb"))
            except OSError as exc:
                raise InvalidInputError(f"cannot read {source}: {exc.strerror}") from None
        if not hasattr(raw, "peek"):
            raw = io.BufferedReader(raw)  # type: ignore[type-var]  # (any binary stream: stdin, a pipe)
        parts = open_parts(settings)
        stack.callback(parts.close)
        moved = import_store(parts.log, settings.aml_agent, raw, backend=parts.backend,
                             index=_indexed_with_the_log(parts))
        if parts.backend == "sqlite":
            # messages.db is another file: built again from the whole log (a rebuild, not a sync: the
            # imported ids may lie below the index's watermark where the log held other agents' turns).
            parts.index.rebuild(parts.log, parts.facts)
        return moved


def _indexed_with_the_log(parts: StoreParts) -> InTransaction | None:
    """PostgreSQL indexes what it logs in the same transaction (conversations/pg/store.py: `PgLog`), so
    an import does too: nothing is ever imported without its index rows, nor the reverse."""
    if parts.backend != "postgresql":
        return None
    from mateclaw_mem.conversations.aml_transfer import InTransaction

    log: Any = parts.log
    storage = log.storage
    last = [0]

    def facts() -> None:
        while found := parts.facts.facts_since(last[0], limit=500):
            storage._add_facts(found)
            last[0] = found[-1].id

    return InTransaction(messages=log._index, facts=facts, committed=storage.committed)


@contextmanager
def daemon_lock(settings: Settings, refusal: str) -> Iterator[None]:
    """The workspace's daemon lock (the one `serve` holds) for as long as the block runs; `BusyError`
    with `refusal` (what to do instead) when another process holds it."""
    from filelock import FileLock, Timeout

    settings.state_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(settings.state_dir / "daemon.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise BusyError(f"a mateclaw-mem daemon is already running on workspace {settings.workspace.resolve()}: "
                        f"{refusal}") from None
    try:
        yield
    finally:
        lock.release()
