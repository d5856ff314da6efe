"""Services built from one Settings object, in one order, and the background work they own.

Two ways in, one rule: no service is built while another thread may be asking for it.

- The daemon calls `build()`: it creates every service in `BUILD_ORDER` on the calling thread,
  while no thread of ours exists; then it opens the HTTP API and calls `start()`: the background
  parts start in `START_ORDER`, each only after everything it writes through exists. After
  `build()` nothing is built lazily any more: asking for a service missing from `BUILD_ORDER` is
  an error, never a race.
- A CLI command touches only what it needs, built on first use (`mateclaw-mem cat` never opens
  SQLite). Building never starts a thread: workers, timers, the watcher and the scheduler start in
  `start()` only, so a CLI command leaves pending extraction work to the daemon.

Why not `functools.cached_property`: on Python 3.11 it holds a lock while its getter runs. The
daemon's main thread building `watcher` (which needs `file_index`) while a resumed extraction worker
wrote a file whose listener built `file_index` took the locks in reverse order, and a restart with
pending work hung silently (issue 13, point 5).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from mateclaw_mem.clock import Clock, SystemClock, resolve_timezone

if TYPE_CHECKING:
    from mateclaw_mem.conversations.aml import AmlService
    from mateclaw_mem.conversations.aml_users import AmlUsers
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.files.index import FileIndex
    from mateclaw_mem.index.messages.index import MessageIndex
    from mateclaw_mem.index.search import SearchService
    from mateclaw_mem.llm.client import ModelClient
    from mateclaw_mem.memory.context.assembly import ContextService
    from mateclaw_mem.memory.contradictions.service import ContradictionService
    from mateclaw_mem.memory.extraction.service import ExtractionService
    from mateclaw_mem.memory.learning.lineage import HarnessLineage
    from mateclaw_mem.memory.learning.service import LearningService
    from mateclaw_mem.memory.proxy.service import ChatProxy
    from mateclaw_mem.memory.structured.consolidation import StructuredConsolidation
    from mateclaw_mem.memory.structured.entries import StructuredMemory
    from mateclaw_mem.providers.registry import ProviderRegistry
    from mateclaw_mem.runtime.model_probe import ModelProbe
    from mateclaw_mem.runtime.scheduler import Scheduler
    from mateclaw_mem.runtime.watcher import Watcher
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.file_commands import FileCommands
    from mateclaw_mem.workspace.store import WorkspaceStore
    from mateclaw_mem.workspace.tools import WorkspaceTools
    from mateclaw_mem.workspace.transfer import Transfer

logger = logging.getLogger("mateclaw_mem.services")
T = TypeVar("T")

# Dependencies before dependants, so each builder finds what it needs already built; the services
# with listeners (store, file_index, lineage) come before anything that writes through them.
BUILD_ORDER = (
    "api_key", "store", "log", "model", "embeddings", "model_probe", "tools", "transfer", "file_commands", "file_index",
    "facts",
    "contradictions", "search", "message_index", "aml", "aml_users", "forget", "lineage", "learning", "structured",
    "providers",
    "context", "structured_consolidation", "dreaming", "soul", "morning_card", "extraction", "chat_proxy", "watcher",
    "scheduler", "backfill",
)
# Workers first (they resume persisted work), then the sources of new work; stopped in reverse.
START_ORDER = ("WAL checkpoints", "extraction workers", "AML fact worker", "file watcher", "scheduler",
               "embeddings backfill")


class _service(Generic[T]):  # lower case: a decorator, like the cached_property it replaces
    """A service attribute: built once, by `Services.build()` or on a CLI command's first use."""

    def __init__(self, build: Callable[[Services], T]) -> None:
        self._build = build
        self.name = build.__name__
        self.__doc__ = build.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _service[T]: ...
    @overload
    def __get__(self, obj: Services, objtype: type | None = None) -> T: ...
    def __get__(self, obj: Services | None, objtype: type | None = None) -> T | _service[T]:
        if obj is None:
            return self
        try:
            return obj._built[self.name]  # type: ignore[no-any-return]
        except KeyError:
            return obj._build_one(self.name, self._build)


class Services:
    def __init__(self, settings: Settings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock(resolve_timezone(settings.timezone))
        self._closers: list[Any] = []
        self._reporters: list[tuple[str, Any]] = []
        self._built: dict[str, Any] = {}
        self._sealed = False  # set by build(): from then on nothing is built lazily
        # Only before build() (CLI commands, tests): the one thread that can then race a first use
        # is a provider prefetch worker asking for `search`, and it holds no lock of ours when it
        # asks, so waiting here cannot invert an order. The daemon never takes it after build().
        self._build_lock = threading.RLock()
        self._running: list[tuple[str, Any]] = []  # background parts started by start(), in order
        # runtime/heal.py: whether this process checked its databases before opening one; what it set aside.
        self.heal_checked = False
        self.set_aside_now: list[Any] = []
        self.journal_checked = False  # runtime/recovery.py: interrupted operations finished at start
        self.add_status("index", lambda: _index_wiring().index_status(self))
        # Cheap to register: nothing is built until `status` calls it.
        self.add_status("prompt_budget", lambda: self.context.budget_report())
        self.add_status("dreaming", lambda: self.dreaming.report())
        self.add_status("extraction", self._extraction_status)
        self.add_status("providers", lambda: self.providers.status())
        self.add_status("redaction", lambda: _index_wiring().redaction_status(self))
        # Hand saves that met a machine write at its final step (each kept: re-planned on, or in history).
        self.add_status("hand_edit_conflicts", lambda: self.store.conflict_report())
        self.add_status("aml", self._aml_status)

    @property
    def mode(self) -> str:
        """"model" when a model is configured, else "rules" (explicit, never a silent fallback)."""
        return "model" if self.settings.model.configured else "rules"

    @_service
    def store(self) -> WorkspaceStore:
        from mateclaw_mem.workspace.store import WorkspaceStore

        store = WorkspaceStore.from_settings(self.settings, self.clock)
        # Every write refreshes the search index once one exists (CLI writes included).
        store.subscribe(lambda event: _index_wiring().on_store_write(self, event))
        return store

    @_service
    def tools(self) -> WorkspaceTools:
        from mateclaw_mem.workspace.tools import WorkspaceTools

        return WorkspaceTools(self.store)

    @_service
    def transfer(self) -> Transfer:
        """export/import of an agent's files; every import write goes through `store` (actor "import")."""
        from mateclaw_mem.memory.facts.snapshot import FactEvents
        from mateclaw_mem.workspace.snapshot_rules import policy_from
        from mateclaw_mem.workspace.transfer import Transfer

        memory = self.settings.mate.memory
        sidecars = [FactEvents(self.facts.db)] if "facts" in memory.snapshot_extras else []
        return Transfer(self.store, policy=policy_from(memory.snapshot_vault_import, memory.snapshot_extras),
                        sidecars=sidecars)

    @_service
    def file_commands(self) -> FileCommands:
        """view/create/str_replace/insert/delete/rename over `/memories/...` (MCP's file-memory set)."""
        from mateclaw_mem.workspace.file_commands import FileCommands

        return FileCommands(self.store, self.tools)

    @_service
    def log(self) -> ConversationLog:
        from mateclaw_mem.conversations.log import ConversationLog

        log = ConversationLog(self.settings.log_db)
        self.on_close(log)
        return log

    @_service
    def message_index(self) -> MessageIndex:
        return _index_wiring().build_message_index(self)

    @_service
    def aml(self) -> AmlService:
        facts = None
        if self.model is not None:  # model mode: source-bound facts beside raw messages
            from mateclaw_mem.conversations.facts import FactExtractor, FactStore

            store = FactStore(self.settings.log_db)
            self.on_close(store)
            facts = FactExtractor(store, self.log, self.message_index, self.model, self.clock)
            self.on_close(facts)
        from mateclaw_mem.conversations.aml_images import ImageSettings
        from mateclaw_mem.runtime.aml_agent import AmlOnFirstUse  # the agent's folder: made by the first Add

        aml = self.settings.aml
        return AmlOnFirstUse(self.log, self.message_index, self.clock, agent=self.settings.aml_agent, facts=facts,
                             ensure=self.store.ensure_agent, reranker=self._reranker(),
                             neighbours=self.settings.aml.neighbours, neighbour_chars=self.settings.aml.neighbour_chars,
                             images=ImageSettings(aml.images == "keep", aml.image_max_bytes))

    def _reranker(self) -> Any:
        """`aml.rerank` (llm/rerank.py), None while its url is empty."""
        rerank = self.settings.aml.rerank
        if not rerank.url:
            return None
        from mateclaw_mem.llm.rerank import Reranker
        from mateclaw_mem.llm.usage import UsageLog

        usage = self.model.usage if self.model is not None else None
        if usage is None:  # rules mode: the reranker's calls and failures still go to the usage log
            usage = UsageLog(self.settings.log_db)
            self.on_close(usage)
        key = os.environ.get(rerank.api_key_env) if rerank.api_key_env else None
        reranker = Reranker(rerank, usage, api_key=key)
        self.on_close(reranker)
        return reranker

    @_service
    def aml_users(self) -> AmlUsers:
        """A person's Add/Search data deleted on request or at the end of `aml.retention-days`."""
        from mateclaw_mem.conversations.aml_users import AmlUsers

        return AmlUsers(self.aml, self.clock, file_index=self.file_index,
                        retention_days=self.settings.aml.retention_days)

    @_service
    def lineage(self) -> HarnessLineage:
        """Harness lineage; subscribes to the store when built (`build()` builds it before any writer runs)."""
        from mateclaw_mem.memory.learning.lineage import HarnessLineage

        lineage = HarnessLineage(self.store, self.settings.state_db, self.clock)
        self.store.subscribe(lineage.on_write)
        self.on_close(lineage)
        return lineage

    @_service
    def learning(self) -> LearningService:
        from mateclaw_mem.memory.learning.service import LearningService
        from mateclaw_mem.memory.learning.task_runs import TaskRunLog

        service = LearningService(
            self.store, TaskRunLog(self.settings.log_db), self.clock, lineage=self.lineage
        )
        self.on_close(service)
        return service

    @_service
    def file_index(self) -> FileIndex:
        return _index_wiring().build_file_index(self)

    facts = _service(lambda s: _lifecycle().build_facts(s.settings, s.store, s.clock, file_index=lambda: s.file_index,
                                                        on_close=s.on_close))

    @_service
    def contradictions(self) -> ContradictionService:
        return _lifecycle().build_contradictions(
            self.settings, self.facts, self.store, self.clock, model=lambda: self.model,
            forget=lambda: getattr(self, "forget", None), on_close=self.on_close)

    forget = _service(lambda s: _holders().build_forget(  # with every holder of a person's words
        s.settings, s.store, s.log, s.clock, file_index=s.file_index, message_index=s.message_index, facts=s.facts,
        providers=lambda: s.providers, on_close=s.on_close))

    @_service
    def search(self) -> SearchService:
        return _index_wiring().build_search(self)

    embeddings = _service(lambda s: _index_wiring().build_embedder(s))  # None without model.embedding-model
    backfill = _service(lambda s: _index_wiring().build_backfill(s))  # vectors for what has none, in the background

    @_service
    def watcher(self) -> Watcher:
        """Built here, not started: `start()` starts it."""
        watcher = _index_wiring().build_watcher(self)
        # Hand edits of AGENTS.md / SOUL.md become harness versions (lineage built on first change).
        watcher.subscribe(lambda *change: self.lineage.on_file_changed(*change))
        return watcher

    @_service
    def model(self) -> ModelClient | None:
        """The one model client (and usage log) every step shares: extraction, window summaries,
        dreaming, structured consolidation, AML facts, search embeddings. None in rules mode.
        Nothing else builds one, so every call the daemon makes to the model is in the usage log."""
        if not self.settings.model.configured:
            return None
        from mateclaw_mem.llm.client import ModelClient
        from mateclaw_mem.llm.usage import UsageLog

        usage = UsageLog(self.settings.log_db)
        self.on_close(usage)
        client = ModelClient.from_settings(self.settings, usage=usage)
        self.on_close(client)
        return client

    @_service
    def model_probe(self) -> ModelProbe | None:
        """Whether the model answers (runtime/model_probe.py). Building it calls nothing: the daemon
        starts one probe in the background once its API listens. None in rules mode."""
        if self.model is None:
            return None
        from mateclaw_mem.runtime.model_probe import ModelProbe

        probe = ModelProbe(self.settings, self.model.usage)
        self.on_close(probe)
        return probe

    @_service
    def structured(self) -> StructuredMemory:
        from mateclaw_mem.memory.structured.entries import StructuredMemory

        memory = self.settings.mate.memory
        # Relevance of project/reference entries: in-process token overlap over exactly those entries
        # (~1 ms). `memory.structured.search_relevance(lambda: self.search)` plugs in the search index
        # instead; see scripts/bench/context_build.py for what each costs per prompt.
        return StructuredMemory(self.store, self.clock, max_chars=memory.system_block_max_chars,
                                max_entries_per_type=memory.system_block_max_entries_per_type)

    @_service
    def context(self) -> ContextService:
        from mateclaw_mem.memory.context.assembly import ContextService
        from mateclaw_mem.memory.context.turns import TurnLog
        from mateclaw_mem.memory.context.window import Summarizer, WindowDefense

        window = self.settings.mate.agent.conversation.window
        summarizer = Summarizer(self.clock, client=self.model, max_tokens=window.summary_max_tokens)
        self.on_close(summarizer)  # its background worker: a model call still running must not outlive us
        self.on_close(turns := TurnLog(self.settings.log_db, self.clock))  # what each build injected
        return ContextService(self.store, self.structured, WindowDefense(window, summarizer), log=self.log,
                              providers=self.providers, facts=self.facts, turns=turns,
                              recall_max_chars=self.settings.mate.memory.provider_prefetch_max_chars,
                              prompt_file_max_chars=self.settings.mate.memory.prompt_file_max_chars,
                              card_pointer=(lambda a, o: self.morning_card.card_pointer(a, o))
                              if self.settings.mate.memory.dream.morning_card_pointer else None)

    @_service
    def chat_proxy(self) -> ChatProxy | None:
        """Memory in front of the user's own model (`proxy.upstream`); None while that is not set."""
        from mateclaw_mem.llm.upstream import Upstream
        from mateclaw_mem.memory.proxy.service import ChatProxy

        upstream = self.settings.proxy.upstream
        if not upstream.base_url:
            return None
        tools = None
        if self.settings.proxy.tools:
            from mateclaw_mem.memory.proxy.tools import ToolRunner

            tools = ToolRunner(self.structured.remember, self.search.search, self.forget.forget)
        proxy = ChatProxy(self.context, self.extraction, self.log, default_model=upstream.model, tools=tools,
                          max_tool_rounds=self.settings.proxy.max_tool_rounds)
        proxy.upstream = Upstream(upstream)
        self.add_status("chat_proxy", lambda: {"upstream": upstream.base_url, **proxy.stats.as_dict()})
        return proxy

    # Memory providers prefetched into a prompt (deadlines, budget, circuit breakers), as configured in
    # `mate.memory.providers`; cheap to build: no thread and no index until the first prefetch.
    providers: _service[ProviderRegistry] = _service(lambda s: _providers().build_registry(
        s.settings, s.clock, search=lambda: s.search, messages=lambda: s.message_index, log=lambda: s.log,
        on_close=s.on_close))

    @_service
    def structured_consolidation(self) -> StructuredConsolidation:
        from mateclaw_mem.memory.structured.consolidation import StructuredConsolidation

        memory = self.settings.mate.memory
        svc = StructuredConsolidation(
            self.store, self.clock, state_db=self.settings.state_db,
            min_entries=memory.structured_consolidation_min_entries,
            max_owners_per_run=memory.structured_consolidation_max_owners_per_run, client=self.model,
        )
        self.on_close(svc)
        return svc

    dreaming = _service(lambda s: _lifecycle().build_dreaming(  # nightly/manual (memory/dreaming/service.py)
        s.settings, s.store, s.clock, model=lambda: s.model, search=lambda: s.search, forget=s.forget,
        contradictions=lambda: s.contradictions, on_close=s.on_close))
    soul = _service(lambda s: _lifecycle().build_soul(s.settings, s.store, s.clock, facts=lambda: s.facts,
                                                      model=lambda: s.model, on_close=s.on_close))
    morning_card = _service(lambda s: _lifecycle().build_morning_card(
        s.dreaming.runs, s.clock, facts=lambda: s.facts, soul=lambda: s.soul, forget=lambda: s.forget))

    @_service
    def extraction(self) -> ExtractionService:
        """Post-chat extraction. Building it starts nothing: `start()` starts its workers and timers
        (and so resumes persisted pending work) once everything a run writes through exists."""
        from mateclaw_mem.memory.extraction.service import ExtractionService

        # One model client (and usage log) for every step; structured items go through `structured`.
        svc = ExtractionService(self.settings, self.store, self.log, clock=self.clock, model=self.model,
                                remember=lambda *a, **k: self.structured.remember(*a, **k), forget=self.forget,
                                on_turn=lambda *turn: self.providers.sync_turn(*turn),
                                sources=lambda *a: self.facts.record_sources(*a))
        self.on_close(svc)
        return svc

    @_service
    def scheduler(self) -> Scheduler:
        """Built here, not started: `start()` starts it, `stop()` stops it."""
        from mateclaw_mem.runtime.scheduler import Scheduler

        sched = Scheduler(self)
        self.on_close(sched)
        return sched

    @_service
    def api_key(self) -> str | None:
        """The HTTP API key from the environment variable the settings name; None = open.

        Read once; never logged or rendered (not even by repr)."""
        return os.environ.get(self.settings.server.api_key_env) or None

    def _aml_status(self) -> dict[str, Any]:
        """Add/Search's options: the reranker (with its counts once built here), windows, retention."""
        aml = self.settings.aml
        reranker = self.aml.reranker if self.built("aml") else None
        rerank: Any = reranker.status() if reranker is not None else (
            {"url": aml.rerank.url, "kind": aml.rerank.kind} if aml.rerank.url else "off")
        return {"rerank": rerank, "neighbours": aml.neighbours or "off", "images": aml.images,
                "retention_days": aml.retention_days or "off"}

    def _extraction_status(self) -> dict[str, Any]:
        """Extraction runs, buckets and model usage. Safe from a `status` command: building the
        service starts no work of its own (only `start()` does)."""
        return self.extraction.status()

    # -- lifecycle -------------------------------------------------------------------------------

    def built(self, name: str) -> bool:
        """Whether service `name` exists yet, without building it (status and health report on an
        index only when one is open)."""
        if not isinstance(getattr(type(self), name, None), _service):
            raise AttributeError(f"Services has no service named {name!r}")
        return name in self._built

    def _build_one(self, name: str, build: Callable[[Services], T]) -> T:
        if self._sealed:
            raise RuntimeError(f"services.{name} was not built by build(): add it to BUILD_ORDER")
        with self._build_lock:
            if not self.heal_checked and name not in _NO_DATABASE:  # a damaged file set aside before any opens it
                _heal().before_first_open(self)
                _recovery().at_start(self)
            if name not in self._built:  # a waiting prefetch worker finds it built
                self._built[name] = build(self)
            return self._built[name]  # type: ignore[no-any-return]

    def build(self) -> None:
        """Build every service, in BUILD_ORDER, on this thread; starts no thread."""
        for name in BUILD_ORDER:
            getattr(self, name)
        self._sealed = True

    def seed_agents(self) -> dict[str, list[str]]:
        """Create the agent the daemon itself serves: the default agent (the MCP `/mcp` endpoint, the
        CLI's default). The AML agent is made by the first `/v1/aml/add` (runtime/aml_agent.py); every
        other agent only by `init` or `POST /api/v1/agents`. Returns the files seeded, per agent."""
        return {self.settings.default_agent: self.store.ensure_agent(self.settings.default_agent)}

    def _background(self) -> list[tuple[str, Any]]:
        from mateclaw_mem.db import WalCheckpoints  # here: `cat` and other commands never load sqlite3

        parts = {"extraction workers": self.extraction, "file watcher": self.watcher, "scheduler": self.scheduler,
                 "WAL checkpoints": WalCheckpoints(members=(self.log, self.message_index))}  # the AML Add's files
        if self.aml.facts is not None:  # model mode only
            parts["AML fact worker"] = self.aml
        if self.backfill is not None:  # embeddings configured
            parts["embeddings backfill"] = self.backfill
        return [(label, parts[label]) for label in START_ORDER if label in parts]

    def start(self) -> None:
        """Build everything, then start the background work in START_ORDER. The daemon calls
        `build()` before it opens the HTTP API (a request never finds a service half-built) and
        this once the API listens (the catch-up work does not slow the API's start down)."""
        if self._running:
            return
        self.build()
        for label, part in self._background():
            part.start()
            self._running.append((label, part))
            logger.info("%s started", label)

    def stop(self) -> None:
        """Stop the background work, newest first: the scheduler and the watcher (no new work), then
        the workers (running extractions finish; queued ones stay pending in state.db)."""
        while self._running:
            label, part = self._running.pop()
            try:
                part.stop()
                logger.info("%s stopped", label)
            except Exception:
                logger.exception("error while stopping the %s", label)

    def running_parts(self) -> list[str]:
        """Labels (START_ORDER) of the background parts `start()` started and `stop()` has not stopped."""
        return [label for label, _ in self._running]

    def status_reporters(self) -> list[tuple[str, Any]]:
        """(name, callable) pairs for `status`; services add theirs with `add_status`."""
        return list(self._reporters)

    def add_status(self, name: str, reporter: Any) -> None:
        self._reporters.append((name, reporter))

    def on_close(self, closer: Any) -> None:
        """Register something with a close()/shutdown() to be called by close(), newest first."""
        self._closers.append(closer)

    def close(self) -> None:
        self.stop()
        while self._closers:
            closer = self._closers.pop()
            for name in ("shutdown", "close", "stop"):
                fn = getattr(closer, name, None)
                if callable(fn):
                    fn()
                    break


# Services that never open SQLite: a command using only these (`cat`, `ls`) checks no database.
_NO_DATABASE = frozenset({"store", "api_key", "tools", "file_commands"})


def _heal() -> Any:
    from mateclaw_mem.runtime import heal

    return heal


def _recovery() -> Any:
    from mateclaw_mem.runtime import recovery

    return recovery


def _index_wiring() -> Any:
    from mateclaw_mem.runtime import index_wiring

    return index_wiring


def _providers() -> Any:
    from mateclaw_mem.runtime import provider_wiring

    return provider_wiring


def _lifecycle() -> Any:
    from mateclaw_mem.runtime import lifecycle_wiring

    return lifecycle_wiring


def _holders() -> Any:
    from mateclaw_mem.runtime import holders

    return holders
