#!/usr/bin/env bash
# Real MCP clients against the daemon, two agents: start `mateclaw-mem serve` on a temp workspace
# with the default agent and `work`, then drive it with the MCP Python SDK (streamable HTTP at
# /agents/<agent>/mcp and /mcp, and stdio `mateclaw-mem mcp --agent <agent>`) and the official MCP
# Inspector CLI (npx; skipped with a message when npx is missing). Every write goes through one
# agent and is read back through it; the other agent must not have it. Prints a table; exit 1 on
# any mismatch (scripts/bench/mcp_clients.py does the driving).
#
#   scripts/bench/mcp_clients.sh [--no-inspector]
#
# Env: PYTHON (default: the repo's .venv python, else python3), PORT (default: a free port).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
. "$here/lib.sh"
py="$(bench_python)"
port="${PORT:-$(bench_free_port "$py")}"
bench_workdir mcp-clients

# Built-in defaults (an empty settings file), whatever the user's or the checkout's config says.
printf '{}\n' >"$work/defaults.yaml"
cli() { (cd "$work" && MATECLAW_CONFIG="$work/defaults.yaml" "$py" -m mateclaw_mem.cli.main "$@" --workspace "$work/workspace"); }
cli init work >/dev/null   # `serve` creates the default agent itself
(cd "$work" && MATECLAW_CONFIG="$work/defaults.yaml" exec "$py" -m mateclaw_mem.cli.main serve \
    --workspace "$work/workspace" --port "$port" --log-level WARNING) >"$work/server.log" 2>&1 &
server_pid=$!

bench_wait_health "$py" "$port" 300

echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo none)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (+local changes)')"
echo "daemon: http://127.0.0.1:$port  agents: $(cd "$work/workspace" && ls -d */ | tr -d / | tr '\n' ' ')"
status=0
(cd "$repo" && "$py" scripts/bench/mcp_clients.py --url "http://127.0.0.1:$port" --workspace "$work/workspace" \
    --config "$work/defaults.yaml" --python "$py" "$@") || status=$?
exit "$status"
