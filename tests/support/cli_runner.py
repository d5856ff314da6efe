"""One process that runs many `mateclaw-mem` commands, one after another, for tests/test_faces_cli.py.

    python tests/support/cli_runner.py          # in the workspace's folder, with the test's environment

Each line on stdin is one command, as JSON: {"argv": [...], "stdin": "text or null", "env": {...}}; each
answer is one JSON line on stdout: {"rc": exit code, "stdout": ..., "stderr": ...}. A command runs
through `mateclaw_mem.cli.main.main`, the function `python -m mateclaw_mem.cli.main` exits with, with
its own stdin, stdout, stderr and environment variables, so a group of commands pays for Python and
the package's imports once instead of once per command (they were most of a command's time). What
only a fresh process shows (the entry point, --help and --version, serve, the MCP stdio server) the
test still runs as fresh processes.

An exception that escapes `main` (a bug: `main` turns its own errors into a message and an exit code)
is answered as exit code 1 with its traceback on stderr, as the interpreter would print it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback


class _Stdin(io.StringIO):
    """A command's stdin: text, and `.buffer` for code that reads bytes."""

    @property
    def buffer(self) -> io.BytesIO:
        return io.BytesIO(self.getvalue().encode("utf-8"))


def run_one(request: dict[str, object]) -> dict[str, object]:
    from mateclaw_mem.cli.main import main

    argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
    extra_env = dict(request.get("env") or {})  # type: ignore[call-overload]
    saved_env = dict(os.environ)
    os.environ.update({str(k): str(v) for k, v in extra_env.items()})
    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = _Stdin(str(request.get("stdin") or ""))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as exc:  # argparse's usage errors, --help
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()
                rc = 1
    finally:
        sys.stdin = saved_stdin
        os.environ.clear()
        os.environ.update(saved_env)
    return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}


def serve(lines: io.TextIOBase, answers: io.TextIOBase) -> None:
    for line in lines:
        if line.strip():
            answers.write(json.dumps(run_one(json.loads(line))) + "\n")
            answers.flush()


if __name__ == "__main__":
    # Answers go to the real stdout, kept aside: a command's own prints are captured per command.
    serve(sys.stdin, sys.stdout)  # type: ignore[arg-type]
