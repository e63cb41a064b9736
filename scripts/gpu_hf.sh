#!/usr/bin/env bash
# Issue 14 on the GPU machine: the HF llama through torch.compile(backend="luminal") next to the zoo
# and eager (bench/torch_frontend.py, each translated ATen graph dumped to $OUT/fx), then the
# reduce-overhead peer in a process without luminal (scripts/peer_pure.py: in the bench's process it
# segfaulted on the H100, session 10, even with --peer-only), then the torch-frontend cuda tests.
# Logs go to $OUT (or ./out).
#   bash scripts/gpu_hf.sh     (~6-9 min)
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
rc=0
timeout ${BENCH_TIMEOUT:-240} python3 bench/torch_frontend.py --preset llama-3.2-1b --backend cuda --prompt 32 --new 64 \
  --no-torch-compile --dump-fx "$OUT/fx" --json "$OUT/hf.json" 2>&1 | tee "$OUT/hf.log" \
  | grep -v "^\[\|^W1\|Warning\|forward_call\|warn" | tail -16
rc=$((rc | ${PIPESTATUS[0]}))
timeout ${PEER_TIMEOUT:-240} python3 -X faulthandler scripts/peer_pure.py 2>&1 | tee "$OUT/peer.log" \
  | grep -v "^W1\|warn" | tail -12
rc=$((rc | ${PIPESTATUS[0]}))
timeout ${TEST_TIMEOUT:-150} python3 -m pytest -q -p no:cacheprovider -m cuda --maxfail=5 -rf tests/torch 2>&1 \
  | tee "$OUT/hf_tests.log" | tail -6
rc=$((rc | ${PIPESTATUS[0]}))
exit $rc
