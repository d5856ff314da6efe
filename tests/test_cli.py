from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mateclaw_mem.cli.main import main


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    for key in [k for k in os.environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    # The current folder decides nothing any more: the workspace is named, the config is none.
    monkeypatch.setenv("MATECLAW_WORKSPACE", str(tmp_path / "workspace"))
    (tmp_path / "empty.yaml").write_text("{}\n", encoding="utf-8")
    monkeypatch.setenv("MATECLAW_CONFIG", str(tmp_path / "empty.yaml"))

    def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
        if stdin is not None:
            import io

            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_init_ls_cat_write_edit_history_undo(cli, tmp_path: Path) -> None:
    assert cli("init")[0] == 0
    assert (tmp_path / "workspace/default/AGENTS.md").exists()
    code, out, _ = cli("ls", "--json")
    assert code == 0 and [r["file"] for r in json.loads(out)] == ["AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"]
    code, out, _ = cli("write", "default", "notes/todo.md", stdin="# Todo\n- buy milk\n")
    assert code == 0
    code, out, _ = cli("cat", "default", "notes/todo.md", "--json")
    data = json.loads(out)
    assert data["content"].startswith("---\nenabled: false\n") and "buy milk" in data["content"]
    assert cli("edit", "default", "notes/todo.md", "--old", "milk", "--new", "oat milk")[0] == 0
    code, _, err = cli("edit", "default", "notes/todo.md", "--old", "bread", "--new", "x")
    assert code == 2 and "not found" in err
    code, _, err = cli("write", "default", "notes/todo.md", "--text", "x", "--expect", data["sha"])
    assert code == 4 and "changed since" in err
    assert cli("enable", "default", "notes/todo.md")[0] == 0
    code, out, _ = cli("history", "default", "notes/todo.md", "--json")
    assert len(json.loads(out)) == 3
    assert cli("undo", "default", "notes/todo.md")[0] == 0
    code, out, _ = cli("cat", "default", "notes/todo.md")
    assert "enabled: false" in out and "oat milk" in out


def test_errors_have_exit_codes_and_no_traceback(cli) -> None:
    assert cli("init")[0] == 0
    code, out, err = cli("cat", "default", "../../etc/passwd")
    assert code == 2 and "'..'" in err and "Traceback" not in err
    code, out, err = cli("cat", "default", "missing.md")
    assert code == 3 and "does not exist" in err
    code, out, _ = cli("cat", "default", "missing.md", "--json")
    assert json.loads(out)["error"]["code"] == "not_found"
    code, _, err = cli("status", "--config", "nope.yaml")
    assert code == 6 and "nope.yaml" in err


def test_help_lists_commands() -> None:
    proc = subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for cmd in ("init", "serve", "status", "ls", "cat", "write", "edit", "history", "undo"):
        assert cmd in proc.stdout
    # --help must not pull in the heavy layers (lazy imports keep start-up fast).
    probe = "import sys; sys.argv=['x','--help']\nfrom mateclaw_mem.cli import main as m\ntry:\n m.main()\nexcept SystemExit: pass\n" \
        "print(sorted(k for k in sys.modules if k.split('.')[0] in ('openai','fastapi','uvicorn','apscheduler','watchdog','mcp')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_serve_starts_seeds_logs_mode_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
    env["MATECLAW_WORKSPACE"] = str(tmp_path / "ws")
    cmd = [sys.executable, "-m", "mateclaw_mem.cli.main", "serve", "--port", "0"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        if "ready" in line or not line:
            break
    log = "".join(lines)
    assert "mode: rules" in log and str(tmp_path / "ws") in log
    assert (tmp_path / "ws/default/MEMORY.md").exists()
    second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert second.returncode == 5 and "already running" in second.stderr
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert "stopped" in proc.stderr.read()


def test_cat_opens_no_database_and_starts_no_thread(cli, tmp_path: Path) -> None:
    assert cli("init")[0] == 0
    state = tmp_path / "workspace" / ".mateclaw"
    before = sorted(p.name for p in state.iterdir())
    # A fresh interpreter, so what `cat` imports and starts is all that is there.
    probe = ("import sys, threading\nfrom mateclaw_mem.cli.main import main\n"
             "code = main(['cat', 'default', 'MEMORY.md'])\n"
             "print(code, 'sqlite3' in sys.modules, threading.active_count())")
    env = dict(os.environ)  # the fixture's MATECLAW_WORKSPACE / MATECLAW_CONFIG
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "0 False 1", out.stderr
    assert sorted(p.name for p in state.iterdir()) == before  # no log.db, index.db or state.db


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_serve_refuses_a_port_that_is_not_one_before_touching_the_workspace(cli, tmp_path: Path, port) -> None:
    with pytest.raises(SystemExit) as exc:
        cli("serve", "--port", port)
    assert exc.value.code == 2
    assert not (tmp_path / "workspace").exists()


def test_commands_names_the_module_of_every_command() -> None:
    import argparse
    import importlib

    from mateclaw_mem.cli.main import COMMAND_MODULES, COMMANDS, _common

    registered = {}
    for name in COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"mateclaw_mem.cli.{name}").register(sub, _common())
        registered.update(dict.fromkeys(sub.choices, name))
    assert registered == COMMANDS


@pytest.mark.parametrize("argv", [
    ["status"], ["--workspace", "ws", "--json", "status", "default"], ["--work=ws", "--js", "ls", "default"],
    ["--conf", "c.yaml", "search", "tomato", "--limit", "3"], ["facts", "list"], ["learn", "show"],
    ["serve", "--port", "0"], ["write-memory", "default", "MEMORY.md", "--strategy", "append", "--text", "x"],
])
def test_one_commands_parser_reads_argv_as_every_parser_does(argv: list[str]) -> None:
    from mateclaw_mem.cli.main import _command, build_parser

    assert _command(argv) == next(a for a in argv if not a.startswith("-") and a not in ("ws", "c.yaml"))
    full, one = build_parser(), build_parser(argv)
    assert len(one._subparsers._group_actions[0].choices) < len(full._subparsers._group_actions[0].choices)
    assert vars(one.parse_args(argv)) == vars(full.parse_args(argv))


@pytest.mark.parametrize("argv", [[], ["-h"], ["--version"], ["--help", "status"], ["--", "status"],
                                  ["--workspace"], ["no-such-command"]])
def test_anything_but_a_command_first_gets_every_parser(argv: list[str]) -> None:
    from mateclaw_mem.cli.main import COMMANDS, build_parser

    choices = build_parser(argv)._subparsers._group_actions[0].choices
    assert set(choices) == set(COMMANDS)


def test_argparse_strings_used_untranslated_read_as_gettext_gave_them(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """With no catalog (Python ships none) argparse's strings skip gettext's disk lookups: the same
    help, and the same usage errors (one of them plural, through ngettext)."""
    import argparse
    import gettext

    from mateclaw_mem.cli import main as cli_main

    def texts() -> tuple[str, str]:
        parser = cli_main.build_parser()
        with pytest.raises(SystemExit):
            parser.parse_args(["search"])  # the query is missing: "the following arguments are required"
        with pytest.raises(SystemExit):
            parser.parse_args(["--workspace"])  # "expected one argument" (ngettext)
        return parser.format_help(), capsys.readouterr().err

    quick = texts()
    assert argparse._ is str  # type: ignore[attr-defined]
    monkeypatch.setattr(argparse, "_", gettext.gettext)
    monkeypatch.setattr(argparse, "ngettext", gettext.ngettext)
    monkeypatch.setattr(cli_main, "_untranslated_argparse", lambda: None)
    assert texts() == quick
    assert "expected one argument" in quick[1] and "required" in quick[1]


@pytest.mark.parametrize("argv", [["--help"], ["-h"], [], ["--workspace", "ws", "--json"]])
def test_help_alone_prints_from_stubs_exactly_what_every_parser_prints(argv: list[str]) -> None:
    """No command: one parser with a stub per command (cli/commands.py), no command module imported,
    and the same top-level help as with every command's parser built."""
    from mateclaw_mem.cli.commands import HELP
    from mateclaw_mem.cli.main import build_parser

    stubbed, full = build_parser(argv), build_parser()
    assert not any(choice._actions for choice in stubbed._subparsers._group_actions[0].choices.values())
    assert stubbed.format_help() == full.format_help()
    assert list(stubbed._subparsers._group_actions[0].choices) == list(full._subparsers._group_actions[0].choices)
    assert list(HELP) == list(full._subparsers._group_actions[0].choices)
    probe = ("import sys\nfrom mateclaw_mem.cli import main as m\ntry:\n m.main(['--help'])\nexcept SystemExit: pass\n"
             "print(sorted(k for k in sys.modules if k.startswith('mateclaw_mem.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout
    assert out.strip().splitlines()[-1] == str(["mateclaw_mem.cli", "mateclaw_mem.cli.commands", "mateclaw_mem.cli.main"])

