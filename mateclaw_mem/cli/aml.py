"""`mateclaw-mem aml check URL`: the AML Add/Search contract run against any deployment
(conversations/aml_check.py), one PASS/FAIL line per rule. `aml export FILE` / `aml import FILE`: the
Add/Search store (`aml.store`) moved between SQLite and PostgreSQL (runtime/aml_store.py; the file
format in conversations/aml_transfer.py and docs/postgresql.md).

Exit codes of check: 0 every rule passes · 1 any rule fails · 2 usage (no key in the named variable).
Of export/import: 0 done · 2 a bad file (the line and what is wrong; nothing imported) · 4 the target
store is not empty · 5 a daemon holds the SQLite workspace · 6 configuration · 8 the database is out of reach.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from mateclaw_mem.cli.commands import HELP

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("aml", parents=[common], help=HELP["aml"])
    actions = p.add_subparsers(dest="aml_command", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check", parents=[common], help="run the Add/Search contract against a deployment; exit 1 on any fail",
        description="Send real Add and Search requests (fresh user ids) to URL and check the contract: "
        "synchronous Add then Search, the ids echoed, the result shape, idempotent replay, 409 on a changed "
        "body, the top_k bound, user isolation, content parts, 422 for malformed bodies, and the key when one "
        "is given. Prints PASS/FAIL per rule; the check's users are deleted afterwards where the deployment "
        "offers DELETE /v1/aml/users/{id}. Exit codes: 0 all pass, 1 any fail, 2 usage.",
    )
    check.add_argument("url", help="the deployment's base URL (http://host:8765; a .../v1/aml/add URL works too)")
    check.add_argument("--key-env", metavar="VAR", default=None,
                       help="environment variable holding the API key (sent as Authorization: Bearer)")
    check.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")
    check.set_defaults(func=cmd_check)
    export = actions.add_parser(
        "export", parents=[common], help="write the Add/Search store (aml.store) to a JSON Lines file",
        description="Write the Add/Search store that aml.store names (SQLite: this workspace's; PostgreSQL: the "
        "database in aml.postgres-dsn-env's variable) to FILE from one consistent snapshot: messages with their "
        "ids, sessions, roles, times, owners and attachments, kept image bytes, idempotency records with their "
        "stored answers, model-mode facts and jobs. FILE ending in .gz is gzip'd; - writes to stdout. Daemons "
        "may keep running meanwhile.",
    )
    export.add_argument("file", help="the file to write (.gz: compressed; -: stdout)")
    export.add_argument("--no-facts", action="store_true", help="leave model-mode facts and jobs out")
    export.add_argument("--force", action="store_true", help="replace FILE if it exists")
    export.set_defaults(func=cmd_export)
    imp = actions.add_parser(
        "import", parents=[common], help="load an `aml export` file into an empty Add/Search store",
        description="Load FILE (plain or gzip'd JSON Lines from `aml export`; - reads stdin) into the store aml.store "
        "names, which must hold no Add/Search data yet. One transaction: a bad line rolls everything back and is "
        "named with what is wrong; then the message index is rebuilt through the store's own path. On SQLite no "
        "daemon may run on the workspace; on PostgreSQL import before the daemons take traffic.",
    )
    imp.add_argument("file", help="the file to read (-: stdin)")
    imp.set_defaults(func=cmd_import)
    st = actions.add_parser(
        "status", parents=[common], help="the Add/Search store: backend, migrations, pool, what it holds",
        description="Open the store aml.store names (no daemon needed) and show its backend, where it is, its "
        "schema version and pending migrations and pool (PostgreSQL), and how many messages, users and facts it "
        "holds; with --url, what a running daemon's /health says of it instead. Exit 8 when the database "
        "cannot be reached.",
    )
    st.add_argument("--url", help="a running daemon's base URL: show its /health store report")
    st.set_defaults(func=cmd_status)


def cmd_check(ctx: CliContext) -> int:
    from mateclaw_mem.cli.main import EXIT_ERROR, EXIT_OK
    from mateclaw_mem.conversations.aml_check import check
    from mateclaw_mem.errors import InvalidInputError

    url: str = ctx.args.url
    if not url.startswith(("http://", "https://")):
        raise InvalidInputError(f"URL {url!r} must start with http:// or https://")
    key = None
    if ctx.args.key_env:
        key = os.environ.get(ctx.args.key_env)
        if not key:
            raise InvalidInputError(f"--key-env {ctx.args.key_env}: that environment variable is not set or empty")
    report = check(url, api_key=key, timeout=ctx.args.timeout)
    ctx.emit(report.as_dict(), report.lines())
    return EXIT_OK if report.ok else EXIT_ERROR


def cmd_export(ctx: CliContext) -> int:
    _quiet_pool()
    from mateclaw_mem.runtime.aml_store import export_to

    moved = export_to(ctx.settings, ctx.args.file, facts=not ctx.args.no_facts, force=ctx.args.force)
    if ctx.args.file != "-":  # stdout carries the file itself
        ctx.emit({**moved.as_dict(), "file": ctx.args.file, "store": ctx.settings.aml.store},
                 f"exported {_counts(moved.counts)} of agent {moved.agent!r} from {ctx.settings.aml.store} to "
                 f"{ctx.args.file}")
    return 0


def cmd_import(ctx: CliContext) -> int:
    _quiet_pool()
    from mateclaw_mem.runtime.aml_store import import_from

    moved = import_from(ctx.settings, ctx.args.file)
    ctx.emit({**moved.as_dict(), "file": ctx.args.file, "store": ctx.settings.aml.store},
             f"imported {_counts(moved.counts)} of agent {moved.agent!r} into {ctx.settings.aml.store}; "
             "the message index is rebuilt")
    return 0


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind.replace('_', ' ')}(s)" for kind, n in counts.items()) or "nothing"


def cmd_status(ctx: CliContext) -> int:
    _quiet_pool()
    from mateclaw_mem.cli.yaml_block import block
    from mateclaw_mem.errors import StoreUnavailableError

    if ctx.args.url:
        import httpx

        try:
            health = httpx.get(ctx.args.url.rstrip("/") + "/health", timeout=10).json()
        except (httpx.HTTPError, ValueError) as exc:
            raise StoreUnavailableError(f"no /health answer from {ctx.args.url}: {exc}") from None
        report = health.get("store") or {"backend": "unknown (not a serve --aml-only daemon?)"}
    else:
        from mateclaw_mem.runtime.aml_store import store_report

        report = store_report(ctx.settings)
    ctx.emit(report, block("store", report))
    if report.get("state") == "unavailable" or report.get("reachable") is False:
        raise StoreUnavailableError(str(report.get("reason") or report.get("last_error") or "the store is unavailable"))
    return 0


def _quiet_pool() -> None:
    """psycopg's pool logs each failed connection attempt; on the CLI the error line says it once,
    with the cause (runtime/aml_store.why_unreachable)."""
    import logging

    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
