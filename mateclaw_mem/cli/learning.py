"""`mateclaw-mem learn …`: learning memory, task memories, results, reflections, harness lineage.

    learn show [AGENT]                                 global learning memory
    learn set AGENT [--stats T] [--category NAME TEXT]  stats summary / category notes ('' removes)
    learn strategy AGENT add TEXT | rm N|TEXT [--task SLUG]
    learn task AGENT [SLUG] [--notes T] [--runs]       list tasks, show one, set its notes, its runs
    learn result AGENT SLUG SCORE [--part NAME=N ...] [--failed] [--memoryless] [--run ID]
                                                       score 0-1000; without --run: the one open run
    learn reflect AGENT SLUG LESSON [--run ID]
    learn enter AGENT SLUG [--memoryless]              print `run ID`, a blank line, the TASK.md context
    learn lineage AGENT [--label TEXT [--hash H]]      harness versions; label one
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext

PERSON = "person"  # text a person typed at the command line
CLI = "cli"  # scores and lessons reported through the CLI (often by a script)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    learn = sub.add_parser("learn", parents=[common], help=HELP["learn"])
    lsub = learn.add_subparsers(dest="learn_command", metavar="SUBCOMMAND", required=True)

    p = lsub.add_parser("show", parents=[common], help="the agent's global learning memory")
    p.add_argument("agent", nargs="?")
    p.set_defaults(func=cmd_show)

    p = lsub.add_parser("set", parents=[common], help="set the stats summary or a category's notes")
    p.add_argument("agent")
    p.add_argument("--stats", help="the stats summary (free text)")
    p.add_argument("--category", nargs=2, metavar=("NAME", "TEXT"), action="append", default=[],
                   help="notes for a category ('' removes it); repeatable")
    p.set_defaults(func=cmd_set)

    p = lsub.add_parser("strategy", parents=[common], help="add or remove a strategy (global or --task)")
    p.add_argument("agent")
    p.add_argument("action", choices=["add", "rm"])
    p.add_argument("text", help="the strategy (add) or its number / text (rm)")
    p.add_argument("--task", metavar="SLUG", help="a task's strategies instead of the global ones")
    p.set_defaults(func=cmd_strategy)

    p = lsub.add_parser("task", parents=[common], help="list task memories, show one, set its notes")
    p.add_argument("agent")
    p.add_argument("slug", nargs="?")
    p.add_argument("--notes", help="replace the task's notes (max 2,000 characters)")
    p.add_argument("--runs", action="store_true", help="list the task's runs (memoryless ones flagged)")
    p.set_defaults(func=cmd_task)

    p = lsub.add_parser("result", parents=[common], help="record a run's score")
    p.add_argument("agent")
    p.add_argument("slug")
    p.add_argument("score", type=float, help="0-1000 (the seed's scale)")
    p.add_argument("--part", action="append", default=[], metavar="NAME=N", help="a breakdown entry; repeatable")
    p.add_argument("--failed", action="store_true", help="the run did not complete")
    p.add_argument("--memoryless", action="store_true", default=None, help="a memoryless run")
    p.add_argument("--run", metavar="ID", help="the run id `learn enter` printed (default: the task's one open run)")
    p.set_defaults(func=cmd_result)

    p = lsub.add_parser("reflect", parents=[common], help="store a lesson after a task")
    p.add_argument("agent")
    p.add_argument("slug")
    p.add_argument("lesson")
    p.add_argument("--run", metavar="ID", help="the run it is about (refused if that run is memoryless)")
    p.set_defaults(func=cmd_reflect)

    p = lsub.add_parser("enter", parents=[common], help="start a run and print its TASK.md context")
    p.add_argument("agent")
    p.add_argument("slug")
    p.add_argument("--memoryless", action="store_true", help="inject nothing learned")
    p.set_defaults(func=cmd_enter)

    p = lsub.add_parser("lineage", parents=[common], help="versions of the system prompt (AGENTS.md + SOUL.md)")
    p.add_argument("agent")
    p.add_argument("--label", help="label a version (the current one unless --hash)")
    p.add_argument("--hash", help="full hash or a unique prefix of 8+ characters")
    p.set_defaults(func=cmd_lineage)


def _num(value: Any) -> str:
    return "—" if value is None else f"{value:g}"


def cmd_show(ctx: CliContext) -> int:
    mem = ctx.services.learning.memory(ctx.agent())
    lines = [f"stats: {mem.stats or '—'}", f"strategies ({len(mem.strategies)}/10):"]
    lines += [f"  {i}. {s}" for i, s in enumerate(mem.strategies, 1)]
    lines += [f"category {name}: {notes}" for name, notes in mem.categories.items()]
    lines.append(f"reflections ({len(mem.reflections)}/20, newest first):")
    lines += [f"  {r.at}{' · ' + r.task if r.task else ''}: {r.text}" for r in mem.reflections]
    ctx.emit(mem.to_dict(), "\n".join(lines))
    return 0


def cmd_set(ctx: CliContext) -> int:
    a = ctx.args
    if a.stats is None and not a.category:
        from mateclaw_mem.errors import InvalidInputError

        raise InvalidInputError("nothing to set: give --stats and/or --category NAME TEXT")
    mem = ctx.services.learning.update_memory(
        a.agent, stats=a.stats, categories={name: text for name, text in a.category} or None, actor=PERSON
    )
    ctx.emit(mem.to_dict(), "learning memory updated")
    return 0


def cmd_strategy(ctx: CliContext) -> int:
    a = ctx.args
    learning = ctx.services.learning
    if a.action == "add":
        out = learning.add_strategy(a.agent, a.text, task=a.task, actor=PERSON)
    else:
        out = learning.remove_strategy(a.agent, a.text, task=a.task, actor=PERSON)
    where = f"task {a.task}" if a.task else "global"
    lines = [f"{where} strategies ({len(out.strategies)}/10):"] + [
        f"  {i}. {s}" for i, s in enumerate(out.strategies, 1)
    ]
    ctx.emit(out.to_dict(), "\n".join(lines))
    return 0


def cmd_task(ctx: CliContext) -> int:
    a = ctx.args
    learning = ctx.services.learning
    if not a.slug:
        tasks = learning.list_tasks(a.agent)
        lines = [
            f"{t.task:<32} attempts {t.attempt_count:>4}  best {_num(t.best_score):>8}  avg {_num(t.avg_score):>8}"
            f"  {t.score_trend:<9}  runs {t.runs} ({t.memoryless_runs} memoryless)"
            for t in tasks
        ]
        ctx.emit([t.to_dict() for t in tasks], "\n".join(lines) if lines else "no task memories yet")
        return 0
    if a.runs:
        runs = learning.run_list(a.agent, a.slug)
        lines = [
            f"{r.run_id[:12]}  {r.recorded_at or r.entered_at}  score {_num(r.score):>8}"
            f"  {'completed' if r.completed else ('failed' if r.completed is False else 'open')}"
            + ("  MEMORYLESS" if r.memoryless else "")
            for r in runs
        ]
        ctx.emit([r.to_dict() for r in runs], "\n".join(lines) if lines else f"no runs of {a.slug} yet")
        return 0
    if a.notes is not None:
        tm = learning.update_task(a.agent, a.slug, notes=a.notes, actor=PERSON)
    else:
        tm = learning.task_memory(a.agent, a.slug)
    lines = [
        f"task {tm.task}: {tm.attempt_count} attempts, best {_num(tm.best_score)}, avg {_num(tm.avg_score)}, "
        f"trend {tm.score_trend} (recent {', '.join(_num(s) for s in tm.recent_scores) or '—'})",
    ]
    if tm.best_score_breakdown:
        lines.append("best breakdown: " + ", ".join(f"{k} {_num(v)}" for k, v in tm.best_score_breakdown.items()))
    if tm.notes:
        lines.append(f"notes: {tm.notes}")
    lines += [f"  {i}. {s}" for i, s in enumerate(tm.strategies, 1)]
    ctx.emit(tm.to_dict(), "\n".join(lines))
    return 0


def cmd_result(ctx: CliContext) -> int:
    from mateclaw_mem.errors import InvalidInputError

    a = ctx.args
    parts: dict[str, float] = {}
    for item in a.part:
        name, sep, value = item.partition("=")
        try:
            parts[name.strip()] = float(value)
        except ValueError:
            raise InvalidInputError(f"--part {item!r}: expected NAME=NUMBER") from None
        if not sep:
            raise InvalidInputError(f"--part {item!r}: expected NAME=NUMBER")
    out = ctx.services.learning.record_result(
        a.agent, a.slug, a.score, parts, completed=not a.failed, memoryless=a.memoryless, run_id=a.run, actor=CLI
    )
    if out.task is None:
        human = f"recorded memoryless run {out.run.run_id} (score {_num(out.run.score)}); task memory unchanged"
    else:
        t = out.task
        human = (f"recorded run {out.run.run_id}: {t.attempt_count} attempts, best {_num(t.best_score)}, "
                 f"avg {_num(t.avg_score)}, trend {t.score_trend}")
    ctx.emit(out.to_dict(), human)
    return 0


def cmd_reflect(ctx: CliContext) -> int:
    a = ctx.args
    out = ctx.services.learning.reflect(a.agent, a.slug, a.lesson, run_id=a.run, actor=CLI)
    moved = f"; older ones moved to {', '.join(out.archived)}" if out.archived else ""
    ctx.emit(out.to_dict(), f"reflection stored ({out.reflections_kept}/20){moved}")
    return 0


def cmd_enter(ctx: CliContext) -> int:
    a = ctx.args
    out = ctx.services.learning.enter(a.agent, a.slug, memoryless=a.memoryless)
    if ctx.json:
        ctx.emit(out.to_dict())
    else:
        # The run id is the command's result (stdout, first line: `RUN=$(… | head -1 | cut -d' ' -f2)`);
        # stderr only says what to do with it.
        sys.stdout.write(f"run {out.run_id}\n\n{out.text}")
        kind = " (memoryless)" if out.memoryless else ""
        print(f"run {out.run_id} started{kind}; record its score with "
              f"`mateclaw-mem learn result {a.agent} {a.slug} SCORE --run {out.run_id}`", file=sys.stderr)
    return 0


def cmd_lineage(ctx: CliContext) -> int:
    a = ctx.args
    lineage = ctx.services.lineage
    if a.label is not None:
        v = lineage.label(a.agent, a.hash, a.label)
        ctx.emit(v, f"{v['hash'][:12]} labelled {v['label']!r}" if v["label"] else f"{v['hash'][:12]} unlabelled")
        return 0
    data = lineage.versions(a.agent)
    lines = [
        f"{'*' if v['hash'] == data['currentHash'] else ' '} {v['hash'][:12]}  {v['registered_at']}  {v['source']:<10}"
        + (f"  {v['label']}" if v["label"] else "")
        for v in data["versions"]
    ]
    ctx.emit(data, "\n".join(lines) if lines else "no AGENTS.md or SOUL.md yet")
    return 0
