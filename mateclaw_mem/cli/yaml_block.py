"""`status`'s nested reports as block YAML, without importing PyYAML.

Importing `yaml` compiles its scanner's and resolver's patterns (~20 ms) and its dumper walks every
node in Python (~10 ms): a third of `status` beside a running daemon, for a few dozen plain values.
The reports hold only JSON values (they come from the daemon's JSON or `runtime.status.collect`),
so this writes those: mappings and sequences in block style as `yaml.safe_dump(...,
default_flow_style=False)` lays them out, a string plain only where no YAML reader could take it
for anything else, and double-quoted (JSON's escapes, which YAML's double quotes share) otherwise.
tests/test_yaml_block.py loads what it writes back with PyYAML.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# Plain only when the text starts with a letter, digit, `/` or `_`, holds nothing YAML gives a
# meaning to (`: `, ` #`, flow and quote characters), and is no word or number a resolver reads.
_PLAIN = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_/ .,()+=@%-]*")
_SPECIAL_WORDS = frozenset(("y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf"))
_NUMBERISH = re.compile(r"[-+]?(?:[0-9][0-9_]*(?::[0-5]?[0-9])*|0x[0-9a-fA-F_]+|0o?[0-7_]+|0b[01_]+)"
                        r"(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?")
_DATEISH = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}")
# Escaped beyond what JSON escapes (the C0 controls): what a YAML reader refuses even inside quotes
# (DEL, the C1 controls, surrogates, the two non-characters) and what it would read as a line break
# or a byte-order mark there (NEL, U+2028, U+2029, U+FEFF).
_ESCAPED = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")


def block(key: str, value: Any) -> str:
    """`{key: value}` as `yaml.safe_dump(..., sort_keys=False, default_flow_style=False)` would print
    it, values in document order; the text ends without a newline."""
    return "\n".join(_mapping({key: value}, 0))


def scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        # YAML 1.1 (PyYAML) reads `1e+16` as a string: its floats need a dot before the exponent.
        return text.replace("e", ".0e", 1) if "e" in text and "." not in text else text
    return _string(str(value))


def _string(text: str) -> str:
    if (_PLAIN.fullmatch(text) and not text.endswith(" ") and text.lower() not in _SPECIAL_WORDS
            and not _NUMBERISH.fullmatch(text) and not _DATEISH.match(text)):
        return text
    quoted = json.dumps(text, ensure_ascii=False)
    return _ESCAPED.sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)


def _mapping(value: dict, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for key, item in value.items():
        head = f"{pad}{_string(str(key))}:"
        if isinstance(item, dict) and item:
            lines += [head, *_mapping(item, indent + 2)]
        elif isinstance(item, list | tuple) and item:
            lines += [head, *_sequence(item, indent)]  # PyYAML's indentless sequence under a key
        else:
            lines.append(f"{head} {_empty_or_scalar(item)}")
    return lines


def _sequence(value: list | tuple, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for item in value:
        if isinstance(item, dict) and item:
            first, *rest = _mapping(item, indent + 2)
            lines += [f"{pad}- {first[indent + 2:]}", *rest]
        elif isinstance(item, list | tuple) and item:
            first, *rest = _sequence(item, indent + 2)
            lines += [f"{pad}- {first[indent + 2:]}", *rest]
        else:
            lines.append(f"{pad}- {_empty_or_scalar(item)}")
    return lines


def _empty_or_scalar(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list | tuple):
        return "[]"
    return scalar(value)
