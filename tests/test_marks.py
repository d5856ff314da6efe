"""The marks table (tests/support/marks.py) names only tests that exist, and the marks it uses are the
ones pyproject.toml registers: a renamed test or a typo fails here instead of quietly dropping a test
from `-m "not slow"` or leaving a slow one in it."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from tests.support.marks import MARKS, TIMEOUTS

TESTS = Path(__file__).parent


def _test_functions(file: Path) -> set[str]:
    tree = ast.parse(file.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_every_key_names_a_test_that_exists() -> None:
    missing = []
    for key in [*MARKS, *TIMEOUTS]:
        file, _, name = key.partition("::")
        path = TESTS / file
        if not path.is_file() or (name and name not in _test_functions(path)):
            missing.append(key)
    assert missing == []


def test_every_mark_is_registered() -> None:
    config = tomllib.loads((TESTS.parent / "pyproject.toml").read_text(encoding="utf-8"))
    registered = {m.split(":", 1)[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}
    used = {m for marks in MARKS.values() for m in marks}
    assert used <= registered, used - registered
    assert {"slow", "subprocess", "browser", "soak", "bench"} <= used
