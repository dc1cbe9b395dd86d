#!/bin/bash
# Issue 48's GPU measurements in one command (tools/gpu_offline/README.md,
# "Throughput at 224x224"); checks.sh runs it as CHECKS=throughput:
#
#   bash tools/gpu_offline/throughput.sh PYTHON OUT_DIR
#
# Runs bench/throughput.py over RUNS below, most valuable first: graph
# against XLA, float32 against bfloat16 (each comparison inside one process,
# its rounds alternating A B B A), batch 128 and 256, both TuNAS spaces.
# Each run has its own time limit, and all of them end within THROUGHPUT_S
# seconds (default 420): a run that would get less than MIN_RUN_S (default
# 60) before then is skipped, and says so. As each run ends, one JSON line
# (its name, exit status, seconds and the benchmark's JSON, or why it has
# none) is appended to OUT_DIR/throughput.jsonl and the end of its stderr to
# OUT_DIR/throughput_logs.txt: a command stopped at its limit keeps what
# ended before. SMALL=1 rehearses it all on a CPU: 32x32, batch 2, one
# step, and the runs that compile with XLA on the tutorial's tiny space
# (XLA compiles a full space for minutes on a CPU; docs/xla.md).
set -u -o pipefail
if [ $# -ne 2 ]; then
  echo "usage: bash tools/gpu_offline/throughput.sh PYTHON OUT_DIR" >&2
  exit 2
fi
PY=$1
OUT=$(realpath -m "$2")
BUDGET=${THROUGHPUT_S:-420}
MIN_RUN=${MIN_RUN_S:-60}
for n in "$BUDGET" "$MIN_RUN"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "throughput.sh: THROUGHPUT_S and MIN_RUN_S must be whole seconds, got '$n'" >&2; exit 2; }
done
cd "$(dirname "$0")/../.." || exit 2
mkdir -p "$OUT" || exit 2
SIZE=(--image_size=224 --steps=10 --repeats=3)
[ "${SMALL:-0}" = 1 ] && SIZE=(--image_size=32 --steps=1 --repeats=1)
# name, space, training batch, variants, time limit (s). The first run also
# loads the GPU kernels TensorFlow 2.15 compiles from PTX on an H100 (the
# driver caches them for the later runs): it gets the most time.
RUNS=(
  "pnas_b128_graph proxylessnas_search 128 graph:float32,graph:bfloat16 170"
  "pnas_b128_xla proxylessnas_search 128 graph:float32,xla:float32,xla:bfloat16 200"
  "pnas_b256_graph proxylessnas_search 256 graph:float32,graph:bfloat16 110"
  "mnv3_b128_graph mobilenet_v3_like_search 128 graph:float32,graph:bfloat16 130"
  "mnv3_b128_xla mobilenet_v3_like_search 128 graph:bfloat16,xla:bfloat16 200"
  "pnas_b256_xla proxylessnas_search 256 graph:float32,xla:bfloat16 200"
)
JSONL=$OUT/throughput.jsonl
LOGS=$OUT/throughput_logs.txt
DEADLINE=$(( $(date +%s) + BUDGET ))
for run in "${RUNS[@]}"; do
  read -r name space batch variants limit <<< "$run"
  if [ "${SMALL:-0}" = 1 ]; then
    batch=2
    [[ $variants == *xla* ]] && space=examples.my_spaces:tiny
  fi
  left=$(( DEADLINE - $(date +%s) ))
  (( limit > left )) && limit=$left
  if (( limit < MIN_RUN )); then
    echo "{\"run\": \"$name\", \"skipped\": \"${left} s left of THROUGHPUT_S=${BUDGET}\"}" >> "$JSONL"
    echo "throughput.sh: $name skipped (${left} s left)"
    continue
  fi
  began=$(date +%s)
  timeout --kill-after=10 "$limit" "$PY" bench/throughput.py \
    --search_space="$space" --batch_size="$batch" --variants="$variants" \
    "${SIZE[@]}" > "$OUT/run.json" 2> "$OUT/run.err"
  rc=$?
  seconds=$(( $(date +%s) - began ))
  { echo "=== $name (rc=$rc, ${seconds} s, limit ${limit} s)"; tail -40 "$OUT/run.err"; } >> "$LOGS"
  "$PY" - "$name" "$rc" "$seconds" "$OUT/run.json" >> "$JSONL" <<'EOF'
import json, sys
name, rc, seconds, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
line = {'run': name, 'rc': rc, 'seconds': seconds}
try:
  with open(path) as f:
    line['result'] = json.load(f)
except ValueError:
  line['result'] = None  # Killed at its limit (rc 124/137) or failed.
print(json.dumps(line))
EOF
  echo "throughput.sh: $name rc=$rc in ${seconds} s"
  rm -f "$OUT/run.json" "$OUT/run.err"
done
# One line per run and variant: what to read first.
"$PY" - "$JSONL" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
  run = json.loads(line)
  result = run.get('result') or {}
  for name, v in result.get('variants', {}).items():
    print(run['run'], name, v.get('error') or
          f"search {v['search_images_per_s']} img/s, parts "
          f"{v['parts_images_per_s']} img/s, ratio {v['search_vs_parts_ratio']}"
          f", first run {v['first_run_s']['search']} s, GPU "
          f"{v['gpu_utilisation']}")
  if not result.get('variants'):
    print(run['run'], run.get('skipped') or f"rc={run.get('rc')}, no result")
EOF
