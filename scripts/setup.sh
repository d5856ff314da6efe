#!/usr/bin/env bash
# Create .venv (if missing) and install mateclaw-mem into it. `--dev` adds the test tools.
#
# The install is editable, so code changes need no reinstall; only pyproject.toml (dependencies,
# entry points, package data) does. .venv/setup-stamp records the sha256 of the pyproject.toml that was
# installed and the extras it was installed with; while both still cover the request, pip is not run
# (only the package's bytecode is brought up to date: compile_bytecode below).
# pip's own output goes to .venv/setup.log and is shown only if it fails.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""  # space-separated
for arg in "$@"; do
  case "$arg" in
    --dev) extras="dev" ;;
    *) echo "usage: scripts/setup.sh [--dev]" >&2; exit 2 ;;
  esac
done

say() { echo "setup: $*" >&2; }
has() { case " $1 " in *" $2 "*) return 0 ;; *) return 1 ;; esac; }

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "mateclaw-mem needs Python >= 3.11 (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
    exit 1
  fi
  say "creating .venv with $("$PY" --version 2>&1)"
  "$PY" -m venv .venv
  say "upgrading pip"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
fi

stamp=.venv/setup-stamp
# Line 1: the sha256 of pyproject.toml; line 2: the extras installed, space-separated.
want_hash=$(.venv/bin/python -c 'import hashlib; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())')
have_hash="" have_extras=""
if [ -f "$stamp" ] && [ -x .venv/bin/mateclaw-mem ]; then
  { read -r have_hash || true; read -r have_extras || true; } <"$stamp"
fi
# The package's bytecode, written now rather than by each start: pip compiles what it installs, but
# not an editable install's source tree, and where PYTHONDONTWRITEBYTECODE=1 is set (some shells, CI
# images, containers) a daemon never writes it, so every start compiled its ~280 modules from source
# again (0.3-0.6 s of a 1 s restart on a 2-core machine: scripts/bench/aml_scale.py). Up to date, this
# is a stat per module; a module edited later is compiled from source again until the next setup, as
# Python does anyway. A syntax error is left for the import to report.
compile_bytecode() {
  [ -d mateclaw_mem ] || return 0
  .venv/bin/python -m compileall -q mateclaw_mem >/dev/null 2>&1 || true
}

missing=""
for extra in $extras; do has "$have_extras" "$extra" || missing="$missing $extra"; done
if [ "$have_hash" = "$want_hash" ] && [ -z "$missing" ]; then
  compile_bytecode
  say ".venv is up to date with pyproject.toml${have_extras:+ (extras: $have_extras)}"
  exit 0
fi

# Extras installed before stay installed (and get updated): run.sh after test.sh keeps the dev tools.
for extra in $have_extras; do has "$extras" "$extra" || extras="$extras $extra"; done
extras=$(echo $extras)  # trim
spec="."
[ -z "$extras" ] || spec=".[$(echo "$extras" | tr ' ' ',')]"
if [ -z "$have_hash" ]; then
  say "installing mateclaw-mem and its dependencies${extras:+ (extras: $extras)} - the first time downloads them, about a minute"
elif [ "$have_hash" != "$want_hash" ]; then
  say "pyproject.toml changed: updating .venv${extras:+ (extras: $extras)}"
else
  say "adding the extras:$missing"
fi
rm -f "$stamp"
# --quiet still lets the build backend print setuptools' editable-install banner: keep it in the log.
if ! .venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$spec" >.venv/setup.log 2>&1; then
  tail -n 30 .venv/setup.log >&2
  echo "setup: pip install -e '$spec' failed; the whole output is in .venv/setup.log" >&2
  exit 1
fi
printf '%s\n%s\n' "$want_hash" "$extras" >"$stamp"
compile_bytecode
say "done: .venv/bin/mateclaw-mem is installed"
