"""At start, operations a crash interrupted are finished (workspace/journal.py): the journal's file
changes are replayed by the store, and what lies outside the files is handed to the service that owns
it - each built only when a journal needs it.

Who runs it: the daemon at start (after its services are built, before its workers run), and a CLI
command before it opens its first database (as runtime/heal.py's check), so a person who never runs
the daemon gets the same repair. `status`, `/health` and the Memory Browser's health page show what
was finished, and how (`report`).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from mateclaw_mem.workspace.journal import Finisher

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.index.files.index import FileIndex
    from mateclaw_mem.memory.contradictions.service import ContradictionService
    from mateclaw_mem.memory.dreaming.service import DreamingService
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.store import WorkspaceStore
    from mateclaw_mem.workspace.transfer import Transfer


class Container(Protocol):
    """What recovery reads of the container (runtime/services.py `Services`, which calls this module):
    the store and its journal, and the owners of what follows a replayed file - each built on first use."""

    settings: Settings
    clock: Clock
    journal_checked: bool  # set once this process has finished what the journal left

    @property
    def store(self) -> WorkspaceStore: ...
    @property
    def file_index(self) -> FileIndex: ...
    @property
    def contradictions(self) -> ContradictionService: ...
    @property
    def transfer(self) -> Transfer: ...
    @property
    def soul(self) -> Any: ...
    @property
    def forget(self) -> Any: ...
    @property
    def chat_import(self) -> Any: ...
    @property
    def dreaming(self) -> DreamingService: ...
    @property
    def extraction(self) -> Any: ...
    @property
    def aml_users(self) -> Any: ...

log = logging.getLogger(__name__)
SHOWN_DAYS = 7  # what the start finished is shown this long (recovered.jsonl keeps more)


def _finishers(services: Container) -> dict[str, Finisher]:
    # Looked up when called: a workspace with no interrupted forget never builds the forget service here.
    return {
        "import": lambda f: services.transfer.finish_sidecars(f),
        "soul-apply": lambda f: services.soul.finish_apply(f),
        "contradiction": lambda f: services.contradictions.finish_resolve(f),
        "forget": lambda f: services.forget.finish_interrupted(f),
        "import-chats": lambda f: services.chat_import.finish_interrupted(f),
        "dream": lambda f: _finish_dream(services, f),
        "extraction": lambda f: services.extraction.finish_interrupted(f),
        "aml-delete": lambda f: services.aml_users.finish_interrupted(f),
    }


def _finish_dream(services: Container, finish: dict[str, Any]) -> str:
    from mateclaw_mem.memory.dreaming import apply

    dreaming = services.dreaming
    return apply.finish_interrupted(dreaming.store, dreaming.diary, dreaming.runs, finish, services.clock.now())


def at_start(services: Container) -> list[dict[str, Any]]:
    """Finish every interrupted operation whose process is gone; what was done (also logged)."""
    if services.journal_checked:
        return []
    services.journal_checked = True
    journal = services.store.journal
    if not journal.folder.is_dir():
        return []
    if journal.unfinished():
        # What follows the files' writes (the search index, and through it the fact projection and
        # the contradiction inbox) is built first: a replayed write reaches it as any write does.
        services.file_index  # noqa: B018
        if services.settings.mate.memory.fact.projection_enabled:
            services.contradictions  # noqa: B018
    # Also when none is unfinished: a journal killed while it was being written or removed (no
    # intent in it) is cleared away.
    return _recover(services)


def sweep(services: Container) -> list[dict[str, Any]]:
    """The running daemon's heartbeat: an operation another process began and died in (a CLI import
    killed while the daemon runs) is finished without waiting for the next start. Operations running
    now hold their journal's lock and are left alone."""
    journal = services.store.journal
    if not journal.folder.is_dir() or not any(journal.unfinished_dead()):
        return []
    return _recover(services)


def _recover(services: Container) -> list[dict[str, Any]]:
    return services.store.journal.recover(
        services.store, _finishers(services), at=services.clock.now().isoformat(timespec="seconds"),
        before_replay={"contradiction": lambda f: services.contradictions.hold(f)})


def report(services: Container, *, full: bool = True) -> dict[str, Any]:
    """{"recovered": the recoveries of the last SHOWN_DAYS, newest first; "unfinished": journals on disk
    now}; empty when there is nothing to say. `full=False` (/health, open without a key): no file or
    run names."""
    journal = services.store.journal
    since = (services.clock.now() - timedelta(days=SHOWN_DAYS)).isoformat(timespec="seconds")
    recovered = [e for e in journal.recovered() if str(e.get("at", "")) >= since]
    unfinished = journal.unfinished()
    if not full:
        recovered = [{k: e.get(k) for k in ("at", "operation", "outcome", "how")} for e in recovered]
        unfinished = [{k: u.get(k) for k in ("operation", "files", "running")} for u in unfinished]
    out: dict[str, Any] = {}
    if recovered:
        out["recovered"] = recovered
    if unfinished:
        out["unfinished"] = unfinished
    return out
