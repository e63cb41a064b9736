#!/usr/bin/env bash
# One command for the GPU machine: the fused decode GEMV tests (CPU rule tests + the cuda-marked
# numerics, extraction fuzz, long walks) and bench/gemv_fused.py (fused vs unfused decode blocks at
# llama-3.2-1b / 3.1-8b shapes, lm_head included: the `fused` rows' % copy is the looped GEMV's figure).
# Logs go to $OUT (or ./out): gemvfused_tests.log, gemvfused_bench.log, gemvfused_bench.json, summary.txt.
#   bash scripts/gpu_gemvfused.sh [nobench]
# Needs .devpkgs (bash ../shared/device/pack-egglog.sh) carried along for egglog.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
rc=0
echo "== fused GEMV tests" | tee -a "$OUT/summary.txt"
timeout 140 python3 -m pytest tests/backends/cuda/test_gemvfused.py -m cuda -q -p no:cacheprovider --maxfail=20 -rs \
  --durations=10 2>&1 | tee "$OUT/gemvfused_tests.log" | tail -30
rc=$((rc | ${PIPESTATUS[0]})); tail -1 "$OUT/gemvfused_tests.log" >> "$OUT/summary.txt"
if [ "${1:-}" != "nobench" ]; then
  echo "== bench/gemv_fused.py" | tee -a "$OUT/summary.txt"
  timeout 150 python3 bench/gemv_fused.py --json "$OUT/gemvfused_bench.json" 2>&1 | tee "$OUT/gemvfused_bench.log" | tail -60
  rc=$((rc | ${PIPESTATUS[0]})); tail -60 "$OUT/gemvfused_bench.log" >> "$OUT/summary.txt"
fi
cat "$OUT/summary.txt"
exit $rc
