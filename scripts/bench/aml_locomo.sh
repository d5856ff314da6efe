#!/usr/bin/env bash
# AML Add/Search bench over HTTP: start the daemon's HTTP face on a temp workspace, run
# ../shared/bench/aml_bench.py (LoCoMo dev, all categories) against it, print the table.
#
#   scripts/bench/aml_locomo.sh [extra aml_bench.py flags...]
#
# Env: PYTHON (default: the repo's .venv python, else python3), PORT (default: a free port),
#      AML_DATA (default: <repo>/../shared/bench/locomo/locomo_dev.json), OUT (per-question JSON).
# The server is the daemon itself (`mateclaw-mem serve`), started on a temp workspace.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
shared="$(cd "$repo/.." && pwd)/shared/bench"
data="${AML_DATA:-$shared/locomo/locomo_dev.json}"
bench="$shared/aml_bench.py"
py="${PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x "$repo/.venv/bin/python" ]; then py="$repo/.venv/bin/python"; else py=python3; fi
fi
[ -f "$bench" ] || { echo "aml_bench.py not found at $bench" >&2; exit 2; }
[ -f "$data" ] || { echo "LoCoMo data not found at $data" >&2; exit 2; }

port="${PORT:-$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
work="$(mktemp -d "${TMPDIR:-/tmp}/aml-bench.XXXXXX")"
key="bench-$RANDOM$RANDOM"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# An API key is configured so the bench also exercises the authenticated path.
(cd "$repo" && MATECLAW_API_KEY="$key" MATECLAW_CONFIG= exec "$py" -m mateclaw_mem.cli.main serve \
    --workspace "$work/workspace" --port "$port") >"$work/server.log" 2>&1 &
server_pid=$!

for _ in $(seq 1 200); do
  if "$py" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1)" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$server_pid" 2>/dev/null; then cat "$work/server.log" >&2; exit 1; fi
  sleep 0.1
done

echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo none)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (+local changes)')"
"$py" "$bench" --data "$data" --categories all --run-id "locomo-$(date +%s)" \
  --add-url "http://127.0.0.1:$port/v1/aml/add" --search-url "http://127.0.0.1:$port/v1/aml/search" \
  --auth-header "Authorization: Bearer $key" --progress-every 0 \
  ${OUT:+--out "$OUT"} "$@"
