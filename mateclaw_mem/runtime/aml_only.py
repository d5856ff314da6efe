"""The Add/Search service alone (`mateclaw-mem serve --aml-only`, issue 40): its own small composition.

A daemon for agent builders and the leaderboard, not a person's desktop: no memory files, no watcher,
no scheduler, no file index, no MCP - only the AML contract (`/v1/aml/*`), `/health` and the OpenAPI
document. Built here, apart from `Services` (the full container), so that it opens nothing else:

- `aml.store: sqlite` - the log and the message index under the workspace's `.mateclaw/` (`log.db`,
  `messages.db`, the same files the full daemon's Add/Search uses); one daemon per workspace (the
  daemon lock), as SQLite has one writer.
- `aml.store: postgresql` - the store of `conversations/pg/` (`open_pg_service`): the DSN from the
  variable `aml.postgres-dsn-env` names; no file at all on this machine, so any number of daemons
  run side by side behind a load balancer. Losing the database is `StoreUnavailableError` (503) per
  request until it is back; the pool reconnects by itself.

Model mode (a model configured) adds the fact worker, as the full daemon does. Dense embeddings
(`model.embedding-model`) are the full daemon's: refused here, by name, rather than ranked otherwise.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mateclaw_mem.clock import Clock, SystemClock, resolve_timezone
from mateclaw_mem.errors import ConfigError
from mateclaw_mem.runtime.build import aml as build_aml
from mateclaw_mem.runtime.build import model as build_model

if TYPE_CHECKING:
    from mateclaw_mem.conversations.aml import AmlService
    from mateclaw_mem.conversations.aml_users import AmlUsers
    from mateclaw_mem.settings import Settings

log = logging.getLogger(__name__)
RETENTION_CHECK_S = 60.0  # how often `aml.retention-days` is looked at (AmlUsers.expire_due: at most hourly)


@dataclass
class AmlNode:
    """One process's Add/Search service over its store: what the HTTP face (api/aml_only_app.py) serves
    (`aml`, `aml_users`, `api_key`, `settings` - the names the AML routes read off `app.state.services`)."""

    settings: Settings
    clock: Clock
    aml: AmlService
    aml_users: AmlUsers
    backend: str
    api_key: str | None
    mode: str
    health_of_store: Callable[[], dict[str, Any]]
    closers: list[Any] = field(default_factory=list)
    background: list[tuple[str, Any]] = field(default_factory=list)
    model: Any = None  # the model client (model mode): the daemon cancels its calls still running at a stop
    _running: list[tuple[str, Any]] = field(default_factory=list)
    _retention: _Every | None = None

    def start(self) -> None:
        """The background parts (WAL checkpoints on SQLite, the fact worker in model mode, retention)."""
        for label, part in self.background:
            part.start()
            self._running.append((label, part))
            log.info("%s started", label)
        if self.settings.aml.retention_days > 0:
            self._retention = _Every(RETENTION_CHECK_S, self.aml_users.expire_due, "aml-retention")
            self._retention.start()

    def stop(self) -> None:
        if self._retention is not None:
            self._retention.stop()
            self._retention = None
        while self._running:
            label, part = self._running.pop()
            try:
                part.stop()
            except Exception:
                log.exception("error while stopping the %s", label)

    def close(self) -> None:
        self.stop()
        while self.closers:
            closer = self.closers.pop()
            try:
                closer.close()
            except Exception:
                log.exception("error while closing %r", closer)

    def running_parts(self) -> list[str]:
        return [label for label, _ in self._running]

    def store_health(self) -> dict[str, Any]:
        """Backend, and its state: for SQLite the files; for PostgreSQL the pool and the migrations
        (`pg_health`). `state` is "ok" or "unavailable" (with `reason`): never raises."""
        try:
            report = self.health_of_store()
        except Exception as exc:  # a health check must answer, whatever the store does
            report = {"backend": self.backend, "state": "unavailable", "reason": str(exc) or type(exc).__name__}
        report.setdefault("backend", self.backend)
        if report.get("reachable") is False:  # pg_health's word for a database it could not reach
            report.setdefault("state", "unavailable")
            report.setdefault("reason", report.get("last_error") or "the database cannot be reached")
        report.setdefault("state", "ok")
        return report


class _Every:
    """`fn` every `interval` seconds on a thread of its own, until `stop`; a failure is logged, not fatal."""

    def __init__(self, interval: float, fn: Callable[[], object], name: str) -> None:
        self.interval, self.fn = interval, fn
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.fn()
            except Exception:
                log.exception("%s failed (tried again in %g s)", self._thread.name, self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def open_node(settings: Settings, clock: Clock | None = None) -> AmlNode:
    """The Add/Search service over `settings.aml.store`, built and caught up, not started."""
    clock = clock or SystemClock(resolve_timezone(settings.timezone))
    if settings.model.embeddings_configured:
        raise ConfigError(
            "serve --aml-only ranks without dense embeddings; model.embedding-model is set - unset it for "
            "this daemon, or run the full `serve` (which fuses them into Add/Search)"
        )
    closers: list[Any] = []
    try:
        return (_open_postgresql if settings.aml.store == "postgresql" else _open_sqlite)(settings, clock, closers)
    except BaseException:
        for closer in reversed(closers):
            closer.close()
        raise


def _open_sqlite(settings: Settings, clock: Clock, closers: list[Any]) -> AmlNode:
    from mateclaw_mem.conversations.aml import AmlService, options_from
    from mateclaw_mem.conversations.facts import FactExtractor
    from mateclaw_mem.db import WalCheckpoints
    from mateclaw_mem.runtime.aml_store import open_parts

    parts = open_parts(settings)
    closers.append(parts)
    # The full daemon's builders: the usage log beside the messages, as it keeps it.
    client = build_model.model(settings, on_close=closers.append)
    facts = None
    if client is not None:
        facts = FactExtractor(parts.facts, parts.log, parts.index, lambda: client, clock)
        closers.append(facts)
    reranker = build_aml.reranker(settings, model=lambda: client, on_close=closers.append)
    aml = AmlService(parts.log, parts.index, clock, facts=facts, reranker=reranker, **options_from(settings))
    background: list[tuple[str, Any]] = [("WAL checkpoints", WalCheckpoints(members=(parts.log, parts.index)))]
    if facts is not None:
        background.append(("AML fact worker", aml))

    def health() -> dict[str, Any]:
        return {"backend": "sqlite", "state": "ok", "files": [settings.log_db.name, settings.messages_db.name]}

    return _node(settings, clock, aml, "sqlite", health, closers, background, client)


def _open_postgresql(settings: Settings, clock: Clock, closers: list[Any]) -> AmlNode:
    try:
        from mateclaw_mem.conversations.pg import dsn_from, open_pg_service, pg_health
    except ImportError as exc:
        missing = getattr(exc, "name", "") or str(exc)
        raise ConfigError(
            f"aml.store: postgresql needs the PostgreSQL driver ({missing} is missing): "
            "pip install 'mateclaw-mem[postgresql]'"
        ) from None
    # No usage log: nothing of this daemon is on its machine's disk (its calls and failures are in the
    # log lines and the status), and any number of them share the one database.
    client = build_model.model(settings, on_close=closers.append, usage_log=False)
    reranker = build_aml.reranker(settings, model=lambda: client, on_close=closers.append, usage_log=False)
    from mateclaw_mem.runtime.aml_store import why_unreachable

    with why_unreachable(dsn_from(settings)):
        aml = open_pg_service(settings, clock, model=lambda: client, reranker=reranker)
    once = _StopOnce(aml)
    closers.append(once)
    background: list[tuple[str, Any]] = [("Add/Search store", once)]
    return _node(settings, clock, aml, "postgresql", lambda: pg_health(aml), closers, background, client)


class _StopOnce:
    """The PostgreSQL service as a background part whose `stop()` (closing its pool, opened by
    `open_pg_service`) runs once: when the node stops, or at close if it never started."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self._stopped = False

    def start(self) -> None:
        self.service.start()

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.service.stop()

    close = stop


def _node(settings: Settings, clock: Clock, aml: AmlService, backend: str,
          health: Callable[[], dict[str, Any]], closers: list[Any], background: list[tuple[str, Any]],
          model: Any = None) -> AmlNode:
    from mateclaw_mem.conversations.aml_users import AmlUsers

    journal = None
    if backend == "sqlite":  # a delete spans three files here (PostgreSQL: one transaction)
        from mateclaw_mem.workspace.journal import Journal

        journal = Journal(settings.state_dir / "journal")
    users = AmlUsers(aml, clock, retention_days=settings.aml.retention_days, journal=journal)
    users.recover()  # a delete a crash interrupted, finished before the first request
    return AmlNode(settings=settings, clock=clock, aml=aml, aml_users=users, backend=backend,
                   api_key=os.environ.get(settings.server.api_key_env) or None,
                   mode="model" if settings.model.configured else "rules", health_of_store=health,
                   closers=closers, background=background, model=model)
