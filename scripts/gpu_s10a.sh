#!/usr/bin/env bash
# Session 10's second GPU call: the tensor-core decode kernel as the default (attention cuda tests),
# the HF llama through the luminal backend after the cuDNN-mask fix (issue 14), the reduce-overhead
# peer in a process of its own (it segfaults after luminal ran in the same process), torch cuda tests.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
timeout 170 python3 -m pytest -m cuda -q -x -p no:cacheprovider tests/backends/cuda/test_attention_kernels.py \
  tests/backends/cuda/test_attention_paged.py tests/backends/cuda/test_attention_norm.py \
  tests/backends/cuda/test_attention_paged_rope.py -k "not prefill_schedules" > "$OUT/attn_tests.log" 2>&1
echo "attn tests rc=$?"; tail -5 "$OUT/attn_tests.log"
timeout 200 python3 bench/torch_frontend.py --preset llama-3.2-1b --backend cuda --prompt 32 --new 64 \
  --no-torch-compile --dump-fx "$OUT/fx" --json "$OUT/hf.json" > "$OUT/hf.log" 2>&1; echo "hf rc=$?"
grep -v "^\[\|^W1\|Warning\|forward_call\|warn" "$OUT/hf.log" | tail -14
timeout 130 python3 bench/torch_frontend.py --preset llama-3.2-1b --backend cuda --prompt 32 --new 64 \
  --peer-only --json "$OUT/peer.json" > "$OUT/peer.log" 2>&1; echo "peer rc=$?"
grep -v "^\[\|^W1\|Warning\|forward_call\|warn" "$OUT/peer.log" | tail -4
timeout 80 python3 -m pytest -m cuda -q -x -p no:cacheprovider tests/torch > "$OUT/torch_tests.log" 2>&1
echo "torch tests rc=$?"; tail -4 "$OUT/torch_tests.log"
