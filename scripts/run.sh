#!/usr/bin/env bash
# Set up (first time, or after pyproject.toml changed) and start the daemon in the foreground on the
# embedded default: ./workspace + ./config/mateclaw.yaml. Arguments go to `mateclaw-mem serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "run: starting mateclaw-mem serve in the foreground; Ctrl-C stops it (the log below gives its address)" >&2
exec .venv/bin/mateclaw-mem serve "$@"
