"""Figures for `scripts/bench/all.sh`: each bench script calls `record(...)` next to what it prints;
with `BENCH_FIGURES=FILE` in the environment every call appends one JSON line to FILE (otherwise it
does nothing), and `scripts/bench/_table.py FILE` prints them as one table with their goals."""

from __future__ import annotations

import json
import os


def record(figure: str, ours: float, unit: str, *, ref: float | None = None, ref_name: str = "",
           goal: str = "", met: bool | None = None) -> None:
    """One measured figure: ours, a reference (the floor server, basic-memory) when there is one,
    the goal as the issue words it, and whether it is met (None: no goal)."""
    path = os.environ.get("BENCH_FIGURES")
    if not path:
        return
    row = {"figure": figure, "ours": ours, "unit": unit, "ref": ref, "ref_name": ref_name, "goal": goal, "met": met}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
