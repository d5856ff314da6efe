#!/usr/bin/env bash
# Restarts after kill -9 with extraction work pending, under every Python we can find: one line of
# counts per interpreter (scripts/bench/restarts.py: restarts, up, hung, exited).
#
#   scripts/bench/restarts.sh [restarts.py flags, e.g. --restarts 20 --timeout 20]
#
# Env: PYTHONS (space-separated interpreters; default: the repo's .venv python plus every
#      ~/.pyenv/versions/3.1[1-9]*/bin/python). An interpreter other than the repo's .venv gets a
#      throwaway venv in a temp dir with this checkout installed into it (`pip install -e`, from
#      whatever index pip is configured for), removed afterwards.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/restarts-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT

pythons="${PYTHONS:-}"
if [ -z "$pythons" ]; then
  [ -x "$repo/.venv/bin/python" ] && pythons="$repo/.venv/bin/python"
  for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[1-9]*/bin/python; do
    [ -x "$p" ] && pythons="$pythons $p"
  done
fi
[ -n "$pythons" ] || { echo "no Python found; set PYTHONS" >&2; exit 2; }

for py in $pythons; do
  run="$py"
  if [ "$py" != "$repo/.venv/bin/python" ]; then
    venv="$work/venv-$("$py" -c 'import platform; print(platform.python_version())')"
    if ! "$py" -m venv "$venv" || ! "$venv/bin/pip" install -q -e "$repo" >"$work/pip.log" 2>&1; then
      echo "$py: could not make a venv with mateclaw-mem installed (see pip output below)" >&2
      tail -5 "$work/pip.log" >&2 || true
      continue
    fi
    run="$venv/bin/python"
  fi
  "$run" "$here/restarts.py" "$@" || echo "$py: restarts.py failed" >&2
done
