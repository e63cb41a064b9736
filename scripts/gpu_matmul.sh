#!/usr/bin/env bash
# One command for the GPU machine: the matmul tests (CPU rule tests + the cuda-marked numerics and
# extraction fuzz) and bench/matmul.py (cuBLASLt and the decode GEMV next to torch.matmul).
# Logs go to $OUT (or ./out): matmul_tests.log, matmul_bench.log, matmul_bench.json, summary.txt.
#   bash scripts/gpu_matmul.sh [nobench]
# Needs .devpkgs (bash ../shared/device/pack-egglog.sh) carried along for egglog; the GPU image
# already has torch, cuda-bindings, cuda-pathfinder and the nvidia-cublas (cu13) wheel.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
python3 -c "from luminal.backends.cuda.host import lt; print('cublasLt', lt.version())" | tee -a "$OUT/gpu.txt"
rc=0
echo "== matmul tests" | tee -a "$OUT/summary.txt"
timeout 300 python3 -m pytest tests/backends/cuda/test_matmul_rules.py tests/backends/cuda/test_matmul_host.py \
  tests/backends/cuda/test_matmul_gpu.py tests/egraph/test_matmul_flatten.py -q -p no:cacheprovider --maxfail=20 -rs \
  --durations=10 2>&1 | tee "$OUT/matmul_tests.log" | tail -30
rc=$((rc | ${PIPESTATUS[0]})); tail -1 "$OUT/matmul_tests.log" >> "$OUT/summary.txt"
if [ "${1:-}" != "nobench" ]; then
  echo "== bench/matmul.py" | tee -a "$OUT/summary.txt"
  timeout 240 python3 bench/matmul.py --json "$OUT/matmul_bench.json" 2>&1 | tee "$OUT/matmul_bench.log" | tail -25
  rc=$((rc | ${PIPESTATUS[0]})); tail -22 "$OUT/matmul_bench.log" >> "$OUT/summary.txt"
  echo "== bench/gemv_variants.py" | tee -a "$OUT/summary.txt"
  timeout 200 python3 bench/gemv_variants.py --json "$OUT/gemv.json" 2>&1 | tee "$OUT/gemv.log" | tail -4
  rc=$((rc | ${PIPESTATUS[0]})); tail -3 "$OUT/gemv.log" >> "$OUT/summary.txt"
fi
cat "$OUT/summary.txt"
exit $rc
