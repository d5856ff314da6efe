"""Print the figures `scripts/bench/all.sh` collected (JSON lines from `_figures.record`) as one table.

    python scripts/bench/_table.py FIGURES.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return ""
    text = f"{v:,.4f}" if unit == "" else f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
    return f"{text} {unit}".rstrip()


def main() -> int:
    rows = [json.loads(line) for line in Path(sys.argv[1]).read_text(encoding="utf-8").splitlines() if line.strip()]
    print("| figure | mateclaw-mem | reference | ratio | goal | met |")
    print("|---|---|---|---|---|---|")
    missed = 0
    for r in rows:
        ref = f"{r['ref_name']} {fmt(r['ref'], r['unit'])}" if r["ref"] is not None else ""
        ratio = f"{r['ours'] / r['ref']:.2f}×" if r["ref"] else ""
        met = {True: "✓", False: "✗", None: ""}[r["met"]]
        missed += r["met"] is False
        print(f"| {r['figure']} | {fmt(r['ours'], r['unit'])} | {ref} | {ratio} | {r['goal']} | {met} |")
    print(f"\n{len(rows)} figures, {sum(r['met'] is True for r in rows)} goals met, {missed} missed")
    print(load_average())
    return 0


if __name__ == "__main__":
    sys.exit(main())
