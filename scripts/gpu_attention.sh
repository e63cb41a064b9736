#!/usr/bin/env bash
# The attention island on the GPU machine (issue 13): the attention cuda tests, compute-sanitizer
# memcheck of one decode and one prefill call, and bench/attention.py. Logs go to $OUT (or ./out).
#   bash scripts/gpu_attention.sh
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
rc=0
echo "== attention cuda tests" | tee -a "$OUT/summary.txt"
timeout 420 python3 -m pytest tests/backends/cuda/test_attention_kernels.py tests/backends/cuda/test_attention.py \
  tests/backends/cuda/test_attention_paged.py \
  -q -p no:cacheprovider -m cuda --maxfail=10 -rs 2>&1 | tee "$OUT/attention_tests.log" | tail -15
rc=$((rc | ${PIPESTATUS[0]})); tail -1 "$OUT/attention_tests.log" >> "$OUT/summary.txt"
if command -v compute-sanitizer >/dev/null; then
  echo "== memcheck (one decode, one prefill)" | tee -a "$OUT/summary.txt"
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
    "tests/backends/cuda/test_attention_kernels.py::test_one_decode_and_one_prefill_on_the_gpu" 2>&1 \
    | tee "$OUT/attention_memcheck.log" | tail -6
  rc=$((rc | ${PIPESTATUS[0]})); grep -E "ERROR SUMMARY|passed|failed" "$OUT/attention_memcheck.log" | tail -3 >> "$OUT/summary.txt"
fi
echo "== bench/attention.py" | tee -a "$OUT/summary.txt"
timeout 300 python3 bench/attention.py --sweep --json "$OUT/attention_bench.json" 2>&1 | tee "$OUT/attention_bench.log"
rc=$((rc | ${PIPESTATUS[0]})); cat "$OUT/attention_bench.log" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
exit $rc
