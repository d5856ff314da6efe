#!/usr/bin/env bash
# Fuzz the HTTP API against its own OpenAPI spec with schemathesis: no 5xx, every response matches
# the documented schema, status and content type, invalid input is refused.
#
#   scripts/bench/schemathesis.sh [--max-examples N] [extra `st run` flags...]
#
# Starts `mateclaw-mem serve` on a temp workspace and a free loopback port (rules mode, no key) and
# runs `st run` against http://127.0.0.1:PORT/openapi.json. Needs the dev extra (schemathesis).
# Env: PYTHON (default: the repo's .venv python), MAX_EXAMPLES (default 25 per operation).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
. "$here/lib.sh"
py="$(bench_python)"
st="$(dirname "$py")/st"
[ -x "$st" ] || { echo "schemathesis not installed: $py -m pip install -e '.[dev]'" >&2; exit 2; }

bench_workdir schemathesis

# Port 0: the daemon picks a free port and logs it.
(cd "$work" && env -u MATECLAW_CONFIG -u MATECLAW_API_KEY "$py" -m mateclaw_mem.cli.main serve \
    --workspace "$work/workspace" --port 0) >"$work/server.log" 2>&1 &
server_pid=$!

url=""
for _ in $(seq 1 300); do
  url="$(grep -o 'listening on http://[^ ]*' "$work/server.log" | head -1 | cut -d' ' -f3 || true)"
  [ -n "$url" ] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then cat "$work/server.log" >&2; exit 1; fi
  sleep 0.1
done
[ -n "$url" ] || { echo "the daemon did not start" >&2; cat "$work/server.log" >&2; exit 1; }

status=0
# From the temp dir: schemathesis and hypothesis keep caches in the working directory, not in the repo.
(cd "$work" && "$st" run "$url/openapi.json" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,negative_data_rejection \
  --max-examples "${MAX_EXAMPLES:-25}" --workers 1 --suppress-health-check all "$@") || status=$?
if grep -q "Traceback" "$work/server.log"; then
  echo "--- the daemon logged a traceback:" >&2
  grep -E "^[A-Za-z_.]+(Error|Exception)\b|Traceback|^  File \"$repo" "$work/server.log" | sort | uniq -c | head -40 >&2
  status=1
fi
exit "$status"
