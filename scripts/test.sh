#!/usr/bin/env bash
# Set up (first time) and run the whole test suite plus the linter and the type checker. Extra args go to pytest:
#   scripts/test.sh -m "not slow"    # the quick subset (marks: tests/support/marks.py)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
.venv/bin/ruff check mateclaw_mem tests scripts
.venv/bin/python scripts/typecheck.py  # mypy, against a baseline that may only shrink
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
# pytest exits 5 when it collected no tests: that is a failure of the suite, not a pass.
if [ "$rc" -eq 5 ]; then echo "no tests were collected" >&2; exit 1; fi
exit "$rc"
