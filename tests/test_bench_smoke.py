"""The bench's smoke test: a handful of scripts/bench scripts run as a person runs them (a fresh
process each, this interpreter), at their smallest sizes, must finish and print their table with the
machine's load average under it (and a curve drawn as an SVG chart). Figures are not judged here (they are the bench's to print, never a
test's to assert); that the scripts still run against today's package is.

Also: every script that prints figures prints the load average (scripts/bench/README.md says so), and
every script is listed in that README.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "scripts" / "bench"
LOAD = re.compile(r"^load average: \d+\.\d\d \d+\.\d\d \d+\.\d\d \(\d+ cores\)$", re.M)
# A row of figures: a line with a number in it (the load average's own line aside).
ROW = re.compile(r"^(?!load average:).*\d", re.M)
# The smallest sizes that still run each script's whole path.
SMOKE = {
    "search_scale": ["--sizes", "200", "--queries", "10"],
    "context_build": ["--runs", "5", "--entries", "50", "--daily", "5"],
    "status_report": ["--notes", "20", "--runs", "2"],
    "learning": ["--runs", "10", "--history", "50", "--threads", "2"],
    "dream_scoring": ["--sections", "20"],
    "prefetch": ["--runs", "5", "--daily", "5", "--messages", "50"],
    "mcp_profiles": [],
}
# Scripts that print no figures of their own: a server the others measure against.
NO_TABLE = {"floor_server.py"}


def run(script: str, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, (script, args, proc.stdout[-2000:], proc.stderr[-3000:])
    return proc.stdout


@pytest.mark.parametrize("name", sorted(SMOKE))
def test_a_bench_script_runs_at_its_smallest_size_and_prints_the_load(name: str, tmp_path: Path) -> None:
    figures = tmp_path / "figures.jsonl"
    out = run(f"{name}.py", *SMOKE[name], env={"BENCH_FIGURES": str(figures)})
    lines = out.rstrip("\n").splitlines()
    assert LOAD.match(lines[-1]), out[-1500:]  # the load average closes the output, under the table
    # A table: a heading and at least one row of figures above the load average.
    assert len([line for line in lines[:-1] if line.strip()]) >= 2 and ROW.search(out), out[-1500:]
    if figures.exists():  # all.sh's table of what this script recorded
        rows = [json.loads(line) for line in figures.read_text(encoding="utf-8").splitlines()]
        assert rows and all(isinstance(r["ours"], int | float) for r in rows), rows
        table = run("_table.py", str(figures))
        assert table.startswith("| figure | mateclaw-mem |") and LOAD.search(table), table
        assert all(r["figure"] in table for r in rows), table


def test_a_curve_is_also_drawn_as_an_svg_chart(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    chart = tmp_path / "charts" / "search-scale.svg"
    out = run("search_scale.py", "--sizes", "100", "300", "--queries", "5", "--scan-queries", "2", "--svg", str(chart))
    assert f"chart: {chart}" in out and LOAD.search(out), out
    svg = ET.parse(chart).getroot()
    ns = {"s": "http://www.w3.org/2000/svg"}
    lines = svg.findall("s:polyline", ns)
    assert [ln.findtext("s:title", namespaces=ns) for ln in lines] == ["index p50", "index p95", "scan p50", "scan p95"]
    assert all(len(ln.get("points", "").split()) == 2 for ln in lines)  # one point per size
    texts = " ".join(t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text"))
    assert "load average:" in texts  # the chart carries the load it was measured under, like the table


def _scripts() -> list[Path]:
    return sorted(p for p in BENCH.iterdir() if p.suffix in (".py", ".sh") and not p.name.startswith("_"))


def test_every_script_that_prints_figures_prints_the_load_average() -> None:
    silent = [p.name for p in _scripts() if p.suffix == ".py" and p.name not in NO_TABLE
              and "load_average()" not in (text := p.read_text(encoding="utf-8")) and "getloadavg" not in text]
    assert silent == [], "print _load.load_average() under the table (scripts/bench/_load.py)"


def test_every_script_is_in_the_bench_readme() -> None:
    readme = (BENCH / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in _scripts() if f"`{p.name}`" not in readme]
    assert missing == [], "list each script in scripts/bench/README.md with one line and its typical time"
