# Shared by the bench shell scripts (sourced, not run): the Python to use, a free port, and a temp
# folder with the daemon they start, both cleaned up on exit. Expects `repo` to be set.

# PYTHON, else the repo's .venv python, else python3.
bench_python() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"
  elif [ -x "$repo/.venv/bin/python" ]; then echo "$repo/.venv/bin/python"
  else echo python3; fi
}

bench_free_port() {
  "$1" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# bench_workdir NAME: sets $work; the daemon whose pid is put in $server_pid is stopped on exit.
bench_workdir() {
  work="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
  server_pid=""
  trap bench_cleanup EXIT
}

bench_cleanup() {
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}

# bench_wait_health PY PORT [TRIES]: wait for the daemon's /health (0.1 s apart); its log on failure.
bench_wait_health() {
  for _ in $(seq 1 "${3:-300}"); do
    if "$1" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$2/health', timeout=1)" 2>/dev/null; then
      return 0
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then cat "$work/server.log" >&2; exit 1; fi
    sleep 0.1
  done
}
