#!/usr/bin/env bash
# Everything GPU-side in one lease: the matmul runner (tests + bench) then the CUDA-core runner (cuda
# tests, the frontend op suite on the CUDA backend, memcheck; its kernel bench is skipped). Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
rc=0
timeout 270 bash scripts/gpu_matmul.sh || rc=1
timeout 300 bash scripts/gpu_check.sh nobench || rc=1
exit $rc
