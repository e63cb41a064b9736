#!/usr/bin/env bash
# Session 9's first GPU call: the tensor-core decode kernel's schedules against the default and torch
# (issue 13), then the HF llama through the luminal backend (issue 14, scripts/gpu_hf.sh's bench).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
timeout 200 python3 bench/attention.py --only decode --sweep --variants tc264s3,tc132s4,tc396s2,tc528s2 \
  --json "$OUT/attn8_bench.json" > "$OUT/attn8_bench.log" 2>&1; echo "attn rc=$?"
grep -v "^\[" "$OUT/attn8_bench.log" | tail -30
timeout 330 python3 bench/torch_frontend.py --preset llama-3.2-1b --backend cuda --prompt 32 --new 64 \
  --dump-fx "$OUT/fx" --json "$OUT/hf.json" > "$OUT/hf.log" 2>&1; echo "hf rc=$?"
grep -v "^\[\|Warning\|forward_call" "$OUT/hf.log" | tail -25
