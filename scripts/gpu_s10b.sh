#!/usr/bin/env bash
# Session 10's third GPU call: the attention cuda tests of the default decode schedule (tc264s3; the
# schedule sweeps' other variants left out), then issue 12's compile table with the torch.compile peer.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
NX=""; python3 -c "import xdist" 2>/dev/null && NX="-n 6"
timeout 150 python3 -m pytest -m cuda -q -rf -p no:cacheprovider $NX tests/backends/cuda/test_attention_kernels.py \
  tests/backends/cuda/test_attention_paged.py tests/backends/cuda/test_attention_norm.py \
  tests/backends/cuda/test_attention_paged_rope.py tests/backends/cuda/test_attention.py \
  -k "(not schedules) or tc264s3" > "$OUT/attn_tests.log" 2>&1
echo "attn tests rc=$? (xdist: ${NX:-no})"; tail -6 "$OUT/attn_tests.log"
timeout 400 python3 bench/compile.py --backend cuda --torch \
  --presets llama-3.2-1b,qwen3-0.6b,qwen2.5-0.5b,gemma-3-1b,whisper-tiny,llama-3.1-8b \
  --json "$OUT/compile.jsonl" > "$OUT/compile.log" 2>&1; echo "compile rc=$?"
grep -v "^\[\|Warning\|warn" "$OUT/compile.log" | tail -40
