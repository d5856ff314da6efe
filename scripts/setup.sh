#!/usr/bin/env bash
# Create .venv (if missing) and install mateclaw-mem into it. `--dev` adds the test tools.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "mateclaw-mem needs Python >= 3.11 (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
extra=""
[ "${1:-}" = "--dev" ] && extra="[dev]"
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${extra}"
