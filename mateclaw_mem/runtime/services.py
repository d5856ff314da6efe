"""Services built from one Settings object. Everything is created lazily on first use so a CLI
command pays only for what it touches (`mateclaw-mem cat` never opens SQLite)."""

from __future__ import annotations

import os
import threading
from functools import cached_property
from typing import TYPE_CHECKING, Any

from mateclaw_mem.clock import Clock, SystemClock, resolve_timezone

if TYPE_CHECKING:
    from mateclaw_mem.conversations.aml import AmlService
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.file_index import FileIndex
    from mateclaw_mem.index.message_index import MessageIndex
    from mateclaw_mem.index.search import SearchService
    from mateclaw_mem.llm.client import ModelClient
    from mateclaw_mem.memory.context import ContextService
    from mateclaw_mem.memory.dreaming import DreamingService
    from mateclaw_mem.memory.extraction import ExtractionService
    from mateclaw_mem.memory.learning import LearningService
    from mateclaw_mem.memory.lineage import HarnessLineage
    from mateclaw_mem.memory.structured import StructuredMemory
    from mateclaw_mem.memory.structured_consolidation import StructuredConsolidation
    from mateclaw_mem.providers.registry import ProviderRegistry
    from mateclaw_mem.runtime.scheduler import Scheduler
    from mateclaw_mem.runtime.watcher import Watcher
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.file_commands import FileCommands
    from mateclaw_mem.workspace.store import WorkspaceStore
    from mateclaw_mem.workspace.tools import WorkspaceTools
    from mateclaw_mem.workspace.transfer import Transfer


class Services:
    def __init__(self, settings: Settings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock(resolve_timezone(settings.timezone))
        self._closers: list[Any] = []
        self._reporters: list[tuple[str, Any]] = []
        self._lock = threading.RLock()
        self.add_status("index", lambda: _index_wiring().index_status(self))
        # Cheap to register: nothing is built until `status` calls it.
        self.add_status("prompt_budget", lambda: self.context.budget_report())
        self.add_status("dreaming", lambda: self.dreaming.report())
        self.add_status("extraction", self._extraction_status)
        self.add_status("providers", lambda: self.providers.status())

    @property
    def mode(self) -> str:
        """"model" when a model is configured, else "rules" (explicit, never a silent fallback)."""
        return "model" if self.settings.model.configured else "rules"

    @cached_property
    def store(self) -> WorkspaceStore:
        from mateclaw_mem.workspace.store import WorkspaceStore

        store = WorkspaceStore.from_settings(self.settings, self.clock)
        # Every write refreshes the search index once one exists (CLI writes included).
        store.subscribe(lambda event: _index_wiring().on_store_write(self, event))
        return store

    @cached_property
    def tools(self) -> WorkspaceTools:
        from mateclaw_mem.workspace.tools import WorkspaceTools

        return WorkspaceTools(self.store)

    @cached_property
    def transfer(self) -> Transfer:
        """export/import of an agent's files; every import write goes through `store` (actor "import")."""
        from mateclaw_mem.workspace.transfer import Transfer

        return Transfer(self.store)

    @cached_property
    def file_commands(self) -> FileCommands:
        """view/create/str_replace/insert/delete/rename over `/memories/...` (MCP's file-memory set)."""
        from mateclaw_mem.workspace.file_commands import FileCommands

        return FileCommands(self.store, self.tools)

    @cached_property
    def log(self) -> ConversationLog:
        from mateclaw_mem.conversations.log import ConversationLog

        with self._lock:
            log = ConversationLog(self.settings.state_dir / "log.db")
            self.on_close(log)
            return log

    @cached_property
    def message_index(self) -> MessageIndex:
        with self._lock:
            return _index_wiring().build_message_index(self)

    @cached_property
    def aml(self) -> AmlService:
        from mateclaw_mem.conversations.aml import AmlService

        with self._lock:
            facts = None
            if self.model is not None:  # model mode: source-bound facts beside raw messages
                from mateclaw_mem.conversations.facts import FactExtractor, FactStore

                store = FactStore(self.settings.state_dir / "log.db")
                self.on_close(store)
                facts = FactExtractor(store, self.log, self.message_index, self.model, self.clock)
                self.on_close(facts)
            return AmlService(self.log, self.message_index, self.clock, agent=self.settings.aml_agent, facts=facts)

    @cached_property
    def lineage(self) -> HarnessLineage:
        """Harness lineage; subscribes to the store when built (the daemon builds it at start)."""
        from mateclaw_mem.memory.lineage import HarnessLineage

        with self._lock:
            lineage = HarnessLineage(self.store, self.settings.state_dir / "state.db", self.clock)
            self.store.subscribe(lineage.on_write)
            self.on_close(lineage)
            return lineage

    @cached_property
    def learning(self) -> LearningService:
        from mateclaw_mem.memory.learning import LearningService
        from mateclaw_mem.memory.task_runs import TaskRunLog

        with self._lock:
            service = LearningService(
                self.store, TaskRunLog(self.settings.state_dir / "log.db"), self.clock, lineage=self.lineage
            )
            self.on_close(service)
            return service

    @cached_property
    def file_index(self) -> FileIndex:
        with self._lock:
            return _index_wiring().build_file_index(self)

    @cached_property
    def search(self) -> SearchService:
        with self._lock:
            return _index_wiring().build_search(self)

    @cached_property
    def watcher(self) -> Watcher:
        """Built here, not started: the daemon (`serve`) starts it."""
        with self._lock:
            watcher = _index_wiring().build_watcher(self)
            # Hand edits of AGENTS.md / SOUL.md become harness versions (lineage built on first change).
            watcher.subscribe(lambda *change: self.lineage.on_file_changed(*change))
            return watcher

    @cached_property
    def model(self) -> ModelClient | None:
        """The one model client (and usage log) every step shares: extraction, window summaries,
        dreaming, structured consolidation, AML facts. None in rules mode."""
        if not self.settings.model.configured:
            return None
        from mateclaw_mem.llm.client import ModelClient
        from mateclaw_mem.llm.usage import UsageLog

        with self._lock:
            usage = UsageLog(self.settings.state_dir / "log.db")
            self.on_close(usage)
            client = ModelClient.from_settings(self.settings, usage=usage)
            self.on_close(client)
            return client

    @cached_property
    def structured(self) -> StructuredMemory:
        from mateclaw_mem.memory.structured import StructuredMemory

        memory = self.settings.mate.memory
        # Relevance of project/reference entries: in-process token overlap over exactly those entries
        # (~1 ms). `memory.structured.search_relevance(lambda: self.search)` plugs in the search index
        # instead; see scripts/bench/context_build.py for what each costs per prompt.
        return StructuredMemory(self.store, self.clock, max_chars=memory.system_block_max_chars,
                                max_entries_per_type=memory.system_block_max_entries_per_type)

    @cached_property
    def context(self) -> ContextService:
        from mateclaw_mem.memory.context import ContextService
        from mateclaw_mem.memory.window import Summarizer, WindowDefense

        window = self.settings.mate.agent.conversation.window
        summarizer = Summarizer(self.clock, client=self.model, max_tokens=window.summary_max_tokens)
        return ContextService(self.store, self.structured, WindowDefense(window, summarizer), log=self.log,
                              providers=self.providers,
                              recall_max_chars=self.settings.mate.memory.provider_prefetch_max_chars)

    @cached_property
    def providers(self) -> ProviderRegistry:
        """Memory providers prefetched into a prompt (deadlines, budget, circuit breakers). Cheap to
        build: no thread and no index until the first prefetch."""
        from mateclaw_mem.providers.conversation_hits import ConversationHitsProvider
        from mateclaw_mem.providers.registry import ProviderRegistry
        from mateclaw_mem.providers.search_hits import SearchHitsProvider

        with self._lock:
            registry = ProviderRegistry.from_settings(
                [SearchHitsProvider(lambda: self.search), ConversationHitsProvider(lambda: self.search)],
                self.settings.mate.memory, self.clock)
            self.on_close(registry)
            return registry

    @cached_property
    def structured_consolidation(self) -> StructuredConsolidation:
        from mateclaw_mem.memory.structured_consolidation import StructuredConsolidation

        memory = self.settings.mate.memory
        with self._lock:
            svc = StructuredConsolidation(
                self.store, self.clock, state_db=self.settings.state_dir / "state.db",
                min_entries=memory.structured_consolidation_min_entries,
                max_owners_per_run=memory.structured_consolidation_max_owners_per_run, client=self.model,
            )
            self.on_close(svc)
            return svc

    @cached_property
    def dreaming(self) -> DreamingService:
        """Nightly/manual consolidation of daily notes into MEMORY.md (memory/dreaming.py)."""
        from mateclaw_mem.memory.dreaming import DreamingService
        from mateclaw_mem.runtime.scheduler import cron_trigger, next_fire_after

        with self._lock:
            trigger = cron_trigger(self.settings.dreaming.cron, self.clock.tz)
            svc = DreamingService(
                self.settings, self.store, clock=self.clock,
                model_factory=lambda: self.model,
                # Evidence from real searches (log.db `retrievals`): searches people and tools run, and
                # the prompt's search-hits prefetch (keyed on the person's message); never from the
                # always-on files being injected.
                retrieval_hits=lambda agent, owner, since: self.search.retrieval_hits(agent, owner=owner, since=since),
                next_run=lambda: next_fire_after(trigger, self.clock.now()),
            )
            self.on_close(svc)
            return svc

    @cached_property
    def extraction(self) -> ExtractionService:
        """Post-chat extraction; its worker threads and timers start when it is built (the daemon
        builds it at start, so persisted pending work resumes)."""
        from mateclaw_mem.memory.extraction import ExtractionService

        with self._lock:
            # One model client (and usage log) for every step; structured items go through `structured`.
            svc = ExtractionService(self.settings, self.store, self.log, clock=self.clock, model=self.model,
                                    remember=lambda *a, **k: self.structured.remember(*a, **k))
            self.on_close(svc)
            return svc

    @cached_property
    def scheduler(self) -> Scheduler:
        """Built here, not started: the daemon (`serve`) calls start() and stop()."""
        from mateclaw_mem.runtime.scheduler import Scheduler

        with self._lock:
            sched = Scheduler(self)
            self.on_close(sched)
            return sched

    @cached_property
    def api_key(self) -> str | None:
        """The HTTP API key from the environment variable the settings name; None = open.

        Read once; never logged or rendered (not even by repr)."""
        return os.environ.get(self.settings.server.api_key_env) or None

    def _extraction_status(self) -> dict[str, Any]:
        """Extraction runs, buckets and model usage. A `status` command must not start extraction
        work of its own, so outside the daemon it reads through a passive instance."""
        if "extraction" in self.__dict__:
            return self.extraction.status()
        from mateclaw_mem.memory.extraction import ExtractionService

        passive = ExtractionService(self.settings, self.store, self.log, clock=self.clock, model=self.model,
                                    workers=1, timers=False, resume=False)
        try:
            return passive.status()
        finally:
            passive.shutdown(wait=False)

    def status_reporters(self) -> list[tuple[str, Any]]:
        """(name, callable) pairs for `status`; services add theirs with `add_status`."""
        return list(self._reporters)

    def add_status(self, name: str, reporter: Any) -> None:
        self._reporters.append((name, reporter))

    def on_close(self, closer: Any) -> None:
        """Register something with a close()/shutdown() to be called by close(), newest first."""
        self._closers.append(closer)

    def close(self) -> None:
        while self._closers:
            closer = self._closers.pop()
            for name in ("shutdown", "close", "stop"):
                fn = getattr(closer, name, None)
                if callable(fn):
                    fn()
                    break


def _index_wiring() -> Any:
    from mateclaw_mem.runtime import index_wiring

    return index_wiring
