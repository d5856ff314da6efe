#!/usr/bin/env bash
# Set up (first time) and start the daemon on the embedded default: ./workspace + ./config/mateclaw.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/mateclaw-mem serve "$@"
