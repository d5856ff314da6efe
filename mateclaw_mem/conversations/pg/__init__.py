"""The Add/Search store on PostgreSQL (`aml.store: postgresql`): many `serve --aml-only` daemons over
one database. `open_pg_service` gives an `AmlService` whose log, message index and fact jobs live
there; `pg_health` is what `status` and `/health` show of it. See store.py for how several daemons
share it, connection.py for how the SQLite store's statements run on it, schema.py for its tables.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mateclaw_mem.conversations.aml import AmlService, options_from
from mateclaw_mem.errors import ConfigError, StoreUnavailableError

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from mateclaw_mem.clock import Clock
    from mateclaw_mem.conversations.facts import FactExtractor
    from mateclaw_mem.conversations.pg.connection import Checkout
    from mateclaw_mem.conversations.pg.store import PgFactStore, PgIndex, PgLog, PgStorage
    from mateclaw_mem.index.messages.ranking import Ranking
    from mateclaw_mem.llm.client import ModelClient
    from mateclaw_mem.settings import Settings

CONNECT_TIMEOUT_S = 5.0  # a call waits this long for a connection before answering 503
RECONNECT_S = 5.0


@dataclass
class PgStore:
    """One database's store: its pool and the SQLite store's classes over it."""

    pool: ConnectionPool
    checkout: Checkout
    storage: PgStorage
    log: PgLog
    index: PgIndex
    migrated: list[int] = field(default_factory=list)  # versions this opening applied

    def fact_store(self, now_ms: Any) -> PgFactStore:
        from mateclaw_mem.conversations.pg.store import PgFactStore

        return PgFactStore(self.checkout, self.storage, now_ms)

    def close(self) -> None:
        try:
            self.storage.merger.stop()
            try:
                self.storage.merger.run_now()  # (what is due now, not left for the next Add)
            except StoreUnavailableError:
                pass
        finally:
            self.pool.close()


# libpq's defaults wait on a dead server for as long as TCP does (minutes: a host gone without a reset
# leaves a query waiting, or a connection attempt hanging). These bound that to seconds; a DSN that sets
# one of them keeps its own.
_CONNECTION_DEFAULTS = {"connect_timeout": "5", "keepalives": "1", "keepalives_idle": "10",
                        "keepalives_interval": "5", "keepalives_count": "3", "tcp_user_timeout": "15000"}


def connection_options(dsn: str, where: str = "the PostgreSQL DSN") -> dict[str, Any]:
    """psycopg's connection arguments; ConfigError (exit 6, the password kept out) for a DSN libpq
    cannot read - psycopg's own message would quote the fragment it choked on, the password too."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from mateclaw_mem.conversations.pg.connection import scrub

    try:
        given = conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        why = scrub(" ".join(str(exc).split()), dsn)
        raise ConfigError(f"{where} cannot be read ({why}): write it as"
                          " postgresql://user:pass@host:5432/dbname or host=... port=... dbname=... user=...") from None
    return {"autocommit": True, **{k: v for k, v in _CONNECTION_DEFAULTS.items() if k not in given}}


def open_store(dsn: str, *, ranking: Ranking | None = None, cache_bytes: int = 64 << 20, min_size: int = 1,
               max_size: int = 16, timeout: float = CONNECT_TIMEOUT_S, now_ms: int | None = None) -> PgStore:
    """Connect (StoreUnavailableError naming why, when the database cannot be reached), migrate,
    and build the store's classes."""
    import psycopg
    from psycopg_pool import ConnectionPool, PoolTimeout

    from mateclaw_mem.conversations.pg import schema
    from mateclaw_mem.conversations.pg.connection import Checkout, unavailable
    from mateclaw_mem.conversations.pg.store import PgIndex, PgLog, PgStorage
    from mateclaw_mem.index.tokenizer import TOKENIZER_VERSION

    # `check`: a connection the server dropped while it sat in the pool (a restart) is replaced before a
    # call gets it. `reconnect_timeout`: the pool's own reconnection backs off exponentially, so after a
    # long outage its next try could be minutes away; giving up after RECONNECT_S lets the next call
    # start a new try at once (the pool grows on demand), so a daemon is back seconds after its database.
    options = connection_options(dsn)  # (first: a DSN libpq cannot read is a ConfigError, not a pool timeout)
    pool = ConnectionPool(dsn, min_size=min_size, max_size=max_size, kwargs=options,
                          check=ConnectionPool.check_connection, open=False, name="mateclaw-aml", timeout=timeout,
                          reconnect_timeout=RECONNECT_S)
    try:
        pool.open(wait=True, timeout=timeout)
    except PoolTimeout as exc:
        pool.close()
        raise unavailable(exc, f"PostgreSQL (no connection within {timeout:g} s)") from exc
    try:
        with pool.connection(timeout=timeout) as raw:
            try:
                done = schema.migrate(raw, now_ms if now_ms is not None else int(time.time() * 1000))
                raw.execute("INSERT INTO meta (key, value) SELECT 'tokenizer', %s WHERE NOT EXISTS"
                            " (SELECT 1 FROM docs LIMIT 1) ON CONFLICT (key) DO NOTHING", (TOKENIZER_VERSION,))
            except psycopg.Error as exc:
                raise schema.refused(exc, raw) from None
    except BaseException:
        pool.close()
        raise
    checkout = Checkout(pool, timeout, latest=schema.LATEST)
    storage = PgStorage(checkout)
    log = PgLog(checkout, storage)
    index = PgIndex(storage, ranking, cache_bytes=cache_bytes)
    return PgStore(pool, checkout, storage, log, index, done)


class PgAmlService(AmlService):
    """An AmlService whose `stop` also closes the store (its merges done, its pool closed)."""

    pg: PgStore

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            self.pg.close()


def dsn_from(settings: Settings) -> str:
    name = settings.aml.postgres_dsn_env
    dsn = os.environ.get(name, "").strip()
    if not dsn:
        raise ConfigError(f"aml.store is postgresql but the environment variable {name} (aml.postgres-dsn-env) is"
                          " not set: set it to the database's DSN, e.g. postgresql://user:pass@host:5432/mateclaw")
    connection_options(dsn, f"the DSN in {name} (aml.postgres-dsn-env)")
    return dsn


def open_pg_service(settings: Settings, clock: Clock, *, model: Callable[[], ModelClient | None] = lambda: None,
                    reranker: Any = None, dsn: str | None = None) -> AmlService:
    """The Add/Search service over PostgreSQL (the DSN from `aml.postgres-dsn-env`'s variable unless
    given); migrations run here. `model` is the shared client's provider (runtime/build/types.ModelProvider):
    with a client, facts are extracted beside the messages. The caller calls `.start()` and `.stop()`
    (which closes the pool)."""
    from mateclaw_mem.index.tokenizer import TOKENIZER_VERSION

    aml = settings.aml
    store = open_store(dsn or dsn_from(settings), cache_bytes=aml.cache_bytes,
                       now_ms=int(clock.now().timestamp() * 1000))
    stale = store.index.stale_tokenizer()
    if stale is not None:
        # Its terms would silently stop matching this version's query terms. SQLite rebuilds its index
        # file at start; a shared database is not rebuilt under other daemons' feet. (`aml export` opens
        # it all the same: `open_store` does not refuse it.)
        store.close()
        raise ConfigError(f"the PostgreSQL store was indexed with tokenizer {stale!r}, this mateclaw-mem uses"
                          f" {TOKENIZER_VERSION!r}: `mateclaw-mem aml export` it and `aml import` it into a fresh"
                          " database (the import indexes every message again), then point the daemons there")
    facts: FactExtractor | None = None
    if model() is not None:  # the mode, fixed here as the full daemon's services fix theirs
        from mateclaw_mem.conversations.facts import FactExtractor

        facts = FactExtractor(store.fact_store(lambda: int(clock.now().timestamp() * 1000)), store.log, store.index,
                              model, clock)
    try:
        service = PgAmlService(store.log, store.index, clock, facts=facts, reranker=reranker,
                               **options_from(settings))
    except BaseException:
        store.close()
        raise
    service.pg = store
    return service


def pg_health(service: AmlService) -> dict[str, Any]:
    """The backend, its pool, its schema's version and what is pending, the last error (for
    `status` and /health; never the DSN's password)."""
    from mateclaw_mem.conversations.pg import schema

    store: PgStore | None = getattr(service, "pg", None)
    if store is None:
        return {"backend": "sqlite"}
    stats = store.pool.get_stats()
    out: dict[str, Any] = {
        "backend": "postgresql",
        "pool": {k: stats.get(k, 0) for k in ("pool_min", "pool_max", "pool_size", "pool_available",
                                             "requests_waiting", "connections_lost")},
        "schema_version": None, "latest_schema_version": schema.LATEST, "pending_migrations": None,
        "reachable": False, "last_error": store.checkout.last_error,
    }
    try:
        with store.pool.connection(timeout=2.0) as raw:
            version = schema.applied(raw)
        out.update(schema_version=version, pending_migrations=max(0, schema.LATEST - version), reachable=True)
        if version > schema.LATEST:  # (a newer daemon migrated it under this one: its statements may fail)
            out.update(state="unavailable", reason=f"the store's schema is version {version}, newer than this"
                       f" mateclaw-mem knows ({schema.LATEST}): upgrade this daemon")
    except Exception as exc:  # (health answers; it never raises)
        out["last_error"] = " ".join(str(exc).split())[:300] or type(exc).__name__
    return out
