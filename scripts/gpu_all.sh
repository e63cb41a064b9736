#!/usr/bin/env bash
# Everything GPU-side in one lease: matmul tests + bench, the cuda-marked suite, the frontend op suite
# on the CUDA backend. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
mkdir -p .devsite && tar -xJf .devpkgs/egglog-py312.tar.xz -C .devsite \
  && python3 -m pip install -q --no-index --no-deps --target .devsite .devpkgs/*.whl || exit 1
export PYTHONPATH=$PWD/.devsite:$PWD
timeout 260 bash scripts/gpu_matmul.sh 2>&1 | tail -60 > "$OUT/matmul_all.txt"
export PYTHONUNBUFFERED=1 LUMINAL_CACHE=$PWD/.lcache HYPOTHESIS_PROFILE=dev
timeout 120 python3 -m pytest tests/backends/cuda -q -p no:cacheprovider --maxfail=10 -x --deselect tests/backends/cuda/test_matmul_gpu.py 2>&1 | tail -25 > "$OUT/cuda_tests.txt"
LUMINAL_TEST_BACKEND=cuda timeout 150 python3 -m pytest tests/frontend -q -p no:cacheprovider --maxfail=25 2>&1 | tail -40 > "$OUT/frontend_cuda.txt"
tail -3 "$OUT"/*.txt
