"""The global learning memory of an agent: `learning/LEARNING.md` (stats summary, strategies,
category notes, reflections) and its reflection archives `learning/archive/reflections-YYYY-MM.md`.

Reflections rotate instead of being refused: the newest 20 stay in LEARNING.md, older ones MOVE to
the archive of their month (written first, so a reflection is never lost). A reflection for a
memoryless run is refused.

Every change is one `WorkspaceStore.update` (read-modify-write under the file's lock) that re-renders
only the `##` sections it changed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown import learning as md
from mateclaw_mem.memory.learning import checks
from mateclaw_mem.memory.learning.checks import (
    MAX_CATEGORY_CHARS,
    MAX_REFLECTION_CHARS,
    MAX_REFLECTIONS,
    MAX_STATS_CHARS,
    check_slug,
)
from mateclaw_mem.memory.learning.views import LearningMemory, ReflectionView, ReflectOutcome

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.memory.learning.task_runs import TaskRunLog
    from mateclaw_mem.workspace.store import WorkspaceStore

LEARNING_REL = "learning/LEARNING.md"
ARCHIVE_REL = "learning/archive/reflections-{month}.md"


class GlobalLearning:
    def __init__(self, store: WorkspaceStore, runs: TaskRunLog, clock: Clock) -> None:
        self.store = store
        self.runs = runs  # to refuse reflections on memoryless runs
        self.clock = clock

    def memory(self, agent: str) -> LearningMemory:
        checks.require_agent(self.store, agent)
        snap = self.store.read(agent, LEARNING_REL)
        return self._view(agent, snap.text, snap.sha)

    def _view(self, agent: str, text: str, sha: str) -> LearningMemory:
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

    def _edit(self, agent: str, change: Callable[[md.LearningDoc], list[str]], *, actor: str,
              reason: str, before_commit: Callable[[], None] | None = None) -> LearningMemory:
        """Apply `change` to the parsed file under the lock; it mutates the doc and returns the titles
        of the sections it changed. Only those sections are re-rendered. `before_commit` runs once the
        change is known to be allowed, still under the lock, just before the file is written."""
        checks.require_agent(self.store, agent)
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
            checks.guard_pins(body, changed, LEARNING_REL, actor)
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
                "updated": self.clock.now().isoformat(timespec="seconds"),
            })
            result_text = text
            return text

        result = self.store.update(agent, LEARNING_REL, apply, actor=actor, reason=reason)
        sha = result.sha if result is not None else self.store.read(agent, LEARNING_REL).sha
        return self._view(agent, result_text, sha)

    def update(
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
        new_stats = None if stats is None else checks.text(stats, "stats summary", MAX_STATS_CHARS)
        new_list = None if strategies is None else checks.strategy_list(strategies, LEARNING_REL)
        added = None if add_strategy is None else checks.strategy(add_strategy)
        cats: list[tuple[str, str]] = []
        if categories is not None:
            if not isinstance(categories, dict):
                raise InvalidInputError("categories must be an object of name -> notes")
            for name, notes in categories.items():
                clean = checks.category_name(name)
                cats.append((clean, "" if notes is None else checks.text(notes, f"category {clean!r} notes",
                                                                         MAX_CATEGORY_CHARS)))

        def change(doc: md.LearningDoc) -> list[str]:
            changed: list[str] = []
            if new_stats is not None and new_stats != doc.stats:
                doc.stats = new_stats
                changed.append(md.STATS)
            items = list(doc.strategies) if new_list is None else new_list
            if remove_strategy is not None:
                items = checks.remove_strategy(items, remove_strategy, LEARNING_REL)
            if added is not None:
                items = checks.add_strategy(items, added, LEARNING_REL)
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

        return self._edit(agent, change, actor=actor, reason="learning memory")

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
        text = checks.text(lesson, "reflection", MAX_REFLECTION_CHARS)
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

        view = self._edit(agent, change, actor=actor, reason=f"reflection{f' on {task}' if task else ''}",
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

            def add(current: str, month: str = month, items: list[md.Reflection] = items) -> str | None:
                base = current or md.new_archive_text(month)
                # Killed after this archive and before LEARNING.md, the next move archives the same ones
                # again: those already here are not written twice.
                fresh = [r for r in items if md.render_archive_entries([r]) not in base]
                if not fresh:
                    return None
                return base.rstrip("\n") + "\n\n" + md.render_archive_entries(fresh) + "\n"

            self.store.update(agent, rel, add, actor=actor, reason="reflections archived from LEARNING.md")
            rels.append(rel)
        return rels
