"""Per-task memory: `tasks/<slug>.md` — attempt_count, best_score, avg_score, score_trend,
best_score_breakdown, recent_scores in frontmatter; notes and strategies in the body — and the
results that feed it.

Score trend from the last 3 scores, checked in this order (the seed's order):
1. fewer than 2 scores -> `stable`;
2. each higher than the previous -> `improving`; each lower than the previous -> `declining`
   (a steady climb is reported as a climb even if its steps are small);
3. all within 50 points of each other (max - min <= 50, inclusive: exactly 50 apart is stable,
   equal scores are stable) -> `stable`;
4. otherwise -> `volatile`.

A memoryless run's result goes to the run log flagged memoryless and does NOT change the task
memory. A result is one `WorkspaceStore.update` (read-modify-write under the file's lock), so
concurrent results never lose an attempt.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import InvalidInputError, NotFoundError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown import learning as md
from mateclaw_mem.memory.learning import checks
from mateclaw_mem.memory.learning.checks import MAX_NOTES_CHARS, SLUG, check_slug
from mateclaw_mem.memory.learning.task_runs import TaskRun
from mateclaw_mem.memory.learning.views import ResultOutcome, TaskMemory, TaskSummary

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.memory.learning.task_runs import TaskRunLog
    from mateclaw_mem.workspace.store import WorkspaceStore

TASK_DIR = "tasks/"
RECENT_SCORES = 3
STABLE_WITHIN = 50
TRENDS = ("improving", "declining", "stable", "volatile")


def score_trend(scores: list[float]) -> str:
    """Trend of the last 3 scores; precedence documented in the module docstring."""
    last = list(scores)[-RECENT_SCORES:]
    if len(last) < 2:
        return "stable"
    pairs = list(itertools.pairwise(last))
    if all(b > a for a, b in pairs):
        return "improving"
    if all(b < a for a, b in pairs):
        return "declining"
    if max(last) - min(last) <= STABLE_WITHIN:
        return "stable"
    return "volatile"


def task_rel(slug: str) -> str:
    return f"{TASK_DIR}{check_slug(slug)}.md"


class TaskLearning:
    def __init__(
        self, store: WorkspaceStore, runs: TaskRunLog, clock: Clock, *, harness: Callable[[str], str | None]
    ) -> None:
        self.store = store
        self.runs = runs
        self.clock = clock
        self._harness = harness  # the agent's current harness hash, stamped on each logged run

    def _now(self) -> str:
        return self.clock.now().isoformat(timespec="seconds")

    def _view(self, agent: str, slug: str, text: str, sha: str) -> TaskMemory:
        rel = task_rel(slug)
        doc = md.parse_task(text or md.new_task_text(slug))
        if doc.error:
            raise InvalidInputError(f"{rel}: {doc.error}; fix it by hand")
        n = _TaskNumbers.read(doc.meta, rel)
        updated = doc.meta.get("updated")
        return TaskMemory(
            agent=agent,
            task=slug,
            attempt_count=n.attempt_count,
            best_score=n.best_score,
            avg_score=n.avg_score,
            score_trend=n.score_trend,
            best_score_breakdown=n.best_score_breakdown,
            recent_scores=n.recent_scores,
            notes=doc.notes,
            strategies=doc.strategies,
            updated=str(updated) if updated is not None else None,
            sha=sha,
        )

    def task_memory(self, agent: str, slug: str) -> TaskMemory:
        checks.require_agent(self.store, agent)
        snap = self.store.read(agent, task_rel(slug))
        if not snap.exists:
            raise NotFoundError(f"agent {agent!r} has no memory of task {slug!r} yet")
        return self._view(agent, slug, snap.text, snap.sha)

    def list_tasks(self, agent: str) -> list[TaskSummary]:
        checks.require_agent(self.store, agent)
        counts = self.runs.counts(agent)
        out: dict[str, TaskSummary] = {}
        for info in self.store.list_files(agent, prefix=TASK_DIR):
            slug = info.rel[len(TASK_DIR):-3]
            if "/" in slug or not SLUG.match(slug):
                continue  # a file a person put there by another name: not a task memory
            try:
                tm = self.task_memory(agent, slug)
            except InvalidInputError:
                continue  # a hand-broken file still shows in `ls`; `learn task` names the problem
            runs, memoryless = counts.get(slug, (0, 0))
            out[slug] = TaskSummary(slug, tm.attempt_count, tm.best_score, tm.avg_score, tm.score_trend, tm.updated,
                                    runs, memoryless, True)
        for slug, (runs, memoryless) in counts.items():
            if slug not in out:
                out[slug] = TaskSummary(slug, 0, None, None, "stable", None, runs, memoryless, False)
        return [out[k] for k in sorted(out)]

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
        checks.require_agent(self.store, agent)
        rel = task_rel(slug)
        new_notes = None if notes is None else checks.text(notes, f"{rel} notes", MAX_NOTES_CHARS)
        new_list = None if strategies is None else checks.strategy_list(strategies, rel)
        added = None if add_strategy is None else checks.strategy(add_strategy)
        result_text = ""

        def apply(current: str) -> str | None:
            nonlocal result_text
            text = current or md.new_task_text(slug)
            doc = md.parse_task(text)
            if doc.error:
                raise InvalidInputError(f"{rel}: {doc.error}; fix it by hand")
            body = frontmatter.body(text)
            changed: list[str] = []
            if new_notes is not None and new_notes != doc.notes:
                changed.append(md.NOTES)
                body = md.replace_section(body, md.NOTES, new_notes, order=md.TASK_ORDER)
            items = list(doc.strategies) if new_list is None else new_list
            if remove_strategy is not None:
                items = checks.remove_strategy(items, remove_strategy, rel)
            if added is not None:
                items = checks.add_strategy(items, added, rel)
            if items != doc.strategies:
                changed.append(md.STRATEGIES)
                body = md.replace_section(body, md.STRATEGIES, md.render_strategies(doc.strategy_intro, items),
                                          order=md.TASK_ORDER)
            if not changed and current:
                result_text = text
                return None
            checks.guard_pins(frontmatter.body(text), changed, rel, actor)
            result_text = md.set_meta(frontmatter.with_body(text, body), {"updated": self._now()})
            return result_text

        result = self.store.update(agent, rel, apply, actor=actor, reason="task notes and strategies")
        sha = result.sha if result is not None else self.store.read(agent, rel).sha
        return self._view(agent, slug, result_text, sha)

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
        """Log a run's result and, unless the run is memoryless, update the task memory: attempt_count,
        best_score (+ its breakdown), avg_score, recent_scores (last 3) and score_trend — all in one
        write under the file's lock, so concurrent results never lose an attempt.

        With `run_id` from `enter`, the run's memoryless flag applies (a contradicting `memoryless`
        is refused) and the run can have only one result. An unknown `run_id` is refused (it is a
        typo, not a new run). Without one, the agent's one open run of the task is completed; with
        several open, the caller is told which ids to choose from; with none, a new run is logged."""
        checks.require_agent(self.store, agent)
        rel = task_rel(slug)
        value = checks.score(score)
        parts = checks.breakdown(breakdown)
        if not isinstance(completed, bool):
            raise InvalidInputError("completed must be true or false")
        if memoryless is not None and not isinstance(memoryless, bool):
            raise InvalidInputError("memoryless must be true or false")
        existing = self._run_for_result(agent, slug, run_id, memoryless)
        run_id = existing.run_id if existing is not None else uuid.uuid4().hex
        is_memoryless = existing.memoryless if existing is not None else bool(memoryless)
        harness = self._harness(agent)
        now = self._now()

        def log_run() -> TaskRun:
            return self.runs.record(run_id, agent, slug, memoryless=memoryless, score=value, breakdown=parts,
                                    completed=completed, at=now, harness_hash=harness)

        if is_memoryless:
            return ResultOutcome(log_run(), None)

        run_box: list[TaskRun] = []
        result_text = ""

        def apply(current: str) -> str:
            nonlocal result_text
            text = current or md.new_task_text(slug)
            parsed = frontmatter.parse(text)
            if parsed.error:
                raise InvalidInputError(f"{rel}: {parsed.error}; fix it by hand")
            n = _TaskNumbers.read(parsed.meta, rel)
            count = n.attempt_count + 1
            # A running sum, not a running average: the result must not depend on the order in which
            # concurrent recordings happened to land (floating-point drift would make it).
            prev_total = n.total_score if n.total_score is not None else (n.avg_score or 0) * n.attempt_count
            total = prev_total + value
            avg = round(total / count, 4)
            better = n.best_score is None or value > n.best_score
            recent = [*n.recent_scores, value][-RECENT_SCORES:]
            # The run is logged inside the lock, before the file is committed: a run that already has a
            # result (a retried request) is refused before it could count as a second attempt.
            run_box.append(log_run())
            result_text = md.set_meta(text, {
                "attempt_count": count,
                "best_score": value if better else n.best_score,
                "avg_score": checks.clean_number(float(avg)),
                "total_score": checks.clean_number(float(round(total, 6))),
                "score_trend": score_trend(recent),
                "best_score_breakdown": parts if better else n.best_score_breakdown,
                "recent_scores": recent,
                "updated": now,
            })
            return result_text

        result = self.store.update(agent, rel, apply, actor=actor, reason=f"result {value:g}")
        assert result is not None
        return ResultOutcome(run_box[0], self._view(agent, slug, result_text, result.sha))

    def _run_for_result(self, agent: str, slug: str, run_id: str | None, memoryless: bool | None) -> TaskRun | None:
        """The run a result completes: the one named, else the agent's only open run of the task
        (of the same kind when `memoryless` is given), else None (log a new one)."""
        if run_id is not None:
            run = self.runs.find(run_id)
            if run is None:
                raise NotFoundError(
                    f"no task run {run_id!r} for agent {agent!r} (run ids come from `enter`; "
                    "leave the run id out to log a result without one)"
                )
            return run
        open_runs = [r for r in self.runs.open_runs(agent, slug)
                     if memoryless is None or r.memoryless == memoryless]
        if len(open_runs) > 1:
            ids = ", ".join(r.run_id for r in open_runs[:10])
            more = f" and {len(open_runs) - 10} more" if len(open_runs) > 10 else ""
            raise InvalidInputError(
                f"agent {agent!r} has {len(open_runs)} open runs of task {slug!r} ({ids}{more}); "
                "say which one this result is for with its run id"
            )
        return open_runs[0] if open_runs else None

    def run_list(self, agent: str, slug: str | None = None, *, limit: int = 100) -> list[TaskRun]:
        checks.require_agent(self.store, agent)
        if slug is not None:
            check_slug(slug)
        return self.runs.runs(agent, slug, limit=limit)


@dataclass(frozen=True)
class _TaskNumbers:
    attempt_count: int
    best_score: float | int | None
    avg_score: float | int | None
    score_trend: str
    best_score_breakdown: dict[str, float | int]
    recent_scores: list[float | int]
    total_score: float | int | None = None

    @classmethod
    def read(cls, meta: dict[str, Any], rel: str) -> _TaskNumbers:
        """Numbers a person may have edited: wrong types are named, never guessed."""

        def bad(key: str, want: str) -> InvalidInputError:
            found = meta.get(key)
            return InvalidInputError(f"{rel}: frontmatter {key} must be {want} (found {found!r}); fix it by hand")

        count = meta.get("attempt_count") or 0
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise bad("attempt_count", "a whole number >= 0")

        def number(key: str) -> float | int | None:
            value = meta.get(key)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise bad(key, "a number or null")
            return value

        recent = meta.get("recent_scores") or []
        if not isinstance(recent, list) or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) for v in recent
        ):
            raise bad("recent_scores", "a list of numbers")
        parts = meta.get("best_score_breakdown") or {}
        if not isinstance(parts, dict) or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) for v in parts.values()
        ):
            raise bad("best_score_breakdown", "a mapping of name: number")
        trend = meta.get("score_trend")
        recent = recent[-RECENT_SCORES:]
        return cls(
            attempt_count=count,
            best_score=number("best_score"),
            avg_score=number("avg_score"),
            score_trend=trend if trend in TRENDS else score_trend(recent),
            best_score_breakdown={str(k): v for k, v in parts.items()},
            recent_scores=recent,
            total_score=number("total_score"),
        )
