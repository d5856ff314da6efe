"""Learning memory: what an agent that attempts tasks again and again learns from its own history.

`LearningService` is what the faces call; it composes the parts, each in its own module:
- memory/learning/global_memory.py — `learning/LEARNING.md` (stats summary, strategies, category notes,
  reflections; the newest 20 reflections stay, older ones MOVE to
  `learning/archive/reflections-YYYY-MM.md`, never lost);
- memory/learning/tasks.py — `tasks/<slug>.md` (attempt_count, best_score, avg_score, score_trend,
  best_score_breakdown, recent_scores; notes and strategies) and the results that feed it;
- memory/learning/task_context.py — the TASK.md-style context `enter` returns;
- memory/learning/checks.py — the limits (strategies at most 10, refused past it; text sizes) and
  input checks; memory/learning/views.py — the views the faces render;
- memory/learning/task_runs.py — the run log in `log.db` (entered, memoryless or not, scored, completed);
- markdown/learning.py — the files as text (numbers in frontmatter, words in the body).

Memoryless runs: `enter(..., memoryless=True)` reads and injects none of the learning memory, the
task memory or the run history; a reflection for such a run is refused; its result goes to the run
log flagged memoryless and does NOT change the task memory (so a memoryless baseline neither feeds
nor is fed by what the agent learned). Listings and analytics show memoryless runs separately.

Every change to a file is one `WorkspaceStore.update` (read-modify-write under the file's lock),
so concurrent results never lose an attempt. A machine writer refuses to change a section a person
pinned (`<!-- pin -->`) instead of letting the store silently keep the pin.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import InvalidInputError, NotFoundError
from mateclaw_mem.memory.learning.checks import (
    LIMITS,
    MAX_BREAKDOWN_KEYS,
    MAX_CATEGORY_CHARS,
    MAX_CATEGORY_NAME,
    MAX_NOTES_CHARS,
    MAX_REFLECTION_CHARS,
    MAX_REFLECTIONS,
    MAX_STATS_CHARS,
    MAX_STRATEGIES,
    MAX_STRATEGY_CHARS,
    check_slug,
    require_agent,
)
from mateclaw_mem.memory.learning.global_memory import ARCHIVE_REL, LEARNING_REL, GlobalLearning
from mateclaw_mem.memory.learning.task_context import TaskContext, render_context, render_memoryless_context
from mateclaw_mem.memory.learning.tasks import (
    RECENT_SCORES,
    STABLE_WITHIN,
    TASK_DIR,
    TRENDS,
    TaskLearning,
    score_trend,
)
from mateclaw_mem.memory.learning.views import (
    LearningMemory,
    ReflectionView,
    ReflectOutcome,
    ResultOutcome,
    TaskMemory,
    TaskSummary,
)

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.memory.learning.lineage import HarnessLineage
    from mateclaw_mem.memory.learning.task_runs import TaskRun, TaskRunLog
    from mateclaw_mem.workspace.store import WorkspaceStore

# Importable from here, as before the split: the faces, tests and benchmarks use these names.
__all__ = [
    "ARCHIVE_REL", "LEARNING_REL", "LIMITS", "MAX_BREAKDOWN_KEYS", "MAX_CATEGORY_CHARS", "MAX_CATEGORY_NAME",
    "MAX_NOTES_CHARS", "MAX_REFLECTIONS", "MAX_REFLECTION_CHARS", "MAX_STATS_CHARS", "MAX_STRATEGIES",
    "MAX_STRATEGY_CHARS", "RECENT_SCORES", "STABLE_WITHIN", "TASK_DIR", "TRENDS", "LearningMemory",
    "LearningService", "ReflectOutcome", "ReflectionView", "ResultOutcome", "TaskContext", "TaskMemory",
    "TaskSummary", "check_slug", "render_context", "score_trend",
]


class LearningService:
    def __init__(
        self, store: WorkspaceStore, runs: TaskRunLog, clock: Clock, *, lineage: HarnessLineage | None = None
    ) -> None:
        self.store = store
        self.runs = runs
        self.clock = clock
        self.lineage = lineage
        self.global_memory = GlobalLearning(store, runs, clock)
        self.tasks = TaskLearning(store, runs, clock, harness=self._harness)

    def close(self) -> None:
        self.runs.close()

    def _harness(self, agent: str) -> str | None:
        return self.lineage.check(agent) if self.lineage is not None else None

    # -- global learning memory (memory/learning/global_memory.py) ----------------------------------------

    def memory(self, agent: str) -> LearningMemory:
        return self.global_memory.memory(agent)

    def update_memory(
        self,
        agent: str,
        *,
        stats: str | None = None,
        strategies: list[str] | None = None,
        add_strategy: str | None = None,
        remove_strategy: int | str | None = None,
        categories: dict[str, str | None] | None = None,
        actor: str,
    ) -> LearningMemory:
        """Change any of the parts in one write. `strategies` replaces the list; `categories` maps a
        name to its notes (None or "" removes the category). Everything is validated first."""
        return self.global_memory.update(agent, stats=stats, strategies=strategies, add_strategy=add_strategy,
                                   remove_strategy=remove_strategy, categories=categories, actor=actor)

    def add_strategy(self, agent: str, text: str, *, task: str | None = None, actor: str) -> Any:
        if task is not None:
            return self.update_task(agent, task, add_strategy=text, actor=actor)
        return self.update_memory(agent, add_strategy=text, actor=actor)

    def remove_strategy(self, agent: str, which: int | str, *, task: str | None = None, actor: str) -> Any:
        if task is not None:
            return self.update_task(agent, task, remove_strategy=which, actor=actor)
        return self.update_memory(agent, remove_strategy=which, actor=actor)

    def set_category(self, agent: str, name: str, notes: str | None, *, actor: str) -> LearningMemory:
        return self.update_memory(agent, categories={name: notes}, actor=actor)

    def reflect(
        self,
        agent: str,
        task: str | None,
        lesson: str,
        *,
        run_id: str | None = None,
        memoryless: bool = False,
        actor: str,
    ) -> ReflectOutcome:
        """Store a lesson, newest first. Refused for a memoryless run. Past 20, the oldest move to
        `learning/archive/reflections-YYYY-MM.md` (written before LEARNING.md drops them)."""
        return self.global_memory.reflect(agent, task, lesson, run_id=run_id, memoryless=memoryless, actor=actor)

    # -- per-task memory (memory/learning/tasks.py) --------------------------------------------------

    def task_memory(self, agent: str, slug: str) -> TaskMemory:
        return self.tasks.task_memory(agent, slug)

    def list_tasks(self, agent: str) -> list[TaskSummary]:
        return self.tasks.list_tasks(agent)

    def update_task(
        self,
        agent: str,
        slug: str,
        *,
        notes: str | None = None,
        strategies: list[str] | None = None,
        add_strategy: str | None = None,
        remove_strategy: int | str | None = None,
        actor: str,
    ) -> TaskMemory:
        """Notes and strategies of a task (the file is created if needed). One write."""
        return self.tasks.update_task(agent, slug, notes=notes, strategies=strategies, add_strategy=add_strategy,
                                      remove_strategy=remove_strategy, actor=actor)

    def record_result(
        self,
        agent: str,
        slug: str,
        score: float,
        breakdown: dict[str, float] | None = None,
        *,
        completed: bool = True,
        memoryless: bool | None = None,
        run_id: str | None = None,
        actor: str,
    ) -> ResultOutcome:
        """Log a run's result and, unless the run is memoryless, update the task memory in one write
        under the file's lock. With `run_id` from `enter`, the run's memoryless flag applies (a
        contradicting `memoryless` is refused) and the run can have only one result."""
        return self.tasks.record_result(agent, slug, score, breakdown, completed=completed, memoryless=memoryless,
                                        run_id=run_id, actor=actor)

    def run_list(self, agent: str, slug: str | None = None, *, limit: int = 100) -> list[TaskRun]:
        return self.tasks.run_list(agent, slug, limit=limit)

    def run(self, agent: str, run_id: str) -> TaskRun:
        """One of the agent's runs; another agent's run is as unknown as a missing one."""
        require_agent(self.store, agent)
        run = self.runs.find(run_id)
        if run is None or run.agent != agent:
            raise NotFoundError(f"agent {agent!r} has no task run {run_id!r} (run ids come from `enter`)")
        return run

    def open_runs(self, agent: str, slug: str | None = None) -> list[TaskRun]:
        """Entered runs without a result, newest first."""
        require_agent(self.store, agent)
        if slug is not None:
            check_slug(slug)
        return self.runs.open_runs(agent, slug)

    # -- entering a task (memory/learning/task_context.py) -------------------------------------------------

    def enter(self, agent: str, slug: str, memoryless: bool = False) -> TaskContext:
        """Open a run and return its TASK.md-style context. Memoryless: nothing learned is read or
        injected; the run is flagged so its result and any reflection are handled accordingly."""
        require_agent(self.store, agent)
        check_slug(slug)
        if not isinstance(memoryless, bool):
            raise InvalidInputError("memoryless must be true or false")
        run_id = uuid.uuid4().hex
        harness = self._harness(agent)
        self.runs.open(run_id, agent, slug, memoryless=memoryless, at=self.clock.now().isoformat(timespec="seconds"),
                       harness_hash=harness)
        if memoryless:
            text = render_memoryless_context(run_id, slug)
            return TaskContext(run_id, agent, slug, True, text, None, None, None, harness)
        memory = self.memory(agent)
        try:
            task_memory: TaskMemory | None = self.task_memory(agent, slug)
        except NotFoundError:
            task_memory = None
        analytics = self.runs.analytics(agent, slug)
        text = render_context(run_id, slug, memory, task_memory, analytics)
        return TaskContext(run_id, agent, slug, False, text, memory, task_memory, analytics, harness)
