#!/usr/bin/env bash
# One command for the GPU machine: the cuda-marked tests, the frontend op suite re-run on the CUDA
# backend, compute-sanitizer memcheck on a subset, and bench/kernels.py. Logs go to $OUT (or ./out).
#   bash scripts/gpu_check.sh [quick | nobench]
# Needs .devpkgs (bash ../shared/device/pack-egglog.sh) carried along for egglog.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
rc=0
echo "== cuda tests" | tee -a "$OUT/summary.txt"
timeout 240 python3 -m pytest tests/backends/cuda -q -p no:cacheprovider --maxfail=10 -rs 2>&1 | tee "$OUT/cuda_tests.log" | tail -15
rc=$((rc | ${PIPESTATUS[0]})); tail -1 "$OUT/cuda_tests.log" >> "$OUT/summary.txt"
[ "${1:-}" = "quick" ] && exit $rc
if [ "${1:-}" != "nobench" ]; then
  echo "== bench" | tee -a "$OUT/summary.txt"
  timeout 240 python3 bench/kernels.py --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | tail -16
  rc=$((rc | ${PIPESTATUS[0]})); tail -14 "$OUT/bench.log" >> "$OUT/summary.txt"
fi
echo "== frontend op suite on cuda" | tee -a "$OUT/summary.txt"
LUMINAL_TEST_BACKEND=cuda timeout 420 python3 -m pytest tests/frontend -q -p no:cacheprovider --maxfail=25 2>&1 \
  | tee "$OUT/frontend_cuda.log" | tail -15
rc=$((rc | ${PIPESTATUS[0]})); tail -1 "$OUT/frontend_cuda.log" >> "$OUT/summary.txt"
if command -v compute-sanitizer >/dev/null; then
  echo "== memcheck" | tee -a "$OUT/summary.txt"
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
    "tests/backends/cuda/test_runtime.py::test_large_reductions_and_elementwise" \
    "tests/backends/cuda/test_runtime.py::test_matches_reference_as_dims_change[index_f32]" \
    "tests/backends/cuda/test_runtime.py::test_matches_reference_as_dims_change[reduce_bf16]" \
    "tests/backends/cuda/test_fused.py::test_row_kernels_on_the_gpu[lm.bf16-127]" \
    "tests/backends/cuda/test_fused.py::test_every_sampled_extraction_agrees_on_the_gpu[layer_norm]" 2>&1 \
    | tee "$OUT/memcheck.log" | tail -8
  rc=$((rc | ${PIPESTATUS[0]})); grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -3 >> "$OUT/summary.txt"
fi
cat "$OUT/summary.txt"
exit $rc
