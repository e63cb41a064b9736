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


def luminal_time(build, dims: dict, dtype) -> tuple[float, int]:
    """Median seconds of the plan search chose, and how many kernel launches it makes."""
    g = lm.Graph()
    build(g, dtype).output("y")
    m = g.compile("cuda", cache=False, profile_dims=dims)
    ex = m._executor
    return ex.profile(dims, input_extents(m.plans[0].nodes, dims), reps=30, warmup=5), ex.stats["launches"]


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


def copy_ceiling(nbytes: int) -> float:
    import torch

    a = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    return 2 * nbytes / torch_time(lambda: b.copy_(a)) / 1e9


def bench_dtype(dt, nbytes: int, ceiling: float) -> list[dict]:
    import torch

    tdt = {lm.bf16: torch.bfloat16, lm.f32: torch.float32}[dt]
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
        ("layer norm", lambda g, d: g.tensor("x", ("r", COLS), d).layer_norm(), {"r": r}, 2,
         lambda: torch.nn.functional.layer_norm(x2, (COLS,))),
        ("rms norm", lambda g, d: g.tensor("x", ("r", COLS), d).rms_norm(), {"r": r}, 2,
         lambda: torch.nn.functional.rms_norm(x2, (COLS,), eps=1e-6)),
    ]  # fmt: skip
    rows = []
    for name, build, dims, passes, tfn in cases:
        moved = passes * nbytes  # bytes an ideal single kernel reads + writes
        t, launches = luminal_time(build, dims, dt)
        tt = torch_time(tfn)
        gbs = moved / t / 1e9
        rows.append({"op": name, "dtype": dt.value, "ms": t * 1e3, "gbs": gbs, "pct": 100 * gbs / ceiling,
                     "torch_ms": tt * 1e3, "torch_gbs": moved / tt / 1e9, "kernels": launches})  # fmt: skip
        print(rows[-1], flush=True)
    return rows


def kernel_chain(n_kernels: int = 200) -> dict:
    """n dependent tiny Add kernels replayed as one CUDA graph: the per-kernel cost. The plan is
    built by hand (the compiler would fuse the chain into one kernel)."""
    from luminal.backends.cuda.kernels import KernelAdd
    from luminal.backends.cuda.runtime import CudaExecutor
    from luminal.egraph.llir import LNode
    from luminal.hlir import Input, Output
    from luminal.shape.expr import num, z

    sh, st = (num(256),), (z,)
    nodes = [LNode(Input("x", lm.f32), (), lm.f32)]
    for k in range(n_kernels):
        nodes.append(LNode(KernelAdd(sh, st, st, lm.f32), (k, 0), lm.f32))
    nodes.append(LNode(Output("y"), (n_kernels,), lm.f32))
    ex = CudaExecutor(nodes)
    assert ex.stats["launches"] == n_kernels, ex.stats
    t = ex.profile({}, {"x": 256}, reps=50, warmup=5)
    got = ex.run({"x": np.ones(256, np.float32)}, {})["y"]
    assert np.allclose(got, n_kernels + 1.0), got[:4]
    return {"op": f"{n_kernels}-kernel chain", "dtype": "f32", "ms": t * 1e3, "us_per_kernel": t / n_kernels * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--json", type=str, default="")
    args = ap.parse_args()
    import torch

    nbytes = args.mb << 20
    ceiling = copy_ceiling(nbytes)
    rows: list[dict] = [{"op": "copy (torch d2d)", "dtype": "-", "gbs": ceiling, "pct": 100.0}]
    for dt in (lm.bf16, lm.f32):
        rows += bench_dtype(dt, nbytes, ceiling)
        torch.cuda.empty_cache()
    rows.append(kernel_chain())
    print(f"{'op':18} {'dtype':6} {'ms':>8} {'GB/s':>8} {'% copy':>7} {'torch ms':>9} {'torch GB/s':>10} kernels")
    for row in rows:
        if "us_per_kernel" in row:
            print(f"{row['op']:18} {row['dtype']:6} {row['ms']:8.3f}   {row['us_per_kernel']:.2f} us/kernel")
        elif "ms" in row:
            print(f"{row['op']:18} {row['dtype']:6} {row['ms']:8.3f} {row['gbs']:8.0f} {row['pct']:6.1f}% "
                  f"{row['torch_ms']:9.3f} {row['torch_gbs']:10.0f} {row['kernels']:7d}")  # fmt: skip
        else:
            print(f"{row['op']:18} {row['dtype']:6} {'':8} {row['gbs']:8.0f} {row['pct']:6.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
