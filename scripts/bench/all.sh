#!/usr/bin/env bash
# Every figure issue 22 asks for, in one run, printed as one table with its goal and the ratio to
# its reference (the floor server, scripts/bench/floor_server.py; basic-memory; the figures before).
#
#   scripts/bench/all.sh --data LOCOMO_DEV.json --bench aml_bench.py [--quick] [--no-basic-memory]
#
# --data / --bench: the LoCoMo dev split and the AML bench client (not part of this repo; or set
# AML_DATA / AML_BENCH). --quick: fewer repetitions (a smoke run, figures noisier). basic-memory runs
# in its own venv (scripts/bench/vs_basic_memory.py --setup builds it; Python >= 3.12 needed); its
# 50k index takes ~15-25 min once and is kept in $BENCH_KEEP (default ~/.cache/mateclaw-mem/bench/vs-keep).
# --no-basic-memory skips that comparison. Each script's own output goes to $OUT (default a temp
# folder) as <script>.txt; the table is printed last and written to $OUT/table.md.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=scripts/bench/lib.sh
source "$here/lib.sh"
py="$(bench_python)"
data="${AML_DATA:-}"; bench="${AML_BENCH:-}"; quick=0; bm=1
while [ $# -gt 0 ]; do
  case "$1" in
    --data) data="$2"; shift 2 ;;
    --bench) bench="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --no-basic-memory) bm=0; shift ;;
    *) echo "all.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$data" ] || [ ! -f "$data" ] || [ -z "$bench" ] || [ ! -f "$bench" ]; then
  echo "all.sh: give --data LOCOMO_DEV.json and --bench aml_bench.py (not part of this repo)" >&2
  exit 2
fi
out="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/bench-all.XXXXXX")}"
mkdir -p "$out"
export BENCH_FIGURES="$out/figures.jsonl"
: > "$BENCH_FIGURES"
keep="${BENCH_KEEP:-$HOME/.cache/mateclaw-mem/bench/vs-keep}"

run() {  # run NAME CMD...: the script's output to $out/NAME.txt, its table on the terminal as it goes
  local name="$1"; shift
  echo "== $name: $*" >&2
  if ! "$@" > "$out/$name.txt" 2>&1; then
    echo "   $name failed; see $out/$name.txt" >&2
    tail -5 "$out/$name.txt" >&2
  fi
}

if [ "$quick" = 1 ]; then
  adds=200; searches=100; runs=3; edits=10; idle=10; sizes="3000,30000"; rounds=1
else
  adds=600; searches=300; runs=5; edits=25; idle=30; sizes="3000,10000,30000"; rounds=5
fi
run freshness "$py" "$here/freshness.py" --edits "$edits" --burst 1000 --idle 10
run aml_add "$py" "$here/aml_add.py" --adds "$adds" --searches "$searches" --clients 1,4,16
run aml_scale "$py" "$here/aml_scale.py" --data "$data" --sizes "$sizes"
run aml_ranking "$py" "$here/aml_inprocess.py" --data "$data" --bench "$bench"
run daemon_start "$py" "$here/daemon_start.py" --sections 10000 --runs "$runs"
run status_report "$py" "$here/status_report.py" --notes 1000 --runs "$runs"
run daemon_idle "$py" "$here/daemon_idle.py" --seconds "$idle"
if [ "$bm" = 1 ]; then
  run vs_basic_memory "$py" "$here/vs_basic_memory.py" --data "$data" --keep "$keep" --sizes 1000 10000 50000 \
    --rounds "$rounds"
fi
"$py" "$here/_table.py" "$BENCH_FIGURES" | tee "$out/table.md"
echo "(each script's output: $out)" >&2
