"""`aml import` of files built to break it (issue 40, hostile tester): JSON nested past Python's
recursion limit, as a record and inside an id list, is an error naming its line (exit 2), not an
"internal error"; nothing is imported and the same store takes a good file afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.runtime.aml_store import import_from
from tests.support.cli_runner import run_one
from tests.test_aml_transfer import _dump, _empty, store_settings

DEEP = 100_000  # (well past the recursion limit of json's C decoder)


def _deep_files(lines: list[str]) -> dict[str, tuple[list[str], str]]:
    msg = next(i for i, line in enumerate(lines) if '"t":"message"' in line)
    nested = "[" * DEEP + "]" * DEEP
    fact = {"t": "fact", "id": 1, "owner": "user-0", "session": "s0", "text": "x", "source_ids": nested,
            "ts_ms": 1, "job_id": 0, "created_ms": 1}
    return {
        "a deep line": ([*lines[:msg], nested, *lines[msg:]], f"line {msg + 1}: nested too deeply"),
        "a deep object": ([*lines[:msg], '{"t":"message","x":' + nested + "}", *lines[msg:]],
                          f"line {msg + 1}: nested too deeply"),
        "a deep id list": ([*lines[:-1], json.dumps(fact), lines[-1]],
                           f"line {len(lines)}: source_ids must be a JSON list of message ids"),
    }


def test_json_nested_past_the_recursion_limit_is_named_by_its_line(tmp_path: Path) -> None:
    lines = _dump(tmp_path)
    target = store_settings(tmp_path, "target")
    for name, (content, says) in _deep_files(lines).items():
        path = tmp_path / "deep.jsonl"
        path.write_text("\n".join(content) + "\n", encoding="utf-8")
        with pytest.raises(InvalidInputError) as err:
            import_from(target, str(path))
        assert says in err.value.message, (name, err.value.message)
        assert _empty(target), f"{name}: something was imported"
        done = run_one({"argv": ["--workspace", str(target.workspace), "--config", str(tmp_path / "target" / "c.yaml"),
                                 "aml", "import", str(path)]})
        assert done["rc"] == 2 and says in str(done["stderr"]), (name, done)
        assert "internal error" not in str(done["stderr"])
    whole = tmp_path / "whole.jsonl"
    whole.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert import_from(target, str(whole)).counts["message"] == 48
