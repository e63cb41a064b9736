"""One decode step of a zoo preset under Nsight Compute: per-kernel GPU time of the replayed step graph.

    ncu --clock-control none --profile-from-start off --graph-profiling node \
        --metrics gpu__time_duration.sum --csv python3 scripts/ncu_step.py qwen3-0.6b > $OUT/ncu.csv
    python3 scripts/ncu_step.py --table $OUT/ncu.csv      # summary by kernel name (any machine)

The model is compiled and warmed up (prefill + a few decode steps) with profiling off; only the
next decode step runs between cuProfilerStart and cuProfilerStop, so ncu times exactly the kernels
of one replayed decode step (each node alone: no launch gaps). The sum over the kernels against the
step's wall time (printed, CUDA-graph replay) says how much of the step is between kernels.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def table(path: str) -> None:
    """Sum ncu's CSV rows (one per kernel launch) by kernel name, largest first."""
    lines = Path(path).read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    by: dict[str, list[float]] = defaultdict(list)
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = row.get("Metric Unit", "nsecond")
        v = float(row["Metric Value"].replace(",", ""))
        v *= {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, 1e-3)
        by[row["Kernel Name"].split("(")[0]].append(v)
    total = sum(sum(v) for v in by.values())
    n = sum(len(v) for v in by.values())
    print(f"{n} kernels, {total:.1f} us of kernel time")
    for name, v in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {name[:60]:<60} {len(v):>5} {sum(v):>9.1f} us  {sum(v) / len(v):>7.2f} us/launch  "
              f"{100 * sum(v) / total:5.1f}%")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("preset", nargs="?", default="qwen3-0.6b")
    ap.add_argument("--table", help="summarise an ncu CSV instead of running")
    ap.add_argument("--layers", type=int, default=None)
    args = ap.parse_args()
    if args.table:
        table(args.table)
        return
    from cuda.bindings import driver

    from bench.decode import build, prompt
    from luminal.models.engine import Decoder, Sampler

    cfg, model, weights = build(args.preset, args.layers, "bf16", 600)
    dec = Decoder(model.graph, model.cache_shapes, 600, weights, "cuda", model.extra_inputs(), cfg.vocab_size)
    dec.reset()
    tok = dec.next(prompt(16, cfg.vocab_size), Sampler())
    for _ in range(8):
        tok = dec.next([tok], Sampler())
    t = time.perf_counter()
    for _ in range(20):
        tok = dec.next([tok], Sampler())
    wall = (time.perf_counter() - t) / 20
    driver.cuProfilerStart()
    tok = dec.next([tok], Sampler())
    driver.cuProfilerStop()
    print(f"# {args.preset}: decode step wall {wall * 1e6:.1f} us (graph replay + sampling)", file=sys.stderr)


if __name__ == "__main__":
    main()
