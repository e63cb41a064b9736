"""CUDA kernel benchmark (GPU machine): luminal's kernels vs the copy ceiling and torch, same run.

  python bench/kernels.py [--mb 256] [--json out.json]

Elementwise add / mul / exp and row sum / row softmax on ~`mb` MB per input tensor, in bf16 and
f32: GB/s = bytes read + written / median time (CUDA events around the replayed CUDA graph,
after warm-up, ones-filled inputs). The copy ceiling is a device-to-device copy of the same
size measured here. Then a chain of 200 tiny dependent kernels under graph replay gives the
per-kernel cost. Prints a table; --json writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import luminal as lm  # noqa: E402
from luminal.backends.cuda.backend import input_extents  # noqa: E402

COLS = 4096  # row length of the reductions


def luminal_time(build, dims: dict, dtype) -> float:
    g = lm.Graph()
    build(g, dtype).output("y")
    m = g.compile("cuda", cache=False)
    ex = m._executor
    return ex.profile(dims, input_extents(m.plans[0].nodes, dims), reps=30, warmup=5)


def torch_time(fn, reps: int = 30, warmup: int = 5) -> float:
    import torch

    for _ in range(warmup):
        fn()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in evs:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return float(np.median([a.elapsed_time(b) for a, b in evs])) * 1e-3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--json", type=str, default="")
    args = ap.parse_args()
    import torch

    rows: list[dict] = []
    nbytes = args.mb << 20
    a = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    t_copy = torch_time(lambda: b.copy_(a))
    ceiling = 2 * nbytes / t_copy / 1e9
    rows.append({"op": "copy (torch d2d)", "dtype": "-", "gbs": ceiling, "pct": 100.0, "torch_gbs": ceiling})
    del a, b
    for dt, tdt in ((lm.bf16, torch.bfloat16), (lm.f32, torch.float32)):
        n = nbytes // dt.itemsize
        r = n // COLS
        x = torch.ones(n, dtype=tdt, device="cuda")
        y = torch.ones(n, dtype=tdt, device="cuda")
        x2 = x.view(r, COLS)
        cases = [
            ("add", lambda g, d: g.tensor("x", ("n",), d) + g.tensor("y", ("n",), d), {"n": n}, 3, lambda: x + y),
            ("mul", lambda g, d: g.tensor("x", ("n",), d) * g.tensor("y", ("n",), d), {"n": n}, 3, lambda: x * y),
            ("exp", lambda g, d: g.tensor("x", ("n",), d).exp(), {"n": n}, 2, lambda: x.exp()),
            ("row sum", lambda g, d: g.tensor("x", ("r", COLS), d).sum(axis=1), {"r": r}, 1, lambda: x2.sum(dim=1)),
            ("row softmax", lambda g, d: g.tensor("x", ("r", COLS), d).softmax(axis=-1), {"r": r}, 2,
             lambda: torch.softmax(x2, dim=-1)),
        ]  # fmt: skip
        for name, build, dims, passes, tfn in cases:
            moved = passes * nbytes  # bytes an ideal single kernel reads + writes
            t = luminal_time(build, dims, dt)
            tt = torch_time(tfn)
            gbs = moved / t / 1e9
            rows.append({"op": name, "dtype": dt.value, "ms": t * 1e3, "gbs": gbs, "pct": 100 * gbs / ceiling,
                         "torch_ms": tt * 1e3, "torch_gbs": moved / tt / 1e9})  # fmt: skip
            print(rows[-1], flush=True)
        del x, y, x2
        torch.cuda.empty_cache()
    # per-kernel cost: 200 dependent tiny Adds, replayed as one CUDA graph
    g = lm.Graph()
    x = g.tensor("x", (256,))
    yv = x
    for _ in range(200):
        yv = yv + x
    yv.output("y")
    m = g.compile("cuda", cache=False)
    assert m._executor.stats["launches"] == 200, m._executor.stats
    t = m._executor.profile({}, {"x": 256}, reps=50, warmup=5)
    rows.append({"op": "200-kernel chain", "dtype": "f32", "ms": t * 1e3, "us_per_kernel": t / 200 * 1e6})
    out = np.ones(256, np.float32)
    got = m.run({"x": out})["y"]
    assert np.allclose(got, 201.0), got[:4]
    print(f"{'op':18} {'dtype':6} {'ms':>8} {'GB/s':>8} {'% copy':>7} {'torch ms':>9} {'torch GB/s':>10}")
    for row in rows:
        if "us_per_kernel" in row:
            print(f"{row['op']:18} {row['dtype']:6} {row['ms']:8.3f}   {row['us_per_kernel']:.2f} us/kernel")
        elif "ms" in row:
            print(f"{row['op']:18} {row['dtype']:6} {row['ms']:8.3f} {row['gbs']:8.0f} {row['pct']:6.1f}% "
                  f"{row['torch_ms']:9.3f} {row['torch_gbs']:10.0f}")  # fmt: skip
        else:
            print(f"{row['op']:18} {row['dtype']:6} {'':8} {row['gbs']:8.0f} {row['pct']:6.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
