"""Learning memory: what an agent that attempts tasks again and again learns from its own history.

Files (Markdown a person can read and edit; numbers in frontmatter, see markdown/learning.py):
- `learning/LEARNING.md` — global, per agent: stats summary, strategies, category notes, reflections.
- `learning/archive/reflections-YYYY-MM.md` — reflections pushed out of LEARNING.md (by their month).
- `tasks/<slug>.md` — per task: attempt_count, best_score, avg_score, score_trend,
  best_score_breakdown, recent_scores; notes and strategies.
Runs (entered, memoryless or not, scored, completed) are logged in `log.db` (memory/task_runs.py).

Limits (each a clear `InvalidInputError`, except reflections, which rotate):
- reflections: the newest 20 stay in LEARNING.md; older ones MOVE to the monthly archive (never lost).
- strategies (global and per task): at most 10. Adding an 11th is refused: strategies are curated,
  and silently dropping one a person chose would be worse than asking them to remove one.
- task notes, category notes, the stats summary: 2,000 characters each; a reflection 1,000; a
  strategy 500 (one line). Headings of level 1-3 inside text become level 4 so they cannot split the
  file's structure.

Score trend from the last 3 scores, checked in this order (the seed's order):
1. fewer than 2 scores -> `stable`;
2. each higher than the previous -> `improving`; each lower than the previous -> `declining`
   (a steady climb is reported as a climb even if its steps are small);
3. all within 50 points of each other (max - min <= 50, inclusive: exactly 50 apart is stable,
   equal scores are stable) -> `stable`;
4. otherwise -> `volatile`.

Memoryless runs: `enter(..., memoryless=True)` reads and injects none of the learning memory, the
task memory or the run history; a reflection for such a run is refused; its result goes to the run
log flagged memoryless and does NOT change the task memory (so a memoryless baseline neither feeds
nor is fed by what the agent learned). Listings and analytics show memoryless runs separately.

Every change to a file is one `WorkspaceStore.update` (read-modify-write under the file's lock),
so concurrent results never lose an attempt. A machine writer refuses to change a section a person
pinned (`<!-- pin -->`) instead of letting the store silently keep the pin.
"""

from __future__ import annotations

import itertools
import math
import re
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import ConflictError, InvalidInputError, NotFoundError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown import learning as md
from mateclaw_mem.memory.task_runs import Analytics, TaskRun, TaskRunLog
from mateclaw_mem.workspace.store import PERSON

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.memory.lineage import HarnessLineage
    from mateclaw_mem.workspace.store import WorkspaceStore

LEARNING_REL = "learning/LEARNING.md"
ARCHIVE_REL = "learning/archive/reflections-{month}.md"
TASK_DIR = "tasks/"

MAX_REFLECTIONS = 20
MAX_STRATEGIES = 10
MAX_NOTES_CHARS = 2000
MAX_STATS_CHARS = 2000
MAX_CATEGORY_CHARS = 2000
MAX_REFLECTION_CHARS = 1000
MAX_STRATEGY_CHARS = 500
MAX_CATEGORY_NAME = 64
MAX_BREAKDOWN_KEYS = 50
RECENT_SCORES = 3
STABLE_WITHIN = 50

LIMITS = {
    "reflections": MAX_REFLECTIONS,
    "strategies": MAX_STRATEGIES,
    "notes_chars": MAX_NOTES_CHARS,
    "stats_chars": MAX_STATS_CHARS,
    "category_chars": MAX_CATEGORY_CHARS,
    "reflection_chars": MAX_REFLECTION_CHARS,
    "strategy_chars": MAX_STRATEGY_CHARS,
}

TRENDS = ("improving", "declining", "stable", "volatile")
_SLUG = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$")


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


def check_slug(slug: str) -> str:
    if not isinstance(slug, str) or not _SLUG.match(slug) or ".." in slug:
        raise InvalidInputError(
            f"invalid task slug {slug!r}: use 1-64 lowercase letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit (no '..')"
        )
    return slug


def _clean_number(value: float) -> float | int:
    """870.0 reads better as 870 in a file a person edits."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _score(value: Any, what: str = "score") -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(f"{what} must be a number, not {type(value).__name__}")
    if not math.isfinite(value):
        raise InvalidInputError(f"{what} must be a finite number")
    return _clean_number(value)


def _breakdown(value: Any) -> dict[str, float | int]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInputError("breakdown must be an object of name -> number")
    if len(value) > MAX_BREAKDOWN_KEYS:
        raise InvalidInputError(f"breakdown has {len(value)} entries; the limit is {MAX_BREAKDOWN_KEYS}")
    out: dict[str, float | int] = {}
    for key, number in value.items():
        if not isinstance(key, str) or not key.strip() or len(key) > 64 or "\n" in key:
            raise InvalidInputError(f"breakdown key {key!r} must be a name of 1-64 characters on one line")
        out[key.strip()] = _score(number, f"breakdown[{key!r}]")
    return out


def _text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be text")
    text = md.demote_headings(value.strip().replace("\r\n", "\n"))
    if len(text) > limit:
        raise InvalidInputError(f"{what} is {len(text)} characters; the limit is {limit}")
    return text


def _strategy(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidInputError("a strategy must be text")
    text = md.one_line(value)
    if not text:
        raise InvalidInputError("a strategy must not be empty")
    if len(text) > MAX_STRATEGY_CHARS:
        raise InvalidInputError(f"a strategy is {len(text)} characters; the limit is {MAX_STRATEGY_CHARS}")
    return text


def _strategy_list(values: Any, where: str) -> list[str]:
    if not isinstance(values, list):
        raise InvalidInputError("strategies must be a list of text")
    items = [_strategy(v) for v in values]
    seen: set[str] = set()
    for item in items:
        if item.casefold() in seen:
            raise InvalidInputError(f"{where}: strategy {item!r} is listed twice")
        seen.add(item.casefold())
    if len(items) > MAX_STRATEGIES:
        raise InvalidInputError(f"{where}: {len(items)} strategies; the cap is {MAX_STRATEGIES}")
    return items


def _category_name(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidInputError("a category name must be text")
    name = md.one_line(value)
    if not name or len(name) > MAX_CATEGORY_NAME or name.startswith("#"):
        raise InvalidInputError(
            f"invalid category name {value!r}: 1-{MAX_CATEGORY_NAME} characters on one line, not starting with '#'"
        )
    return name


# -- results the faces render ----------------------------------------------------------------------


@dataclass(frozen=True)
class ReflectionView:
    at: str
    task: str | None
    text: str

    @classmethod
    def of(cls, r: md.Reflection) -> ReflectionView:
        return cls(r.at, r.task, r.text)


@dataclass(frozen=True)
class LearningMemory:
    agent: str
    stats: str
    strategies: list[str]
    categories: dict[str, str]
    reflections: list[ReflectionView]  # newest first
    updated: str | None
    sha: str  # of LEARNING.md ("" before the first write)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["limits"] = {k: LIMITS[k] for k in ("reflections", "strategies")}
        return data


@dataclass(frozen=True)
class TaskMemory:
    agent: str
    task: str
    attempt_count: int
    best_score: float | int | None
    avg_score: float | int | None
    score_trend: str
    best_score_breakdown: dict[str, float | int]
    recent_scores: list[float | int]
    notes: str
    strategies: list[str]
    updated: str | None
    sha: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TaskSummary:
    task: str
    attempt_count: int
    best_score: float | int | None
    avg_score: float | int | None
    score_trend: str
    updated: str | None
    runs: int  # results in the run log, memoryless included
    memoryless_runs: int
    has_memory: bool  # False: only memoryless runs so far, no tasks/<slug>.md

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ResultOutcome:
    run: TaskRun
    task: TaskMemory | None  # None for a memoryless run: the task memory is untouched

    @property
    def memoryless(self) -> bool:
        return self.run.memoryless

    def to_dict(self) -> dict[str, Any]:
        return {"memoryless": self.memoryless, "run": self.run.to_dict(),
                "task": self.task.to_dict() if self.task else None}


@dataclass(frozen=True)
class ReflectOutcome:
    reflection: ReflectionView
    archived: list[str]  # archive files that received older reflections
    reflections_kept: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    extra: dict[str, Any] = field(default_factory=dict)

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


# -- the service -------------------------------------------------------------------------------------


class LearningService:
    def __init__(
        self, store: WorkspaceStore, runs: TaskRunLog, clock: Clock, *, lineage: HarnessLineage | None = None
    ) -> None:
        self.store = store
        self.runs = runs
        self.clock = clock
        self.lineage = lineage

    def close(self) -> None:
        self.runs.close()

    # -- helpers -------------------------------------------------------------------------------

    def _require_agent(self, agent: str) -> None:
        if not self.store.agent_dir(agent).is_dir():
            raise NotFoundError(f"agent {agent!r} does not exist (create it with `mateclaw-mem init {agent}`)")

    def _now(self) -> str:
        return self.clock.now().isoformat(timespec="seconds")

    def _harness(self, agent: str) -> str | None:
        return self.lineage.check(agent) if self.lineage is not None else None

    @staticmethod
    def _task_rel(slug: str) -> str:
        return f"{TASK_DIR}{check_slug(slug)}.md"

    @staticmethod
    def _guard_pins(body: str, titles: list[str], rel: str, actor: str) -> None:
        if actor == PERSON:
            return
        for title in titles:
            if md.pinned(body, title):
                raise ConflictError(
                    f"{rel}: section '## {title}' is pinned (<!-- pin -->); unpin it to let {actor} change it"
                )

    # -- global learning memory --------------------------------------------------------------------

    def memory(self, agent: str) -> LearningMemory:
        self._require_agent(agent)
        snap = self.store.read(agent, LEARNING_REL)
        return self._memory_view(agent, snap.text, snap.sha)

    def _memory_view(self, agent: str, text: str, sha: str) -> LearningMemory:
        doc = md.parse_learning(text or md.new_learning_text())
        if doc.error:
            raise InvalidInputError(f"{LEARNING_REL}: {doc.error}; fix it by hand")
        updated = doc.meta.get("updated")
        return LearningMemory(
            agent=agent,
            stats=doc.stats,
            strategies=doc.strategies,
            categories=dict(doc.categories),
            reflections=[ReflectionView.of(r) for r in doc.reflections],
            updated=str(updated) if updated is not None else None,
            sha=sha,
        )

    def _edit_learning(self, agent: str, change: Callable[[md.LearningDoc], list[str]], *, actor: str,
                       reason: str, before_commit: Callable[[], None] | None = None) -> LearningMemory:
        """Apply `change` to the parsed file under the lock; it mutates the doc and returns the titles
        of the sections it changed. Only those sections are re-rendered. `before_commit` runs once the
        change is known to be allowed, still under the lock, just before the file is written."""
        self._require_agent(agent)
        result_text = ""

        def apply(current: str) -> str | None:
            nonlocal result_text
            text = current or md.new_learning_text()
            doc = md.parse_learning(text)
            if doc.error:
                raise InvalidInputError(f"{LEARNING_REL}: {doc.error}; fix it by hand")
            changed = change(doc)
            if not changed:
                result_text = text
                return None
            body = frontmatter.body(text)
            self._guard_pins(body, changed, LEARNING_REL, actor)
            renders = {
                md.STATS: lambda: doc.stats,
                md.STRATEGIES: lambda: md.render_strategies(doc.strategy_intro, doc.strategies),
                md.CATEGORIES: lambda: md.render_categories(doc.category_intro, doc.categories),
                md.REFLECTIONS: lambda: md.render_reflections(doc.reflection_intro, doc.reflections),
            }
            for title in changed:
                body = md.replace_section(body, title, renders[title](), order=md.LEARNING_ORDER)
            if before_commit is not None:
                before_commit()
            text = md.set_meta(frontmatter.with_body(text, body), {
                "reflections": len(doc.reflections),
                "strategies": len(doc.strategies),
                "updated": self._now(),
            })
            result_text = text
            return text

        result = self.store.update(agent, LEARNING_REL, apply, actor=actor, reason=reason)
        sha = result.sha if result is not None else self.store.read(agent, LEARNING_REL).sha
        return self._memory_view(agent, result_text, sha)

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
        new_stats = None if stats is None else _text(stats, "stats summary", MAX_STATS_CHARS)
        new_list = None if strategies is None else _strategy_list(strategies, LEARNING_REL)
        added = None if add_strategy is None else _strategy(add_strategy)
        cats: list[tuple[str, str]] = []
        if categories is not None:
            if not isinstance(categories, dict):
                raise InvalidInputError("categories must be an object of name -> notes")
            for name, notes in categories.items():
                clean = _category_name(name)
                cats.append((clean, "" if notes is None else _text(notes, f"category {clean!r} notes",
                                                                   MAX_CATEGORY_CHARS)))

        def change(doc: md.LearningDoc) -> list[str]:
            changed: list[str] = []
            if new_stats is not None and new_stats != doc.stats:
                doc.stats = new_stats
                changed.append(md.STATS)
            items = list(doc.strategies) if new_list is None else new_list
            if remove_strategy is not None:
                items = _remove(items, remove_strategy, LEARNING_REL)
            if added is not None:
                items = _add(items, added, LEARNING_REL)
            if items != doc.strategies:
                doc.strategies = items
                changed.append(md.STRATEGIES)
            if cats:
                current = list(doc.categories)
                for name, notes in cats:
                    at = next((i for i, (n, _) in enumerate(current)
                               if md.category_key(n) == md.category_key(name)), None)
                    if not notes:
                        if at is not None:
                            current.pop(at)
                    elif at is None:
                        current.append((name, notes))
                    else:
                        current[at] = (current[at][0], notes)
                if current != doc.categories:
                    doc.categories = current
                    changed.append(md.CATEGORIES)
            return changed

        return self._edit_learning(agent, change, actor=actor, reason="learning memory")

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

    # -- reflections -----------------------------------------------------------------------------

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
        if task is not None:
            check_slug(task)
        if memoryless:
            raise InvalidInputError("reflections are not stored for memoryless runs")
        if run_id is not None:
            run = self.runs.get(run_id)
            if run.agent != agent or (task is not None and run.task != task):
                raise InvalidInputError(f"run {run_id} belongs to agent {run.agent!r}, task {run.task!r}")
            if run.memoryless:
                raise InvalidInputError(f"run {run_id} is memoryless: reflections are not stored for it")
        text = _text(lesson, "reflection", MAX_REFLECTION_CHARS)
        if not text:
            raise InvalidInputError("reflection must not be empty")
        now = self.clock.now()
        new = md.Reflection(f"{now:%Y-%m-%d %H:%M}", task, text)
        archived: list[str] = []
        moved: list[md.Reflection] = []

        def change(doc: md.LearningDoc) -> list[str]:
            doc.reflections = [new, *doc.reflections]
            moved[:] = doc.reflections[MAX_REFLECTIONS:]
            doc.reflections = doc.reflections[:MAX_REFLECTIONS]
            return [md.REFLECTIONS]

        def archive() -> None:
            if moved:
                archived.extend(self._archive(agent, moved, actor=actor, fallback_month=f"{now:%Y-%m}"))

        view = self._edit_learning(agent, change, actor=actor, reason=f"reflection{f' on {task}' if task else ''}",
                                   before_commit=archive)
        return ReflectOutcome(ReflectionView.of(new), archived, len(view.reflections))

    def _archive(self, agent: str, moved: list[md.Reflection], *, actor: str, fallback_month: str) -> list[str]:
        # Runs under LEARNING.md's lock, before it is rewritten: if we crash in between, a reflection
        # exists twice (file and archive), never zero times. Oldest first, so archives read in order.
        by_month: dict[str, list[md.Reflection]] = {}
        for r in reversed(moved):
            month = r.at[:7] if re.match(r"^\d{4}-\d{2}", r.at) else fallback_month
            by_month.setdefault(month, []).append(r)
        rels = []
        for month, items in by_month.items():
            rel = ARCHIVE_REL.format(month=month)

            def add(current: str, month: str = month, items: list[md.Reflection] = items) -> str:
                base = current or md.new_archive_text(month)
                return base.rstrip("\n") + "\n\n" + md.render_archive_entries(items) + "\n"

            self.store.update(agent, rel, add, actor=actor, reason="reflections archived from LEARNING.md")
            rels.append(rel)
        return rels

    # -- per-task memory -------------------------------------------------------------------------

    def _task_view(self, agent: str, slug: str, text: str, sha: str) -> TaskMemory:
        rel = self._task_rel(slug)
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
        self._require_agent(agent)
        snap = self.store.read(agent, self._task_rel(slug))
        if not snap.exists:
            raise NotFoundError(f"agent {agent!r} has no memory of task {slug!r} yet")
        return self._task_view(agent, slug, snap.text, snap.sha)

    def list_tasks(self, agent: str) -> list[TaskSummary]:
        self._require_agent(agent)
        counts = self.runs.counts(agent)
        out: dict[str, TaskSummary] = {}
        for info in self.store.list_files(agent, prefix=TASK_DIR):
            slug = info.rel[len(TASK_DIR):-3]
            if "/" in slug or not _SLUG.match(slug):
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
        self._require_agent(agent)
        rel = self._task_rel(slug)
        new_notes = None if notes is None else _text(notes, f"{rel} notes", MAX_NOTES_CHARS)
        new_list = None if strategies is None else _strategy_list(strategies, rel)
        added = None if add_strategy is None else _strategy(add_strategy)
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
                items = _remove(items, remove_strategy, rel)
            if added is not None:
                items = _add(items, added, rel)
            if items != doc.strategies:
                changed.append(md.STRATEGIES)
                body = md.replace_section(body, md.STRATEGIES, md.render_strategies(doc.strategy_intro, items),
                                          order=md.TASK_ORDER)
            if not changed and current:
                result_text = text
                return None
            self._guard_pins(frontmatter.body(text), changed, rel, actor)
            result_text = md.set_meta(frontmatter.with_body(text, body), {"updated": self._now()})
            return result_text

        result = self.store.update(agent, rel, apply, actor=actor, reason="task notes and strategies")
        sha = result.sha if result is not None else self.store.read(agent, rel).sha
        return self._task_view(agent, slug, result_text, sha)

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
        is refused) and the run can have only one result."""
        self._require_agent(agent)
        rel = self._task_rel(slug)
        value = _score(score)
        parts = _breakdown(breakdown)
        if not isinstance(completed, bool):
            raise InvalidInputError("completed must be true or false")
        if memoryless is not None and not isinstance(memoryless, bool):
            raise InvalidInputError("memoryless must be true or false")
        run_id = run_id or uuid.uuid4().hex
        existing = self.runs.find(run_id)
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
                "avg_score": _clean_number(float(avg)),
                "total_score": _clean_number(float(round(total, 6))),
                "score_trend": score_trend(recent),
                "best_score_breakdown": parts if better else n.best_score_breakdown,
                "recent_scores": recent,
                "updated": now,
            })
            return result_text

        result = self.store.update(agent, rel, apply, actor=actor, reason=f"result {value:g}")
        assert result is not None
        return ResultOutcome(run_box[0], self._task_view(agent, slug, result_text, result.sha))

    def run_list(self, agent: str, slug: str | None = None, *, limit: int = 100) -> list[TaskRun]:
        self._require_agent(agent)
        if slug is not None:
            check_slug(slug)
        return self.runs.runs(agent, slug, limit=limit)

    # -- entering a task ---------------------------------------------------------------------------

    def enter(self, agent: str, slug: str, memoryless: bool = False) -> TaskContext:
        """Open a run and return its TASK.md-style context. Memoryless: nothing learned is read or
        injected; the run is flagged so its result and any reflection are handled accordingly."""
        self._require_agent(agent)
        check_slug(slug)
        if not isinstance(memoryless, bool):
            raise InvalidInputError("memoryless must be true or false")
        run_id = uuid.uuid4().hex
        harness = self._harness(agent)
        self.runs.open(run_id, agent, slug, memoryless=memoryless, at=self._now(), harness_hash=harness)
        if memoryless:
            text = (
                f"# TASK.md — {slug}\n\n"
                f"Run {run_id} is memoryless: no learning memory, task memory or run history is included, "
                "and no reflection will be stored for it.\n"
            )
            return TaskContext(run_id, agent, slug, True, text, None, None, None, harness)
        memory = self.memory(agent)
        try:
            task_memory: TaskMemory | None = self.task_memory(agent, slug)
        except NotFoundError:
            task_memory = None
        analytics = self.runs.analytics(agent, slug)
        text = render_context(run_id, slug, memory, task_memory, analytics)
        return TaskContext(run_id, agent, slug, False, text, memory, task_memory, analytics, harness)


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


def _add(items: list[str], item: str, where: str) -> list[str]:
    if any(i.casefold() == item.casefold() for i in items):
        return items  # already there: adding is idempotent, even at the cap
    if len(items) >= MAX_STRATEGIES:
        raise InvalidInputError(
            f"{where}: already {len(items)} strategies; the cap is {MAX_STRATEGIES} — remove one first"
        )
    return [*items, item]


def _remove(items: list[str], which: int | str, where: str) -> list[str]:
    if isinstance(which, int) and not isinstance(which, bool):
        if not 1 <= which <= len(items):
            raise NotFoundError(f"{where}: no strategy number {which} (there are {len(items)})")
        return items[: which - 1] + items[which:]
    if isinstance(which, str):
        key = md.one_line(which).casefold()
        if key.isdigit():
            return _remove(items, int(key), where)
        kept = [i for i in items if i.casefold() != key]
        if len(kept) == len(items):
            raise NotFoundError(f"{where}: no strategy {which!r}")
        return kept
    raise InvalidInputError("name the strategy to remove by its number (1-based) or its text")


def _fmt(value: float | int | None) -> str:
    return "—" if value is None else f"{value:g}"


def render_context(
    run_id: str, slug: str, memory: LearningMemory, task: TaskMemory | None, analytics: Analytics
) -> str:
    """TASK.md: global learning memory, this task's memory, analytics over the agent's runs."""
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
    out += ["## Your runs of this task", ""]
    if analytics.runs:
        rate = analytics.completion_rate or 0
        out += [
            f"- Runs with a result: {analytics.runs}"
            + (f" ({analytics.memoryless_runs} memoryless)" if analytics.memoryless_runs else ""),
            f"- Completion rate: {rate:.0%} ({analytics.completed} of {analytics.runs})",
            f"- Median score: {_fmt(analytics.median_score)}",
        ]
    else:
        out.append("No finished runs yet.")
    return "\n".join(out).rstrip("\n") + "\n"
