#!/usr/bin/env bash
# AML Add/Search bench over HTTP: start the daemon's HTTP face on a temp workspace, run the AML
# bench client (aml_bench.py, LoCoMo dev, all categories) against it, print the table.
#
#   scripts/bench/aml_locomo.sh --data LOCOMO.json --bench aml_bench.py [extra aml_bench.py flags...]
#
# Neither file ships with this repo: pass their paths (or set AML_DATA / AML_BENCH).
# Env: PYTHON (default: the repo's .venv python, else python3), PORT (default: a free port),
#      AML_DATA, AML_BENCH (instead of --data / --bench), OUT (per-question JSON).
# The server is the daemon itself (`mateclaw-mem serve`), started on a temp workspace.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
data="${AML_DATA:-}"
bench="${AML_BENCH:-}"
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --data) data="${2:-}"; shift 2 || { echo "aml_locomo.sh: --data needs a path" >&2; exit 2; } ;;
    --bench) bench="${2:-}"; shift 2 || { echo "aml_locomo.sh: --bench needs a path" >&2; exit 2; } ;;
    *) extra+=("$1"); shift ;;
  esac
done
usage="usage: scripts/bench/aml_locomo.sh --data LOCOMO_DEV.json --bench aml_bench.py [aml_bench.py flags...]
  (or AML_DATA=... AML_BENCH=...); the LoCoMo dev split and the AML bench client are not part of this repo"
[ -n "$data" ] && [ -n "$bench" ] || { echo "$usage" >&2; exit 2; }
[ -f "$bench" ] || { echo "aml_locomo.sh: aml_bench.py not found at $bench" >&2; echo "$usage" >&2; exit 2; }
[ -f "$data" ] || { echo "aml_locomo.sh: LoCoMo data not found at $data" >&2; echo "$usage" >&2; exit 2; }
. "$here/lib.sh"
py="$(bench_python)"

port="${PORT:-$(bench_free_port "$py")}"
bench_workdir aml-bench
key="bench-$RANDOM$RANDOM"

# An API key is configured so the bench also exercises the authenticated path.
# Built-in defaults (an empty settings file), whatever the user's or the checkout's config says.
printf '{}\n' >"$work/defaults.yaml"
(cd "$repo" && MATECLAW_API_KEY="$key" MATECLAW_CONFIG="$work/defaults.yaml" exec "$py" -m mateclaw_mem.cli.main serve \
    --workspace "$work/workspace" --port "$port") >"$work/server.log" 2>&1 &
server_pid=$!

bench_wait_health "$py" "$port" 200

echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo none)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (+local changes)')"
"$py" "$bench" --data "$data" --categories all --run-id "locomo-$(date +%s)" \
  --add-url "http://127.0.0.1:$port/v1/aml/add" --search-url "http://127.0.0.1:$port/v1/aml/search" \
  --auth-header "Authorization: Bearer $key" --progress-every 0 \
  ${OUT:+--out "$OUT"} ${extra[@]+"${extra[@]}"}
