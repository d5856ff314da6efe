"""The TASK.md-style context `enter` puts in front of the agent: its global learning memory, this
task's memory and the analytics over every agent's runs of it (nothing at all for a memoryless run)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mateclaw_mem.markdown import learning as md
from mateclaw_mem.memory.learning.task_runs import Analytics
from mateclaw_mem.memory.learning.views import LearningMemory, TaskMemory


@dataclass(frozen=True)
class TaskContext:
    run_id: str
    agent: str
    task: str
    memoryless: bool
    text: str  # the TASK.md-style context to put in front of the agent
    memory: LearningMemory | None
    task_memory: TaskMemory | None
    analytics: Analytics | None
    harness_hash: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "agent": self.agent,
            "task": self.task,
            "memoryless": self.memoryless,
            "context": self.text,
            "memory": self.memory.to_dict() if self.memory else None,
            "task_memory": self.task_memory.to_dict() if self.task_memory else None,
            "analytics": self.analytics.to_dict() if self.analytics else None,
            "harness_hash": self.harness_hash,
        }


def _fmt(value: float | int | None) -> str:
    return "—" if value is None else f"{value:g}"


def render_context(
    run_id: str, slug: str, memory: LearningMemory, task: TaskMemory | None, analytics: Analytics
) -> str:
    """TASK.md: global learning memory, this task's memory, analytics over every agent's runs of it."""
    out = [f"# TASK.md — {slug}", "",
           f"Run {run_id}. What you have learned so far; use it, and reflect on the run when you finish.", "",
           "## Your learning memory", ""]
    if memory.stats:
        out += ["### Stats", "", memory.stats, ""]
    if memory.strategies:
        out += ["### Strategies", "", *[f"- {s}" for s in memory.strategies], ""]
    if memory.categories:
        out += ["### Category notes", ""]
        for name, notes in memory.categories.items():
            out += [f"#### {name}", "", notes, ""]
    if memory.reflections:
        out += ["### Reflections (newest first)", ""]
        for r in memory.reflections:
            out += [f"- **{md.reflection_heading(r.at, r.task) or 'reflection'}**: "
                    + r.text.replace("\n", "\n  "), ""]
    if not (memory.stats or memory.strategies or memory.categories or memory.reflections):
        out += ["Nothing learned yet.", ""]
    out += ["## This task", ""]
    if task is None or task.attempt_count == 0:
        out += ["No attempts recorded yet.", ""]
    if task is not None:
        if task.attempt_count:
            parts = ", ".join(f"{k} {_fmt(v)}" for k, v in task.best_score_breakdown.items())
            out += [
                f"- Attempts: {task.attempt_count}",
                f"- Best score: {_fmt(task.best_score)}" + (f" ({parts})" if parts else ""),
                f"- Average score: {_fmt(task.avg_score)}",
                f"- Trend: {task.score_trend} (recent: {', '.join(_fmt(s) for s in task.recent_scores)})",
                "",
            ]
        if task.notes:
            out += ["### Notes", "", task.notes, ""]
        if task.strategies:
            out += ["### Strategies", "", *[f"- {s}" for s in task.strategies], ""]
    out += ["## How agents have done on this task", ""]
    if analytics.runs:
        rate = analytics.completion_rate or 0
        who = "agent" if analytics.agents == 1 else "agents"
        out += [
            f"- Runs with a result: {analytics.runs} by {analytics.agents} {who}"
            + (f" ({analytics.memoryless_runs} memoryless)" if analytics.memoryless_runs else ""),
            f"- Completion rate: {rate:.0%} ({analytics.completed} of {analytics.runs})",
            f"- Median score: {_fmt(analytics.median_score)}",
        ]
        own = analytics.own
        if own.runs != analytics.runs:  # other agents ran it too: show this agent's share apart
            own_rate = own.completion_rate or 0
            out.append(f"- Yours: {own.runs} runs, completion rate {own_rate:.0%}, "
                       f"median score {_fmt(own.median_score)}" if own.runs else "- Yours: no finished runs yet")
    else:
        out.append("No finished runs yet.")
    return "\n".join(out).rstrip("\n") + "\n"


def render_memoryless_context(run_id: str, slug: str) -> str:
    """A memoryless run's TASK.md: says so, and nothing learned is in it."""
    return (
        f"# TASK.md — {slug}\n\n"
        f"Run {run_id} is memoryless: no learning memory, task memory or run history is included, "
        "and no reflection will be stored for it.\n"
    )
