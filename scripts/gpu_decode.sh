#!/usr/bin/env bash
# The decode engine on the GPU machine (issues 10, 11, 13): the cuda-marked tests of the engine,
# runtime, numerics, fused GEMVs and attention, then bench/decode.py on the presets given.
#   bash scripts/gpu_decode.sh [tests|bench|all] [models] [peers]
# Logs go to $OUT (or ./out). Needs .devpkgs carried along (egglog).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
what=${1:-all}; models=${2:-llama-3.2-1b}; peers=${3:-luminal}
rc=0
if [ "$what" != bench ]; then
  for t in tests/models/test_engine_gpu.py tests/backends/cuda/test_runtime.py tests/backends/cuda/test_numerics.py \
           tests/backends/cuda/test_gemvfused.py tests/backends/cuda/test_attention_kernels.py \
           tests/backends/cuda/test_attention.py; do
    echo "== $t" | tee -a "$OUT/summary.txt"
    timeout ${TEST_TIMEOUT:-150} python3 -m pytest "$t" -m cuda -q -p no:cacheprovider --maxfail=5 -rf 2>&1 | tee -a "$OUT/tests.log" | tail -6
    rc=$((rc | ${PIPESTATUS[0]})); grep -E "passed|failed|error" "$OUT/tests.log" | tail -1 >> "$OUT/summary.txt"
  done
fi
if [ "$what" != tests ]; then
  echo "== bench/decode.py $models $peers" | tee -a "$OUT/summary.txt"
  timeout ${BENCH_TIMEOUT:-300} python3 bench/decode.py --models "$models" --peers "$peers" --out "$OUT/decode.json" 2>&1 \
    | tee "$OUT/decode.log" | tail -20
  rc=$((rc | ${PIPESTATUS[0]})); tail -8 "$OUT/decode.log" >> "$OUT/summary.txt"
fi
cat "$OUT/summary.txt"
exit $rc
