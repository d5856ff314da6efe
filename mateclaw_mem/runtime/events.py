"""Who reacts to whose writes: the one table (REACTIONS), applied when an emitter is built.

    emitter     event                                 listener        how it is reached
    store       a memory file written (any actor)     file_index      while an index exists (on disk or built)
    store       a memory file written                 lineage         once built (AGENTS.md / SOUL.md versions)
    store       a memory file written                 soul            once built (the SOUL.md write counter)
    file_index  an ingest changed a file's rows       facts           once built, projection on (building facts
                (store writes, hand edits, reconcile)                 builds the index, so its ingest reaches them)
    facts       a file of (agent, owner) reprojected  contradictions  once built (it checks its own switch)
    watcher     a file changed by hand on disk        lineage         built by the first change

The container (runtime/services.py) calls `wire()` right after it builds any part: each reaction of
which that part is the emitter is subscribed then, with a handler that finds the listener when an
event comes - so a listener is never built just because its emitter was (a CLI write does not build
the SOUL counter), and is never missed once it exists, whichever of the two was built first.
Listeners are called in the table's order; a listener's failure is the emitter's to contain (each
emitter logs and goes on)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mateclaw_mem.settings import Settings


class Parts(Protocol):
    """What the table reads of the container: its settings, whether a part is built, and the part
    (`getattr(parts, name)`, built on first use)."""

    settings: Settings

    def built(self, name: str) -> bool: ...


Reach = Callable[[Parts, str], bool]  # whether the event goes to listener `name` now (getting it may build it)


def once_built(parts: Parts, name: str) -> bool:
    """Events before the listener exists are not its business: it reads the files when it starts."""
    return parts.built(name)


def builds(parts: Parts, name: str) -> bool:
    return True


def index_exists(parts: Parts, name: str) -> bool:
    """A write keeps an existing search index fresh (CLI writes included), never creates one."""
    return parts.built(name) or parts.settings.index_db.exists()


@dataclass(frozen=True)
class Reaction:
    emitter: str  # the part that emits (a Services attribute)
    hook: str  # its method that registers a handler
    event: str  # what happened, in words
    listener: str  # the part that reacts
    react: Callable[..., None]  # (listener, *event)
    reach: Reach
    pull: Callable[[Any], bool] | None = None  # building the listener builds the emitter when this says so


REACTIONS: tuple[Reaction, ...] = (
    Reaction("store", "subscribe", "a memory file written (any actor)", "file_index",
             lambda index, event: index.on_write(event), index_exists),
    Reaction("store", "subscribe", "a memory file written", "lineage",
             lambda lineage, event: lineage.on_write(event), once_built),
    Reaction("store", "subscribe", "a memory file written", "soul",
             lambda soul, event: soul.on_write(event), once_built),
    Reaction("file_index", "subscribe", "an ingest changed a file's rows (writes, hand edits, reconcile)", "facts",
             lambda facts, r: facts.refresh(r.agent, r.owner, r.rel) if facts.enabled else None, once_built,
             pull=lambda facts: bool(facts.enabled)),
    Reaction("facts", "add_listener", "a file of (agent, owner) reprojected", "contradictions",
             lambda inbox, agent, owner: inbox.on_projection(agent, owner), once_built),
    Reaction("watcher", "subscribe", "a file changed by hand on disk", "lineage",
             lambda lineage, *change: lineage.on_file_changed(*change), builds),
)


def wire(parts: Parts, name: str, built: Any) -> None:
    """Subscribe every reaction whose emitter `name` was just built (as `built`); then build the
    emitters a listener `name` pulls."""
    for r in REACTIONS:
        if r.emitter == name:
            getattr(built, r.hook)(_handler(parts, r))
    for r in REACTIONS:
        if r.listener == name and r.pull is not None and r.pull(built):
            getattr(parts, r.emitter)


def _handler(parts: Parts, r: Reaction) -> Callable[..., None]:
    def handle(*event: Any) -> None:
        if r.reach(parts, r.listener):
            r.react(getattr(parts, r.listener), *event)

    return handle
