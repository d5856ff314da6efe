"""`cli/yaml_block.py` writes `status`'s nested reports as YAML without PyYAML; PyYAML reads every
one of them back as the value written (seeded random JSON values with hostile strings)."""

from __future__ import annotations

import random

import pytest
import yaml

from mateclaw_mem.cli.yaml_block import block, scalar

# Strings a YAML reader gives a meaning to, or that break a line or a quote.
HOSTILE = ["", " ", "a ", " a", "yes", "No", "ON", "off", "true", "False", "null", "Null", "~", "y", "n",
           "1", "-1", "+1", "0x1F", "0o17", "017", "0b101", "1_000", "1.5", "1.", ".5", "1e3", "1.0e+3", "-.inf",
           ".nan", "1:20", "2026-12-02", "2026-12-02T03:00:00+00:00", "2026-1-2 3:04", "a: b", "a:b", "a #b",
           "#x", "- x", "-x", "? x", "[x]", "{x}", "x, y", "'q'", '"q"', "a\\b", "|", ">", "&a", "*a", "!t",
           "%x", "@x", "`x", "=", "<<", "line\nbreak", "tab\there", "cr\rx", "\x00nul", "\x07bell", "\x7fdel",
           "\x85nel", "\x9fc1", "\u2028ls", "\u2029ps", "\ufeffbom", "\ufffe", "\uffff", "\ud800lone", "😀 emoji",
           "记忆.md", "ß", "log.db", "search_hits", "a/b/c", "x (y)", "v=1", "50%", "me@x", "trailing:",
           "http://127.0.0.1:8799", "C:\\path", "--", "---", "...", "a...b"]


def _text(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(HOSTILE)
    alphabet = "abcXYZ019 _-.:#,'\"[]{}!&*|>%@`/\\\n\t\x00\x85\u2028é记😀\x7f"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def _value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.random()
    if depth < 4 and kind < 0.25:
        return {_text(rng): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    if depth < 4 and kind < 0.45:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return rng.choice([None, True, False, rng.randint(-10**12, 10**12), rng.uniform(-1e6, 1e6),
                       rng.choice([1e16, 1e-7, -2.5e300, 0.0, float("inf"), float("-inf")]), _text(rng)])


@pytest.mark.parametrize("seed", range(40))
def test_pyyaml_reads_back_what_is_written(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        key, value = _text(rng), _value(rng)
        text = block(key, value)
        assert yaml.safe_load(text) == {key: value}, text


def test_every_hostile_string_is_read_back_as_itself_as_key_and_as_value() -> None:
    for text in HOSTILE:
        assert yaml.safe_load(block(text, text)) == {text: text}
        assert yaml.safe_load(block("k", [text, {text: [text]}])) == {"k": [text, {text: [text]}]}


def test_nan_reads_back_as_nan() -> None:
    loaded = yaml.safe_load(block("x", float("nan")))["x"]
    assert loaded != loaded


def test_the_layout_is_pyyamls_block_style() -> None:
    report = {"watcher": {"state": "running (in the daemon, pid 7)", "restarts": 0, "last_error": None,
                          "last_reconcile": {"deep": True, "added": [], "changed": ["a.md", "b c.md"]}},
              "buckets": [{"agent": "default", "runs": 2}, {}], "empty": {}, "at": "2026-12-02T03:00:00+00:00",
              "ratio": 0.5}
    assert block("index", report) == "\n".join([
        "index:",
        "  watcher:",
        "    state: running (in the daemon, pid 7)",
        "    restarts: 0",
        "    last_error: null",
        "    last_reconcile:",
        "      deep: true",
        "      added: []",
        "      changed:",
        "      - a.md",
        "      - b c.md",
        "  buckets:",
        "  - agent: default",
        "    runs: 2",
        "  - {}",
        "  empty: {}",
        '  at: "2026-12-02T03:00:00+00:00"',
        "  ratio: 0.5",
    ])
    assert yaml.safe_load(block("index", report)) == {"index": report}


def test_floats_keep_a_dot_before_the_exponent() -> None:
    assert scalar(1e16) == "1.0e+16" and yaml.safe_load(scalar(1e16)) == 1e16
    assert scalar(2.5e-07) == "2.5e-07" and yaml.safe_load(scalar(2.5e-07)) == 2.5e-07
