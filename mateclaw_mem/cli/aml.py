"""`mateclaw-mem aml check URL`: the AML Add/Search contract run against any deployment
(conversations/aml_check.py), one PASS/FAIL line per rule.

Exit codes: 0 every rule passes · 1 any rule fails · 2 usage (no key in the named variable).
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
