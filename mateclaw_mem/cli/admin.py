"""Admin commands: init, status, serve."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("init", parents=[common], help=HELP["init"])
    p.add_argument("agent", nargs="?", help="agent (default: default)")
    p.set_defaults(func=cmd_init, creates_agent=True, creates_workspace=True)

    p = sub.add_parser("status", parents=[common], help=HELP["status"])
    p.add_argument("agent", nargs="?", help="only this agent")
    p.add_argument("--all", action="store_true",
                   help="everything: every last write and each part's full report (index, dreaming, extraction, "
                        "providers, ...); without it a short summary")
    p.set_defaults(func=cmd_status, checks_agent=True)

    p = sub.add_parser("serve", parents=[common], help=HELP["serve"])
    p.add_argument("--host", help="address to bind (default from config: 127.0.0.1)")
    p.add_argument("--port", type=_port, help="port 0-65535 (default from config: 8765; 0 = any free port)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--aml-only", action="store_true",
                   help="only the Add/Search service (/v1/aml/*, /health, OpenAPI): no memory files, watcher or "
                        "scheduler; over aml.store (sqlite: this workspace's .mateclaw/; postgresql: many such "
                        "daemons over one database, docs/postgresql.md)")
    p.set_defaults(func=cmd_serve, creates_workspace=True)


def _port(text: str) -> int:
    # argparse turns this into "argument --port: ..." and exit 2; a bare int would let the OS pick
    # another port for 99999 without a word.
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0-65535)")
    return port


def cmd_init(ctx: CliContext) -> int:
    agent = ctx.args.agent or ctx.settings.default_agent  # not ctx.agent(): this is what creates it
    created = ctx.services.store.ensure_agent(agent)
    where = ctx.services.store.agent_dir(agent).resolve()
    ctx.emit(
        {"agent": agent, "path": str(where), "created": created},
        f"agent {agent!r} at {where}: " + (f"created {', '.join(created)}" if created else "already set up"),
    )
    return 0


def cmd_status(ctx: CliContext) -> int:
    from mateclaw_mem.runtime.daemon_status import from_daemon

    agent = ctx.args.agent
    full = ctx.args.all or ctx.json
    # The configuration first, as every other command reads it: a bad key or environment variable is
    # exit 6 naming it, never the running daemon's report as if this command's settings were fine.
    ctx.settings  # noqa: B018
    # A running daemon has every service open: asking it is ~10x cheaper than building them here.
    data = from_daemon(getattr(ctx.args, "config", None), getattr(ctx.args, "workspace", None), agent)
    if data is None:
        from mateclaw_mem.runtime.status import collect

        if agent:
            ctx.services.store.require_agent(agent)
        # Built as `serve` builds them: an entry `serve` would refuse is exit 6 here too, not a line in
        # a report that otherwise says all is well.
        ctx.services.providers  # noqa: B018
        data = collect(ctx.services, [agent] if agent else None)
    lines = [f"mode: {data['mode']}" + (f" ({data['model']})" if data["model"] else ""),
             f"workspace: {data['workspace']}  (from {data['workspace_source']})",
             f"config: {data['config']}  ({data['config_source']})" if data["config"] else "config: built-in defaults",
             *_model_lines(data.get("model_health")),
             *_daemon_lines(data["daemon"])]
    budgets = data.get("prompt_budget") if isinstance(data.get("prompt_budget"), dict) else {}
    for agent, info in data["agents"].items():
        lines.append(f"\nagent {agent}  (always-on prompt: chars/budget, ~tokens)")
        tokens = {f["file"]: f["tokens"] for f in (budgets.get(agent) or {}).get("files", [])}
        others = 0
        for f in info["files"]:
            if not f["enabled"] and not f.get("oversized"):
                others += 1
                continue
            budget = f"{f['chars']}/{f['ceiling']}" if f["ceiling"] else str(f["chars"])
            flags = "  OVER BUDGET (a person's edit is never cut; trim it by hand)" if f["over_budget"] else ""
            flags += f"  ({f['frontmatter_error']})" if f["frontmatter_error"] else ""
            flags += ("  OVERSIZED (over mate.memory.memory-file-max-bytes: read in parts, facts from its head, "
                      "no machine writes)") if f.get("oversized") else ""
            tok = f"~{tokens[f['file']]}" if f["file"] in tokens else ""
            lines.append(_row(budget, tok, f["file"] + flags))
        block = (budgets.get(agent) or {}).get("structured_block")
        if block:
            omitted = sum(block.get("omitted", {}).values())
            note = f", {omitted} entries left out" if omitted else ""
            lines.append(_row(f"{block['chars']}/{block['budget_chars']}", f"~{block['tokens']}",
                              f"structured block{note}"))
        lines.append(f"  {others} more file(s) not in the prompt (daily notes, archives, structured, tasks)")
        writes = info["last_writes"] if full else info["last_writes"][:SHORT_WRITES]
        if writes:
            lines.append("  last writes:")
            actor_width = max(len(w["actor"]) for w in writes)
            file_width = max(len(w["file"]) for w in writes)
            lines += [f"    {w['at']}  {w['actor']:<{actor_width}}  {w['file']:<{file_width}}  ({w['reason']})"
                      for w in writes]
    for rel, why in (data.get("unreadable_files") or {}).items():
        lines.append(f"UNREADABLE {rel}: {why} (left out of prompts, search and facts; the file is not touched)")
    lines += _interrupted_lines(data.get("interrupted_operations") or {})
    shown = ("mode", "model", "workspace", "workspace_source", "config", "config_source", "daemon", "owner_isolation",
             "agents", "prompt_budget", "model_health", "unreadable_files", "interrupted_operations")
    rest = {key: value for key, value in data.items() if key not in shown}
    if full:
        from mateclaw_mem.cli.yaml_block import block

        # Nested reports read best as indented YAML; --json gives the same data for scripts.
        lines += ["\n" + block(key, value) for key, value in rest.items()]
    else:
        lines += ["", *_summary(rest), f"(`status --all` for everything: every last write, {', '.join(rest)})"]
    ctx.emit(data, "\n".join(lines))
    return 0


SHORT_WRITES = 3  # the latest writes per agent in the short report


def _interrupted_lines(report: dict) -> list[str]:
    """Operations a crash interrupted (runtime/recovery.py): what the start finished, and how; files
    edited by hand since, left alone; journals still open (running, or waiting for the next start)."""
    lines = []
    for e in report.get("recovered") or []:
        lines.append(f"interrupted {e.get('operation')} (run {e.get('run')}) {e.get('outcome')} at start "
                     f"{e.get('at')}: {e.get('how')}")
        lines += [f"  left alone: {f.get('file')}: {f.get('why')}" for f in e.get("left_alone") or []]
    for u in report.get("unfinished") or []:
        state = "running now" if u.get("running") else "interrupted; finished at the next start (or `doctor`)"
        lines.append(f"{u.get('operation')} (run {u.get('run')}): {state}")
    return lines


def _summary(rest: dict) -> list[str]:
    """One line per part that needs a word: what a person acts on (not built, failing, conflicts), and
    when the next dream runs. The full reports are `--all`'s."""
    out = []
    index = rest.get("index") if isinstance(rest.get("index"), dict) else {}
    if index:
        counts = f"{index.get('files_indexed')} of {index.get('files_on_disk')} files indexed"
        out.append(f"index: {counts}" if index.get("built") else f"index: not built ({index.get('hint') or 'reindex'})")
    dreaming = rest.get("dreaming") if isinstance(rest.get("dreaming"), dict) else {}
    if dreaming:
        last = {a: d.get("outcome") for a, d in (dreaming.get("agents") or {}).items() if isinstance(d, dict)}
        ran = ", ".join(f"{a} {o}" for a, o in last.items() if o) or "none yet"
        out.append(f"dreaming: next run {dreaming.get('next_run') or 'never'}; last runs: {ran}"
                   if dreaming.get("enabled") else "dreaming: off")
    extraction = rest.get("extraction") if isinstance(rest.get("extraction"), dict) else {}
    if extraction.get("recent_errors"):
        out.append(f"extraction: {len(extraction['recent_errors'])} recent error(s)")
    providers = (rest.get("providers") or {}).get("providers") if isinstance(rest.get("providers"), dict) else None
    opened = [n for n, p in (providers or {}).items() if isinstance(p, dict) and p.get("circuit") != "closed"]
    if opened:
        out.append(f"providers: circuit open for {', '.join(opened)}")
    conflicts = rest.get("hand_edit_conflicts") if isinstance(rest.get("hand_edit_conflicts"), dict) else {}
    if conflicts.get("count"):
        out.append(f"hand-edit conflicts: {conflicts['count']}")
    return out


def _row(budget: str, tokens: str, name: str) -> str:
    # One layout for files and the structured block, so the columns line up.
    return f"  {budget:>11} {tokens:>7}  {name}"


def _model_lines(health: dict | None) -> list[str]:
    """`model: answering, 840 ms (probed …)` and the steps that failed in the last 24 h."""
    if not health:
        return []
    if "error" in health:
        return [f"model health: unavailable ({health['error']})"]
    probe = health["probe"]
    state = probe["state"]
    if state == "answering":
        line = f"model: answering, {probe['latency_ms']} ms (probed {probe['at']})"
    elif state == "not answering":
        line = f"model: not answering: {probe['error']} (probed {probe['at']})"
    elif state == "probing":
        line = "model: probing now"
    else:
        line = "model: not probed yet (the daemon probes at start; `mateclaw-mem model check` now)"
    out = [line]
    failed = {step: f for step, f in health["failures_24h"].items() if f["failures"]}
    if not failed:
        return [*out, "model failures (24 h): none"]
    out.append("model failures (24 h):")
    for step, f in failed.items():
        kinds = ", ".join(f"{kind} {n}" for kind, n in f["by_kind"].items())
        out.append(f"  {step}: {f['failures']} ({kinds}); last {f['last_at']}: {f['last_reason']}")
    return out


def _daemon_lines(daemon: dict) -> list[str]:
    if not daemon["running"]:
        stale = daemon.get("stale_pid_file")
        return ["daemon: not running" + (f" (stale pid file of pid {stale['pid']} ignored)" if stale else "")]
    head = f"daemon: running (pid {daemon['pid']}" + (f", {daemon['url']}" if daemon["url"] else "")
    head += f", since {daemon['started_at']})"
    if "health_error" in daemon:
        return [head, f"  not answering: {daemon['health_error']}"]
    background = dict((daemon.get("health") or {}).get("background") or {})
    next_runs = background.pop("next_runs", {}) or {}
    out = [head]
    if background:
        out.append("  " + " · ".join(f"{part}: {state}" for part, state in background.items()))
    if next_runs:
        out.append("  next runs: " + ", ".join(f"{job} {when or 'never'}" for job, when in next_runs.items()))
    return out


def cmd_serve(ctx: CliContext) -> int:
    import gc
    import logging

    # Starting allocates ~100k objects that live as long as the daemon, and the cyclic GC walked
    # them again and again while they were made: ~7% of a start (scripts/bench/daemon_start.py).
    # Off until the daemon has started; then `Daemon.run_forever` freezes them out of every later
    # collection (a full one would walk them all: a 50+ ms pause inside some request) and turns it on.
    gc.disable()
    # Before any thread (the page check's below): glibc gives every thread that allocates before the
    # arena limit is set an arena of its own, kept for good and shared round-robin by later threads.
    from mateclaw_mem.runtime import malloc

    malloc.tune()

    logging.basicConfig(level=ctx.args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if ctx.args.aml_only:
        return _serve_aml_only(ctx)
    if ctx.settings.aml.store != "sqlite":
        from mateclaw_mem.errors import ConfigError

        raise ConfigError(f"aml.store: {ctx.settings.aml.store} is served by `mateclaw-mem serve --aml-only` (the "
                          "full daemon keeps Add/Search in the workspace's SQLite files); set aml.store: sqlite "
                          "for `serve`")

    from mateclaw_mem.runtime.heal import begin_check

    # Every page of every database read now, beside the imports that follow (runtime/heal.py says why).
    checked = begin_check(ctx.settings)

    from mateclaw_mem.api.app import create_app
    from mateclaw_mem.runtime.daemon import Daemon

    if ctx.args.log_level != "DEBUG":
        # APScheduler logs every job execution (a heartbeat a minute); our own log lines say what ran.
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
    # Every route after the AML contract's is built just after the daemon listens (api/deferred.py).
    Daemon(ctx.services, host=ctx.args.host, port=ctx.args.port,
           app_factory=lambda s, host: create_app(s, host=host, defer_routes=True), checked=checked).run_forever()
    return 0


def _serve_aml_only(ctx: CliContext) -> int:
    """`serve --aml-only`: runtime/aml_only_daemon.py with api/aml_only_app.py's face; opens no memory file."""
    from mateclaw_mem.api.aml_only_app import create_aml_only_app
    from mateclaw_mem.runtime.aml_only_daemon import AmlOnlyDaemon

    daemon = AmlOnlyDaemon(ctx.settings, host=ctx.args.host, port=ctx.args.port,
                           app_factory=lambda node, host: create_aml_only_app(node, host=host))
    daemon.run_forever()
    return 0
