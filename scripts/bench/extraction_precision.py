"""How true are the lines rules-mode extraction writes? Precision and recall on labelled messages.

    .venv/bin/python scripts/bench/extraction_precision.py [--data tests/data/rules_extraction_labelled.jsonl]
        [--misses]

Each labelled line is one message from the person with what a careful person would have written from
it (`{"text", "expect": ["profile:<key>: <value>" | "memory: <text>" | "replace: <old> -> <new>"]}`;
the default set mixes LoCoMo dev chat lines, which should mostly write nothing, with desktop-style
messages to an assistant, English and Chinese). Every message goes through rules mode
(`rules_apply.extract` on empty PROFILE.md / MEMORY.md) and the items written are compared with the
expected ones after case, whitespace and punctuation are normalised
(tests/support/extraction_scoring.py; tests/test_rules_precision.py gates precision at >= 0.90).

Prints precision and recall overall, per source and per kind, every written item that was not
expected (with its message), and with --misses every expected item that was not written. The load
average is printed beside the figures: they do not depend on it (no timing), it says what else ran.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _figures import record  # noqa: E402  scripts/bench/_figures.py

from tests.support.extraction_scoring import DATA, Score, load, score  # noqa: E402


def _line(label: str, s: Score) -> str:
    right, wrong, missed = sum(s.right.values()), sum(s.wrong.values()), sum(s.missed.values())
    return (f"{label:<10} precision {s.precision:6.3f}  recall {s.recall:6.3f}   "
            f"written {right + wrong:4d} (right {right}, wrong {wrong})   expected {right + missed:4d}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA, help="labelled JSONL (default: the tests' set)")
    ap.add_argument("--misses", action="store_true", help="also list expected items that were not written")
    args = ap.parse_args()

    rows = load(args.data)
    total = score(rows)
    one, five, fifteen = os.getloadavg()
    print(f"rules-mode extraction on {len(rows)} labelled messages ({args.data})")
    print(f"load average {one:.2f} {five:.2f} {fifteen:.2f} (no timing here; figures do not depend on it)\n")
    print(_line("all", total))
    for source in sorted({r.source.split(":", 1)[0] or "unlabelled" for r in rows}):
        part = [r for r in rows if (r.source.split(":", 1)[0] or "unlabelled") == source]
        print(_line(source, score(part)) + f"   ({len(part)} messages)")

    print("\nper kind            right  wrong  missed")
    for kind in sorted(set(total.right) | set(total.wrong) | set(total.missed)):
        print(f"  {kind:<18}{total.right[kind]:6d}{total.wrong[kind]:7d}{total.missed[kind]:8d}")

    print(f"\nwritten but not expected ({len(total.false_positives)}):")
    for item, text in total.false_positives:
        print(f"  {item}\n      <- {text[:160]}")
    if args.misses:
        print(f"\nexpected but not written ({len(total.misses)}):")
        for item, text in total.misses:
            print(f"  {item}\n      <- {text[:160]}")

    record("rules extraction precision (labelled set)", round(total.precision, 3), "", goal=">= 0.90",
           met=total.precision >= 0.90)
    record("rules extraction recall (labelled set)", round(total.recall, 3), "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
