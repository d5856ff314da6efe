"""Entry point of `mateclaw-mem`.

Exit codes (also in README): 0 ok · 1 error · 2 usage · 3 not found · 4 conflict (the file changed
since it was read) · 5 busy (another run or daemon holds the lock) · 6 configuration error ·
7 model error · 10 nothing to do.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mateclaw_mem.cli import commands as _commands

if TYPE_CHECKING:
    from mateclaw_mem.cli.context import CliContext

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_BUSY = 5
EXIT_CONFIG = 6
EXIT_MODEL = 7
EXIT_UNAVAILABLE = 8  # the store's database cannot be reached now (PostgreSQL down): retry later
EXIT_NOTHING = 10
EXIT_BY_CODE = {
    "not_found": EXIT_NOT_FOUND,
    "conflict": EXIT_CONFLICT,
    "busy": EXIT_BUSY,
    "config": EXIT_CONFIG,
    "disabled": EXIT_CONFIG,  # a feature its setting switched off
    "model": EXIT_MODEL,
    "unavailable": EXIT_UNAVAILABLE,
    "invalid_path": EXIT_USAGE,
    "invalid_input": EXIT_USAGE,
}

# Which module registers each command (cli/commands.py): running one builds only that module's parsers
# (all of them are ~12 ms of argparse, a tenth of `status` beside a daemon). A command missing there
# still works, with every parser built; tests/test_cli.py keeps it complete.
COMMANDS = _commands.COMMANDS
COMMAND_MODULES = _commands.MODULES
_VALUE_OPTIONS = ("--workspace", "--config")  # the global options that take a value


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--workspace", default=argparse.SUPPRESS, metavar="DIR",
                        help="workspace root (env MATECLAW_WORKSPACE; else the config's workspace:, relative to "
                        "the config file; else ~/.local/share/mateclaw-mem/workspace)")
    common.add_argument("--config", default=argparse.SUPPRESS, metavar="PATH",
                        help="settings file (env MATECLAW_CONFIG; else ~/.config/mateclaw-mem/mateclaw.yaml, else "
                        "the source checkout's config/mateclaw.yaml, else built-in defaults)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    return common


def _command(argv: Sequence[str]) -> str | None:
    """The command `argv` runs, read as argparse reads the global options before it (abbreviated
    ones too); None for anything else before it (`-h`, `--version`, a typo): those get every parser."""
    args = iter(argv)
    for arg in args:
        if not arg.startswith("-"):
            return arg
        name = arg.partition("=")[0]
        if len(name) > 2 and any(opt.startswith(name) for opt in _VALUE_OPTIONS):
            if name == arg:
                next(args, None)  # its value
        elif not (len(arg) > 2 and "--json".startswith(arg)):
            return None
    return None


def _untranslated_argparse() -> None:
    """argparse passes each of its strings through gettext, which looks for a catalog of the current
    domain on disk every time (~0.17 ms a call, 150 calls for `--help`: a third of it). When there is
    none (Python ships none), the strings are used as they are - what gettext returns then anyway;
    an installed catalog keeps its translations."""
    import gettext

    if gettext.find(gettext.textdomain()) is None:
        argparse._ = str  # type: ignore[attr-defined]
        argparse.ngettext = lambda singular, plural, n: singular if n == 1 else plural  # type: ignore[attr-defined]


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Every command's parser; with `argv`, only the parsers of the module whose command it runs,
    and for no command at all (`--help`, `--version`, nothing) a stub per command: the top-level
    help lists each command's line (cli/commands.py) and nothing of its arguments."""
    _untranslated_argparse()
    command = _command(argv) if argv is not None else None
    module = COMMANDS.get(command or "")
    common = _common()
    parser = argparse.ArgumentParser(
        prog="mateclaw-mem",
        description="Local Markdown memory for AI assistants.",
        parents=[common],
        epilog="Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 conflict, 5 busy, 6 config, 7 model, "
        "10 nothing to do.",
    )
    from mateclaw_mem import __version__

    parser.add_argument("--version", action="version", version=f"mateclaw-mem {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # Not when a command's name is anywhere in argv (`-- status`): stubs could not run it.
    if argv is not None and command is None and not any(arg in COMMANDS for arg in argv):
        for name, line in _commands.HELP.items():
            sub.add_parser(name, help=line, add_help=False)
        return parser
    for name in (module,) if module else COMMAND_MODULES:
        importlib.import_module(f"mateclaw_mem.cli.{name}").register(sub, common)
    return parser


def _require_agent(ctx: CliContext) -> None:
    """A command that names an agent answers one that was never created the same way as every other
    face (exit 3, naming it and how to create it), before it reads, records or writes anything; only
    `init` creates agents. An omitted agent that means the default is checked by `ctx.agent()`."""
    agent = getattr(ctx.args, "agent", None)
    if getattr(ctx.args, "checks_agent", False):
        return  # the command checks it itself, on the path that needs it (`status` asks the daemon first)
    if isinstance(agent, str) and agent and not getattr(ctx.args, "creates_agent", False):
        ctx.services.store.require_agent(agent)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if getattr(args, "owner", None) == "":
        args.owner = None  # `--owner ""` is no owner, which the services spell None: converted once, here
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_USAGE
    from mateclaw_mem.cli.context import CliContext
    from mateclaw_mem.errors import MateclawError

    ctx = CliContext(args)
    try:
        _require_agent(ctx)
        return int(args.func(ctx) or 0)
    except MateclawError as exc:
        ctx.fail(exc.message, code=exc.code)
        return EXIT_BY_CODE.get(exc.code, EXIT_ERROR)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `mateclaw-mem status | head`: the reader left; nothing to report.
        sys.stderr.close()
        return EXIT_OK
    except Exception as exc:  # a bug of ours: say so in one line; MATECLAW_DEBUG=1 shows the traceback
        import os

        if os.environ.get("MATECLAW_DEBUG"):
            raise
        ctx.fail(f"internal error ({type(exc).__name__}: {exc}); rerun with MATECLAW_DEBUG=1 for details")
        return EXIT_ERROR
    finally:
        ctx.close()


if __name__ == "__main__":
    sys.exit(main())
