#!/bin/bash
# The GPU checks, on the GPU machine:
#
#   bash tools/gpu_offline/checks.sh BUNDLE_PARTS_DIR [UNPACK_DIR]
#   bash tools/gpu_offline/checks.sh --installed      # `pip install -e '.[gpu]'` done
#
# With a bundle (make_bundle.sh), unpacks it (its parts c0, c1, ... in
# BUNDLE_PARTS_DIR, or a bundle.tar.xz there) unless UNPACK_DIR already
# holds it (a second command on the same machine); with --installed, runs
# $PYTHON (default: python). Then: TensorFlow and the GPU (check_tf.py); the
# GPU-sensitive supernet tests and `make smoke`'s search side by side; then,
# alone, the search-step and op-choice benchmarks. Logs go to $OUT (default
# /tmp/gpu_checks). Each part has a time limit (seconds, from the
# environment: TESTS_S, BENCH_STEP_S, BENCH_OPS_S) so that the whole run
# fits a lease; what ran past its limit says so in its log (rc=124).
# CHECKS picks the parts (default "tests bench_step bench_ops"); bench_ab
# (not a default) times the search step of this checkout against the one in
# $BASELINE (e.g. `git archive COMMIT | tar -x -C DIR` of an earlier commit),
# alternating A, B, A, B with `search_step.py --sides=search,parts`: the
# only comparison of two versions that one machine's run-to-run spread
# allows (BENCH_AB_S, default 400 s, split over the four runs). On the
# 2026-11-26 H100 the tests and smoke took 225 s and bench_step 167 s (its
# kernels mostly compiled by then): split the parts over two commands where
# one may run 10 minutes.
# A_ARGS and B_ARGS add search_step.py flags to the A (this checkout) and B
# runs (BASELINE=. compares two settings of this checkout, e.g.
# B_ARGS=--controller_placement=default); AB_SIDES picks its sides (default
# search,parts).
# throughput (not a default): issue 48's measurements at 224x224,
# tools/gpu_offline/throughput.sh (THROUGHPUT_S, default 420 s; one JSON
# line per run in $OUT/throughput.jsonl).
# bench_step and bench_ab also trace each timed step once
# (search_step.py --trace_dir); the RunMetadata files come back in
# $OUT/traces.tar for bench/trace_summary.py to read on any machine.
set -u -o pipefail
if [ $# -lt 1 ]; then
  echo "usage: bash tools/gpu_offline/checks.sh BUNDLE_PARTS_DIR [UNPACK_DIR] | --installed" >&2
  exit 2
fi
# Paths as the caller meant them, then the repository root.
PARTS=$1; [ "$PARTS" = --installed ] || PARTS=$(realpath -m "$PARTS")
ROOT=$(realpath -m "${2:-/tmp/tunas_gpu}")
OUT=$(realpath -m "${OUT:-/tmp/gpu_checks}")
cd "$(dirname "$0")/../.." || exit 2
CHECKS=${CHECKS:-tests bench_step bench_ops}
for c in $CHECKS; do
  case $c in tests|bench_step|bench_ops|bench_ab|throughput) ;;
    *) echo "checks.sh: unknown check '$c' in CHECKS (valid: tests bench_step bench_ops bench_ab throughput)" >&2
       exit 2;;
  esac
done
if [[ " $CHECKS " == *" bench_ab "* ]]; then
  BASELINE=$(realpath -m "${BASELINE:-}")
  if [ ! -d "$BASELINE/tunas_search" ]; then
    echo "checks.sh: bench_ab needs BASELINE=DIR holding another checkout's tunas_search/ (got '$BASELINE')" >&2
    exit 2
  fi
fi
want() { [[ " $CHECKS " == *" $1 "* ]]; }
mkdir -p "$OUT" "$ROOT"
T0=$(date +%s); say() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
if [ "$PARTS" = --installed ]; then
  PY=${PYTHON:-python}
else
  PY=python3.11
  if [ ! -x "$ROOT/py/bin/python3.11" ]; then
    if [ -f "$PARTS/bundle.tar.xz" ]; then parts=("$PARTS/bundle.tar.xz")
    else parts=("$PARTS"/c[0-9]*); fi
    if [ ! -f "${parts[0]}" ]; then
      echo "checks.sh: no bundle.tar.xz or parts c0, c1, ... in '$PARTS'" >&2
      exit 2
    fi
    cat "${parts[@]}" | sha256sum
    cat "${parts[@]}" | xz -T0 -dc | tar -C "$ROOT" -xf - || exit 3
    say unpacked
  fi
  source tools/gpu_offline/env.sh "$ROOT"
fi
# Several processes share the GPU and the driver's cache of kernels compiled
# from PTX (TensorFlow 2.15 ships no sm_90 code: the first run compiles).
export TF_FORCE_GPU_ALLOW_GROWTH=true CUDA_CACHE_PATH=$ROOT/cuda_cache \
  CUDA_CACHE_MAXSIZE=4294967296 CUDA_MODULE_LOADING=LAZY TF_CPP_MIN_LOG_LEVEL=1
nvidia-smi -L || echo 'checks.sh: nvidia-smi failed (no NVIDIA driver?)'
"$PY" tools/gpu_offline/check_tf.py > "$OUT/check_tf.txt" 2>&1
tail -2 "$OUT/check_tf.txt"; say check_tf
(command -v nvidia-smi >/dev/null && nvidia-smi dmon -s um -d 2 > "$OUT/dmon.txt" 2>&1 &)
if want tests; then
(timeout "${TESTS_S:-300}" "$PY" -m pytest -v --durations=15 \
   -p no:cacheprovider tests/supernet/test_sampled_widths.py \
   tests/supernet/test_deferred.py tests/tf_internals/test_dead_gradients.py \
   > "$OUT/pytest.txt" 2>&1; printf "\nrc=%s\n" "$?" >> "$OUT/pytest.txt") &
(timeout "${TESTS_S:-300}" "$PY" bin/search.py \
   --flagfile=configs/smoke_cpu.cfg --model_dir="$ROOT/smoke" \
   > "$OUT/smoke.txt" 2>&1; printf "\nsearch rc=%s\n" "$?" >> "$OUT/smoke.txt"
 timeout 60 "$PY" bin/analyze_search.py --model_dir="$ROOT/smoke" \
   >> "$OUT/smoke.txt" 2>&1; printf "\nanalyze rc=%s\n" "$?" >> "$OUT/smoke.txt") &
wait; say tests and smoke
tail -2 "$OUT/pytest.txt"; grep -E 'rc=|search step 400/' "$OUT/smoke.txt"
fi
if want bench_step; then
timeout "${BENCH_STEP_S:-240}" "$PY" bench/search_step.py \
  --search_space=proxylessnas_search --image_size=64 --repeats=2 \
  --trace_dir="$OUT/trace_step" > "$OUT/search_step.txt" 2>&1; printf "\nrc=%s\n" "$?" >> "$OUT/search_step.txt"
say search_step; grep -E 'search_vs_sampled_parts_ratio|rc=' "$OUT/search_step.txt"
fi
if want bench_ops; then
timeout "${BENCH_OPS_S:-240}" "$PY" bench/step_cost.py --op_towers_only \
  --image_size 28 --batch 64 --tower_rounds 4 \
  > "$OUT/step_cost.txt" 2>&1; printf "\nrc=%s\n" "$?" >> "$OUT/step_cost.txt"
say step_cost; grep -E 'op_choices_7_vs_1_ratio|rc=' "$OUT/step_cost.txt"
fi
if want bench_ab; then
for run in a1 b1 a2 b2; do
  code=$PWD; args=${A_ARGS:-}
  [ "${run:0:1}" = b ] && code=$BASELINE && args=${B_ARGS:-}
  # $args unquoted: a list of flags.
  TUNAS_BENCH_CODE=$code timeout $(( ${BENCH_AB_S:-400} / 4 )) "$PY" \
    bench/search_step.py --search_space=proxylessnas_search --image_size=64 \
    --sides="${AB_SIDES:-search,parts}" --repeats=3 $args \
    --trace_dir="$OUT/trace_$run" > "$OUT/ab_$run.txt" 2>&1
  printf "\nrc=%s\n" "$?" >> "$OUT/ab_$run.txt"
  say "ab $run ($code $args)"
  grep -E '"search_ms"|search_vs_sampled_parts_ratio|overhead_share|rc=' "$OUT/ab_$run.txt"
done
fi
if want throughput; then
bash tools/gpu_offline/throughput.sh "$PY" "$OUT"; say throughput
fi
# A lease brings back 8 files: the traces travel as one.
traces=$(cd "$OUT" && ls -d trace_* 2>/dev/null)
if [ -n "$traces" ]; then
  tar -C "$OUT" -cf "$OUT/traces.tar" $traces && (cd "$OUT" && rm -rf $traces)
fi
pkill -f 'nvidia-smi dmon'; say done
