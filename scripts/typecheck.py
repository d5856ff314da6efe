"""The type checker's gate: mypy over the package, against a baseline that may only shrink.

    .venv/bin/python scripts/typecheck.py            # exit 1 on any error the baseline does not hold
    .venv/bin/python scripts/typecheck.py --update   # write the baseline anew (after fixing some)

The baseline (scripts/typecheck-baseline.txt) counts the errors mypy reported when the checker was
brought in, per file and error code: an error in a file or of a code the baseline does not list, or
more of them than it counts, fails; fewer is reported so the baseline is shrunk with --update. Counts
rather than line numbers, so an edit above an old error does not read as a new one.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "scripts" / "typecheck-baseline.txt"
_ERROR = re.compile(r"^(?P<path>[^:]+):\d+: error: .*\[(?P<code>[a-z-]+)\]$")


def run_mypy() -> tuple[Counter[tuple[str, str]], list[str]]:
    out = subprocess.run([sys.executable, "-m", "mypy", "mateclaw_mem"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode not in (0, 1):  # 2: mypy itself failed (a crash, a bad config)
        sys.exit(f"typecheck: mypy failed to run:\n{out.stdout}{out.stderr}")
    lines = [ln for ln in out.stdout.splitlines() if _ERROR.match(ln)]
    counts: Counter[tuple[str, str]] = Counter()
    for ln in lines:
        m = _ERROR.match(ln)
        assert m is not None
        counts[(m["path"], m["code"])] += 1
    return counts, lines


def read_baseline() -> Counter[tuple[str, str]]:
    counts: Counter[tuple[str, str]] = Counter()
    if BASELINE.exists():
        for ln in BASELINE.read_text(encoding="utf-8").splitlines():
            if ln.strip() and not ln.startswith("#"):
                path, code, n = ln.split()
                counts[(path, code)] = int(n)
    return counts


def main() -> int:
    counts, lines = run_mypy()
    if "--update" in sys.argv[1:]:
        rows = [f"{p} {c} {n}" for (p, c), n in sorted(counts.items())]
        BASELINE.write_text("# mypy errors per file and code when last updated; may only shrink "
                            "(scripts/typecheck.py)\n" + "\n".join(rows) + "\n", encoding="utf-8")
        print(f"typecheck: baseline written: {sum(counts.values())} errors in {len({p for p, _ in counts})} files")
        return 0
    base = read_baseline()
    grown = {k: n for k, n in counts.items() if n > base.get(k, 0)}
    if grown:
        print("typecheck: mypy errors beyond the baseline (fix them; the baseline may only shrink):")
        for ln in lines:
            m = _ERROR.match(ln)
            if m and (m["path"], m["code"]) in grown:
                print(f"  {ln}")
        return 1
    shrunk = sum(base.values()) - sum(counts.values())
    note = f"; {shrunk} fewer than the baseline: run scripts/typecheck.py --update" if shrunk > 0 else ""
    print(f"typecheck: {sum(counts.values())} known mypy errors, none new{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
