#!/usr/bin/env bash
# attn8 (issue 13): the tensor-core split-KV decode kernel (attention_decode_tc.py) on the GPU machine:
# its decode schedules timed next to the default (CUDA-core) kernel and torch in one run, then the cuda
# tests that run it (every VARIANTS schedule, paged, rope, norm). Logs go to $OUT (or ./out).
#   bash scripts/gpu_attn8.sh     (~4-8 min)
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
rc=0
timeout 280 python3 bench/attention.py --only decode --sweep \
  --variants tc264s3,tc132s4,tc132s6,tc396s2,tc264s2,tc528s2 --json "$OUT/attn8_bench.json" 2>&1 \
  | tee "$OUT/attn8_bench.log"
rc=$((rc | ${PIPESTATUS[0]}))
timeout 290 python3 -m pytest -q -p no:cacheprovider -m cuda --maxfail=10 -rs \
  tests/backends/cuda/test_attention_kernels.py tests/backends/cuda/test_attention_paged.py \
  tests/backends/cuda/test_attention_paged_rope.py tests/backends/cuda/test_attention_norm.py 2>&1 \
  | tee "$OUT/attn8_tests.log" | tail -15
rc=$((rc | ${PIPESTATUS[0]}))
exit $rc
