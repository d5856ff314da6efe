"""Learning memory as MCP tools.

Plain functions `(services, args) -> JSON-able dict` (args as an MCP client sends them; "agent"
defaults to the configured default agent), plus `register(server, services, agent)`, which
`mcp/server.py` calls to add them as typed tools bound to one agent. Validation and every rule
live in `memory/learning/service.py` and `memory/learning/lineage.py`; errors are their `MateclawError`s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from mateclaw_mem.mcp.common import ADD, CHANGE, READ, SET, call
from mateclaw_mem.memory.learning.checks import MAX_SCORE, MIN_SCORE

if TYPE_CHECKING:
    from collections.abc import Callable

    from mateclaw_mem.mcp.arguments import ToolSet
    from mateclaw_mem.runtime.services import Services

ACTOR = "mcp"


def _agent(services: Services, args: dict[str, Any]) -> str:
    return args.get("agent") or services.settings.default_agent


def learning_memory(services: Services, args: dict[str, Any]) -> dict[str, Any]:
    return services.learning.memory(_agent(services, args)).to_dict()


def update_learning_memory(services: Services, args: dict[str, Any]) -> dict[str, Any]:
    return services.learning.update_memory(
        _agent(services, args),
        stats=args.get("stats"),
        strategies=args.get("strategies"),
        add_strategy=args.get("add_strategy"),
        remove_strategy=args.get("remove_strategy"),
        categories=args.get("categories"),
        actor=ACTOR,
    ).to_dict()


def list_task_memories(services: Services, args: dict[str, Any]) -> dict[str, Any]:
    agent = _agent(services, args)
    return {"agent": agent, "tasks": [t.to_dict() for t in services.learning.list_tasks(agent)]}


def task_memory(services: Services, args: dict[str, Any]) -> dict[str, Any]:
    return services.learning.task_memory(_agent(services, args), args["task"]).to_dict()


def update_task_memory(services: Services, args: dict[str, Any]) -> dict[str, Any]:
    return services.learning.update_task(
        _agent(services, args),
        args["task"],
        notes=args.get("notes"),
        strategies=args.get("strategies"),
        add_strategy=args.get("add_strategy"),
        remove_strategy=args.get("remove_strategy"),
        actor=ACTOR,
    ).to_dict()


def record_task_result(services: Services, args: dict[str, Any]) -> dict[str, Any]:
    return services.learning.record_result(
        _agent(services, args),
        args["task"],
        args["score"],
        args.get("breakdown"),
        completed=args.get("completed", True),
        memoryless=args.get("memoryless"),
        run_id=args.get("run_id"),
        actor=ACTOR,
    ).to_dict()


def task_runs(services: Services, args: dict[str, Any]) -> dict[str, Any]:
    agent = _agent(services, args)
    runs = services.learning.run_list(agent, args.get("task"), limit=int(args.get("limit", 100)))
    return {"agent": agent, "runs": [r.to_dict() for r in runs]}


def reflect(services: Services, args: dict[str, Any]) -> dict[str, Any]:
    return services.learning.reflect(
        _agent(services, args),
        args.get("task"),
        args["lesson"],
        run_id=args.get("run_id"),
        memoryless=bool(args.get("memoryless", False)),
        actor=ACTOR,
    ).to_dict()


def enter_task(services: Services, args: dict[str, Any]) -> dict[str, Any]:
    return services.learning.enter(
        _agent(services, args), args["task"], memoryless=bool(args.get("memoryless", False))
    ).to_dict()


def harness_lineage(services: Services, args: dict[str, Any]) -> dict[str, Any]:
    return services.lineage.versions(_agent(services, args))


def label_harness_version(services: Services, args: dict[str, Any]) -> dict[str, Any]:
    return services.lineage.label(_agent(services, args), args.get("hash"), args["label"])


# name -> (function, read-only?, what it does). Read-only tools change no file (enter logs a run).
TOOLS: dict[str, tuple[Any, bool, str]] = {
    "learning_memory": (learning_memory, True, "The agent's learning memory: stats, strategies, categories, "
                        "reflections."),
    "update_learning_memory": (update_learning_memory, False, "Change stats, strategies or category notes."),
    "list_task_memories": (list_task_memories, True, "Every task the agent has memory or runs of."),
    "task_memory": (task_memory, True, "One task's memory: attempts, best, average, trend, notes, strategies."),
    "update_task_memory": (update_task_memory, False, "Change a task's notes or strategies."),
    "record_task_result": (record_task_result, False, "Record a run's score (memoryless runs leave memory alone)."),
    "task_runs": (task_runs, True, "Runs of the agent (of one task), newest first, memoryless flagged."),
    "reflect": (reflect, False, "Store a lesson after a task (refused for memoryless runs)."),
    "enter_task": (enter_task, False, "Start a run of a task: returns its TASK.md context."),
    "harness_lineage": (harness_lineage, True, "Every version of the system prompt, by SHA-256."),
    "label_harness_version": (label_harness_version, False, "Label a harness version (default: the current)."),
}


# Module level, not inside register(): with postponed annotations the MCP SDK evaluates the tools'
# annotations in the module's globals, where a local alias is not found.
Task = Annotated[str, Field(description="task slug, e.g. sum-two (lowercase letters, digits, . _ -)")]
Strategies = Annotated[list[str] | None, Field(description="replace the whole list (at most 10)")]
Remove = Annotated[int | str | None, Field(description="strategy to remove: 1-based number or exact text")]


def register(server: ToolSet, services: Services, agent: Callable[[], str]) -> None:
    """Add the learning tools to `server`; `agent()` names the agent a call is for."""
    def run(name: str, **args: Any) -> dict[str, Any]:
        return call(lambda: TOOLS[name][0](services, {"agent": agent(), **args}))

    def learning_memory() -> dict[str, Any]:
        """The agent's global learning memory: stats summary, strategies, category notes, reflections."""
        return run("learning_memory")

    def update_learning_memory(
        stats: Annotated[str | None, Field(description="the stats summary (free text)")] = None,
        strategies: Strategies = None,
        add_strategy: str | None = None,
        remove_strategy: Remove = None,
        categories: Annotated[dict[str, str | None] | None,
                              Field(description="category -> notes; null or '' removes it")] = None,
    ) -> dict[str, Any]:
        """Change the global learning memory's stats, strategies (at most 10) or category notes."""
        return run("update_learning_memory", stats=stats, strategies=strategies, add_strategy=add_strategy,
                   remove_strategy=remove_strategy, categories=categories)

    def list_task_memories() -> dict[str, Any]:
        """Every task with memory or runs: attempts, best and average score, trend, memoryless runs."""
        return run("list_task_memories")

    def task_memory(task: Task) -> dict[str, Any]:
        """One task's memory: attempt_count, best/avg score, score_trend, recent scores, notes, strategies."""
        return run("task_memory", task=task)

    def update_task_memory(
        task: Task,
        notes: Annotated[str | None, Field(description="at most 2,000 characters")] = None,
        strategies: Strategies = None,
        add_strategy: str | None = None,
        remove_strategy: Remove = None,
    ) -> dict[str, Any]:
        """Change a task's notes or strategies."""
        return run("update_task_memory", task=task, notes=notes, strategies=strategies, add_strategy=add_strategy,
                   remove_strategy=remove_strategy)

    def record_task_result(
        task: Task,
        score: Annotated[float, Field(ge=MIN_SCORE, le=MAX_SCORE, description="0-1000, the seed's scale")],
        breakdown: Annotated[dict[str, float] | None,
                             Field(description="score parts, name -> number (each 0-1000)")] = None,
        completed: bool = True,
        memoryless: bool | None = None,
        run_id: Annotated[str | None, Field(description="the run_id enter_task returned; default: the "
                                                        "task's one open run, else a new run")] = None,
    ) -> dict[str, Any]:
        """Record a run's score (0-1000). Updates the task memory unless the run is memoryless."""
        return run("record_task_result", task=task, score=score, breakdown=breakdown, completed=completed,
                   memoryless=memoryless, run_id=run_id)

    def task_runs(task: Task | None = None, limit: Annotated[int, Field(ge=1, le=1000)] = 100) -> dict[str, Any]:
        """Runs (of one task), newest first, each flagged memoryless or not."""
        return run("task_runs", task=task, limit=limit)

    def reflect(
        task: Task,
        lesson: Annotated[str, Field(description="what to do differently next time (at most 1,000 characters)")],
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """Store a lesson after a task. Refused for memoryless runs; past 20, the oldest are archived."""
        return run("reflect", task=task, lesson=lesson, run_id=run_id)

    def enter_task(task: Task, memoryless: bool = False) -> dict[str, Any]:
        """Start a run: returns run_id and the TASK.md context (nothing learned is included if memoryless)."""
        return run("enter_task", task=task, memoryless=memoryless)

    def harness_lineage() -> dict[str, Any]:
        """Every version of the system prompt (AGENTS.md + SOUL.md) by SHA-256, and the current hash."""
        return run("harness_lineage")

    def label_harness_version(
        label: Annotated[str, Field(description="empty clears it")],
        hash: Annotated[str | None, Field(description="full hash or unique prefix; default: current")] = None,
    ) -> dict[str, Any]:
        """Label a harness version."""
        return run("label_harness_version", label=label, hash=hash)

    server.add_tool(learning_memory, annotations=READ)
    server.add_tool(update_learning_memory, annotations=CHANGE)
    server.add_tool(list_task_memories, annotations=READ)
    server.add_tool(task_memory, annotations=READ)
    server.add_tool(update_task_memory, annotations=CHANGE)
    server.add_tool(record_task_result, annotations=ADD)
    server.add_tool(task_runs, annotations=READ)
    server.add_tool(reflect, annotations=ADD)
    server.add_tool(enter_task, annotations=ADD)  # logs a run: not read-only
    server.add_tool(harness_lineage, annotations=READ)  # may register the current version: bookkeeping only
    server.add_tool(label_harness_version, annotations=SET)
