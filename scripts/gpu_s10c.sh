#!/usr/bin/env bash
# Session 10's last GPU call: the paged batched decode test (its tolerance now on the output's scale),
# then the HF reduce-overhead peer alone (issue 14's compile comparison).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
timeout 60 python3 -m pytest -m cuda -q -p no:cacheprovider tests/backends/cuda/test_attention.py \
  -k "paged_batched" > "$OUT/paged.log" 2>&1; echo "paged test rc=$?"; tail -2 "$OUT/paged.log"
timeout 250 python3 bench/torch_frontend.py --preset llama-3.2-1b --backend cuda --prompt 32 --new 64 \
  --peer-only --json "$OUT/peer.json" > "$OUT/peer.log" 2>&1; echo "peer rc=$?"
grep -v "^\[\|^W1\|Warning\|forward_call\|warn" "$OUT/peer.log" | tail -4
