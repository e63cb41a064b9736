#!/usr/bin/env bash
# Everything GPU-side in one lease: matmul tests + bench, the cuda-marked suite, the frontend op suite
# on the CUDA backend. Logs under $OUT.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
timeout 260 bash scripts/gpu_matmul.sh 2>&1 | tail -80 > "$OUT/matmul_all.txt"
timeout 120 python3 -m pytest tests/backends/cuda -q -p no:cacheprovider --maxfail=10 -x --deselect tests/backends/cuda/test_matmul_gpu.py 2>&1 | tail -25 > "$OUT/cuda_tests.txt"
LUMINAL_TEST_BACKEND=cuda timeout 150 python3 -m pytest tests/frontend -q -p no:cacheprovider --maxfail=25 2>&1 | tail -40 > "$OUT/frontend_cuda.txt"
for f in "$OUT"/*.txt; do echo "== $f"; tail -n 3 "$f"; done
