"""Services built from one Settings object, in one order, and the background work they own.

Two ways in, one rule: no service is built while another thread may be asking for it.

- The daemon calls `build(names)` for what AML searches read, opens the HTTP API, and calls
  `build()` for the rest, all on its main thread (runtime/daemon.py); a request's thread asking
  for a part between the two waits until everything is built, never builds it. Then `start()`: the
  background parts start in `START_ORDER`, each only after everything it writes through exists.
  After `build()` nothing is built lazily any more: asking for a service missing from
  `BUILD_ORDER` is an error, never a race.
- A CLI command touches only what it needs, built on first use (`mateclaw-mem cat` never opens
  SQLite). Building never starts a thread: workers, timers, the watcher and the scheduler start in
  `start()` only, so a CLI command leaves pending extraction work to the daemon.

Why not `functools.cached_property`: on Python 3.11 it holds a lock while its getter runs. The
daemon's main thread building `watcher` (which needs `file_index`) while a resumed extraction worker
wrote a file whose listener built `file_index` took the locks in reverse order, and a restart with
pending work hung silently (issue 13, point 5). So the rule is the one above - everything built on
one thread before any of ours runs - and `BUILD_ORDER` is simply the parts as `Services` lists them
(derived, not a second list to keep in step): a builder reaches what it reads through the container,
which builds that first, and listeners need no place in the order because runtime/events.py wires
them when their emitter is built (a write finds each listener that exists when it happens).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from mateclaw_mem.clock import Clock, SystemClock, resolve_timezone
from mateclaw_mem.runtime import events
from mateclaw_mem.runtime.build import aml as build_aml
from mateclaw_mem.runtime.build import index as build_index
from mateclaw_mem.runtime.build import lifecycle as build_lifecycle
from mateclaw_mem.runtime.build import model as build_model
from mateclaw_mem.runtime.build import prompt as build_prompt
from mateclaw_mem.runtime.build import providers as build_providers
from mateclaw_mem.runtime.build import schedule as build_schedule
from mateclaw_mem.runtime.build import server as build_server
from mateclaw_mem.runtime.build import workspace as build_workspace

if TYPE_CHECKING:
    from mateclaw_mem.index.messages.index import MessageIndex
    from mateclaw_mem.llm.client import ModelClient
    from mateclaw_mem.memory.dreaming.card import MorningCard
    from mateclaw_mem.memory.facts.service import FactService
    from mateclaw_mem.memory.forget.service import ForgetService
    from mateclaw_mem.providers.registry import ProviderRegistry
    from mateclaw_mem.runtime.watcher import Watcher
    from mateclaw_mem.settings import Settings

logger = logging.getLogger("mateclaw_mem.services")
T = TypeVar("T")

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
            return obj._built[self.name]
        except KeyError:
            return obj._build_one(self.name, self._build)


class Services:
    """The parts, one line each: what each is built from (runtime/build/). `build()` builds them in
    the order they are listed here (BUILD_ORDER); a builder reaches what it reads through this
    container, so that is built first whatever the listing says. Who hears whose writes:
    runtime/events.py, wired as each emitter is built. Where a person's words are kept:
    runtime/holders.py."""

    def __init__(self, settings: Settings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock(resolve_timezone(settings.timezone))
        self._closers: list[Any] = []
        self._reporters: list[tuple[str, Any]] = []
        self._built: dict[str, Any] = {}  # in the order the parts were first built
        self._sealed = False  # set by build(): from then on nothing is built lazily
        # The daemon builds in two goes (build(names), then build() once it listens): meanwhile another
        # thread asking for a part not built yet waits for the whole build (`_build_one`), never builds it.
        self._builder: int | None = None
        self._whole = threading.Event()
        # Only before build() (CLI commands, tests): the one thread that can then race a first use
        # is a provider prefetch worker asking for `search`, and it holds no lock of ours when it
        # asks, so waiting here cannot invert an order. The daemon never takes it after build().
        self._build_lock = threading.RLock()
        self._running: list[tuple[str, Any]] = []  # background parts started by start(), in order
        # runtime/heal.py: whether this process checked its databases before opening one; what it set aside.
        self.heal_checked = False
        self.set_aside_now: list[Any] = []
        self.heal_skipped: frozenset[str] = frozenset()  # (runtime/heal.py: read page by page after the start)
        self.heal_damaged: set[str] = set()  # (... and found damaged then)
        self.journal_checked = False  # runtime/recovery.py: interrupted operations finished at start
        self.add_status("index", lambda: _index_ops().index_status(self))
        # Cheap to register: nothing is built until `status` calls it.
        self.add_status("prompt_budget", lambda: self.context.budget_report())
        self.add_status("dreaming", lambda: self.dreaming.report())
        self.add_status("extraction", self._extraction_status)
        self.add_status("providers", lambda: self.providers.status())
        self.add_status("redaction", lambda: _index_ops().redaction_status(self))
        # Hand saves that met a machine write at its final step (each kept: re-planned on, or in history).
        self.add_status("hand_edit_conflicts", lambda: self.store.conflict_report())
        self.add_status("aml", self._aml_status)

    @property
    def mode(self) -> str:
        """"model" when a model is configured, else "rules" (explicit, never a silent fallback)."""
        return "model" if self.settings.model.configured else "rules"

    def use_model(self) -> ModelClient | None:
        """The model client as every builder takes it (runtime/build/types.ModelProvider): the builder
        decides when to ask, so a part that calls the model now and then is built without it."""
        return self.model

    # -- the parts, in build order (runtime/build/ holds each builder) ----------------------------

    api_key = _service(lambda s: build_server.api_key(s.settings))
    store = _service(lambda s: build_workspace.store(s.settings, s.clock))
    log = _service(lambda s: build_aml.conversation_log(s.settings, on_close=s.on_close))
    model = _service(lambda s: build_model.model(s.settings, on_close=s.on_close))
    embeddings = _service(lambda s: build_index.embedder(s.settings, model=s.use_model, on_close=s.on_close))
    model_probe = _service(lambda s: build_model.model_probe(s.settings, model=s.use_model, on_close=s.on_close))
    tools = _service(lambda s: build_workspace.tools(s.store))
    transfer = _service(lambda s: build_workspace.transfer(s.settings, s.store, facts=lambda: s.facts))
    file_commands = _service(lambda s: build_workspace.file_commands(s.store, s.tools))
    file_index = _service(lambda s: build_index.file_index(s.settings, s.store, s.clock, log=lambda: s.log,
                                                           on_close=s.on_close))
    facts: _service[FactService] = _service(lambda s: build_lifecycle.facts(s.settings, s.store, s.clock,
                                                                          on_close=s.on_close))
    contradictions = _service(lambda s: build_lifecycle.contradictions(
        s.settings, s.facts, s.store, s.clock, model=s.use_model, forget=lambda: s.forget, on_close=s.on_close))
    search = _service(lambda s: build_index.search(
        s.settings, s.clock, s.file_index, s.log, embedder=s.embeddings, messages=lambda: s.message_index,
        watching=lambda: s.built("watcher") and s.watcher.state == "running", on_close=s.on_close))
    message_index: _service[MessageIndex] = _service(lambda s: build_index.message_index(
        s.settings, embedder=s.embeddings, log=lambda: s.log, on_close=s.on_close))
    aml = _service(lambda s: build_aml.aml(s.settings, s.log, s.message_index, s.clock, model=s.use_model,
                                           ensure_agent=s.store.ensure_agent, on_close=s.on_close))
    aml_users = _service(lambda s: build_aml.aml_users(s.settings, s.aml, s.clock, file_index=s.file_index,
                                                       journal=s.store.journal))
    # Forget, with every store that holds a person's words (runtime/holders.py).
    forget: _service[ForgetService] = _service(lambda s: build_lifecycle.forget(
        s.settings, s.store, s.log, s.clock, file_index=s.file_index, message_index=s.message_index, facts=s.facts,
        providers=lambda: s.providers, on_close=s.on_close))
    lineage = _service(lambda s: build_prompt.lineage(s.settings, s.store, s.clock, on_close=s.on_close))
    learning = _service(lambda s: build_prompt.learning(s.settings, s.store, s.clock, lineage=s.lineage,
                                                        on_close=s.on_close))
    structured = _service(lambda s: build_prompt.structured(s.settings, s.store, s.clock))
    # Memory providers prefetched into a prompt (deadlines, budget, circuit breakers), as configured in
    # `mate.memory.providers`; cheap to build: no thread and no index until the first prefetch.
    providers: _service[ProviderRegistry] = _service(lambda s: build_providers.registry(
        s.settings, s.clock, search=lambda: s.search, messages=lambda: s.message_index, log=lambda: s.log,
        on_close=s.on_close))
    context = _service(lambda s: build_prompt.context(
        s.settings, s.store, s.clock, structured=s.structured, log=s.log, providers=s.providers, facts=s.facts,
        model=s.use_model, card_pointer=lambda a, o: s.morning_card.card_pointer(a, o), on_close=s.on_close))
    structured_consolidation = _service(lambda s: build_lifecycle.structured_consolidation(
        s.settings, s.store, s.clock, model=s.use_model, on_close=s.on_close))
    dreaming = _service(lambda s: build_lifecycle.dreaming(  # nightly/manual (memory/dreaming/service.py)
        s.settings, s.store, s.clock, model=s.use_model, search=lambda: s.search, forget=s.forget,
        contradictions=lambda: s.contradictions, on_close=s.on_close))
    soul = _service(lambda s: build_lifecycle.soul(
        s.settings, s.store, s.clock, facts=lambda: s.facts, model=s.use_model, on_close=s.on_close))
    morning_card: _service[MorningCard] = _service(lambda s: build_lifecycle.morning_card(
        s.dreaming.runs, s.clock, facts=lambda: s.facts, soul=lambda: s.soul, forget=lambda: s.forget))
    extraction = _service(lambda s: build_lifecycle.extraction(  # one model client for every step
        s.settings, s.store, s.log, s.clock, model=s.use_model,
        remember=lambda *a, **k: s.structured.remember(*a, **k), forget=s.forget,
        on_turn=lambda *turn: s.providers.sync_turn(*turn), sources=lambda *a: s.facts.record_sources(*a),
        on_close=s.on_close))
    chat_import = _service(lambda s: build_lifecycle.chat_import(
        s.settings, s.log, s.clock, mode=s.mode, store=s.store, extraction=s.extraction, dreaming=s.dreaming,
        on_close=s.on_close))
    chat_proxy = _service(lambda s: build_prompt.chat_proxy(
        s.settings, s.log, context=lambda: s.context, extraction=lambda: s.extraction,
        tools=lambda: (s.structured.remember, s.search.search, s.forget.forget), add_status=s.add_status))
    watcher: _service[Watcher] = _service(lambda s: build_index.watcher(s.settings, s.file_index, s.log,
                                                                        on_close=s.on_close))
    scheduler = _service(lambda s: build_schedule.scheduler(
        s.settings, s.clock,
        build_schedule.jobs(s.settings, s.clock, s.store, dreaming=lambda: s.dreaming,
                            structured=lambda: s.structured_consolidation, facts=lambda: s.facts),
        build_schedule.beats(forget=lambda: s.forget, sweep=lambda: _recovery().sweep(s),
                             aml_users=lambda: s.aml_users),
        on_close=s.on_close))
    backfill = _service(lambda s: build_index.backfill(s.embeddings, search=lambda: s.search,
                                                       messages=lambda: s.message_index))

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
        if self._builder is not None and self._builder != threading.get_ident() and not self._sealed:
            self._whole.wait()
        if self._sealed:
            if name in self._built:  # (built while this thread waited)
                return self._built[name]
            raise RuntimeError(f"services.{name} was not built by build(): add it to BUILD_ORDER")
        with self._build_lock:
            if not self.heal_checked and name not in _NO_DATABASE:  # a damaged file set aside before any opens it
                _heal().before_first_open(self)
                _recovery().at_start(self)
            if name not in self._built:  # a waiting prefetch worker finds it built
                self._built[name] = built = build(self)
                events.wire(self, name, built)  # who hears this part's writes (runtime/events.py)
            return self._built[name]

    def build(self, names: Collection[str] | None = None, *, pause: Callable[[], object] | None = None) -> None:
        """Build every service, in BUILD_ORDER, on this thread; starts no thread. (`_built` then
        holds them in the order each was first reached: a part after everything its builder read.)

        `names`: only these (and what their builders read), now; the rest at the next call, on this
        same thread - the daemon answers AML searches in between (runtime/daemon.py), and another
        thread that asks for a part meanwhile waits until everything is built. `pause()` is called
        before each part (the daemon lets the requests in flight go first)."""
        if self._sealed:
            return
        self._builder = threading.get_ident()
        for name in BUILD_ORDER:
            if names is None or name in names:
                if pause is not None and name not in self._built:
                    pause()
                getattr(self, name)
        if names is None:
            self._sealed = True
            self._whole.set()

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


# The parts in the order they are listed above: what build() walks. Derived, never typed out twice.
BUILD_ORDER: tuple[str, ...] = tuple(name for name, part in vars(Services).items() if isinstance(part, _service))


def _heal() -> Any:
    from mateclaw_mem.runtime import heal

    return heal


def _recovery() -> Any:
    from mateclaw_mem.runtime import recovery

    return recovery


def _index_ops() -> Any:
    from mateclaw_mem.runtime import index_ops

    return index_ops
