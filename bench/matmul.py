"""Matmul benchmark (GPU machine): luminal's cuBLASLt host op and decode GEMV next to torch.matmul.

  python bench/matmul.py [--reps 50] [--json out.json]

For each (m, n, k) in LLM shapes (1x2048x8192, 128x2048x8192, 4096^3 and a few more) and dtype
(bf16, f32): y = x @ W^T with W (n, k) row-major (the Linear layout), random inputs (never
zeros), both sides timed the same way: a CUDA graph of `inner` back-to-back calls, replayed
`reps` times between CUDA events after warm-up; the median per call gives TFLOP/s = 2 m n k / t.
f32 runs exact (CUBLAS_COMPUTE_32F, no TF32) on both sides. For m = 1 the GEMV kernel
(KernelGemv through the CUDA runtime) is timed too: GB/s = (n k + k + n) * bytes / t, against the
4.25 TB/s copy ceiling. Prints a table; --json writes the rows. Record results in docs/perf.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

COPY_TBS = 4.25
SHAPES = [(1, 2048, 8192), (1, 8192, 2048), (1, 4096, 4096), (16, 4096, 4096), (128, 2048, 8192),
          (512, 4096, 4096), (4096, 4096, 4096)]  # fmt: skip


def graph_time(enqueue, stream, reps: int, inner: int) -> float:
    """Median seconds per `enqueue(stream)` call: a captured graph of `inner` calls, replayed."""
    from luminal.backends.cuda import driver

    drv = driver._drv()
    for _ in range(3):
        enqueue(stream)
    driver.call("cuStreamBeginCapture", stream, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    for _ in range(inner):
        enqueue(stream)
    graph = driver.call("cuStreamEndCapture", stream)
    exe = driver.call("cuGraphInstantiate", graph, 0)
    for _ in range(3):
        driver.call("cuGraphLaunch", exe, stream)
    evs = [(driver.Event(), driver.Event()) for _ in range(reps)]
    for a, b in evs:
        a.record(stream)
        driver.call("cuGraphLaunch", exe, stream)
        b.record(stream)
    driver.call("cuStreamSynchronize", stream)
    driver.call("cuGraphExecDestroy", exe)
    driver.call("cuGraphDestroy", graph)
    return float(np.median([b.elapsed_ms(a) for a, b in evs])) * 1e-3 / inner


def bench_shape(m: int, n: int, k: int, dtype: str, reps: int) -> dict:
    import torch

    from luminal.backends.cuda import driver
    from luminal.backends.cuda.host.cublaslt import CublasLt
    from luminal.dtype import DType
    from luminal.shape.expr import num

    torch.backends.cuda.matmul.allow_tf32 = False
    tdt = {"bf16": torch.bfloat16, "f32": torch.float32}[dtype]
    ldt = {"bf16": DType.bf16, "f32": DType.f32}[dtype]
    dev = driver.device()
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=tdt, generator=gen)
    w = torch.randn(n, k, device="cuda", dtype=tdt, generator=gen)
    y = torch.empty(m, n, device="cuda", dtype=tdt)
    torch.cuda.synchronize()
    op = CublasLt(num(1), num(m), num(n), num(k), "T", num(k), num(0), "N", num(k), num(0), ldt, ldt, "DEFAULT")
    ptrs = [x.data_ptr(), w.data_ptr()]
    op.prepare({}, y.data_ptr(), ptrs)
    inner = max(1, min(50, int(2e9 // max(1, 2 * m * n * k)) + 1))
    t_lum = graph_time(lambda s: op.launch(s, y.data_ptr(), ptrs, {}), dev.stream, reps, inner)
    ref = x.float() @ w.float().T
    err = (y.float() - ref).abs().max().item() / max(1e-6, ref.abs().max().item())
    ts = torch.cuda.Stream()

    def torch_call(_stream):
        with torch.cuda.stream(ts):
            torch.matmul(x, w.T, out=y)

    t_torch = _torch_graph_time(torch_call, ts, reps, inner)
    flops = 2.0 * m * n * k
    row = {"m": m, "n": n, "k": k, "dtype": dtype, "luminal_us": t_lum * 1e6, "torch_us": t_torch * 1e6,
           "luminal_tflops": flops / t_lum / 1e12, "torch_tflops": flops / t_torch / 1e12,
           "ratio": t_torch / t_lum, "rel_err": err}  # fmt: skip
    if m == 1 and dtype in ("bf16", "f32"):
        row |= gemv_row(n, k, ldt, reps)
    return row


def _torch_graph_time(fn, stream, reps: int, inner: int) -> float:
    import torch

    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(stream)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for _ in range(inner):
            fn(stream)
    for _ in range(3):
        g.replay()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in evs:
        a.record()
        g.replay()
        b.record()
    torch.cuda.synchronize()
    return float(np.median([a.elapsed_time(b) for a, b in evs])) * 1e-3 / inner


def gemv_row(n: int, k: int, dt, reps: int) -> dict:
    from luminal.backends.cuda.kernels.gemv import KernelGemv
    from luminal.backends.cuda.runtime import CudaExecutor
    from luminal.egraph.llir import LNode
    from luminal.hlir import Input, Output
    from luminal.shape.expr import num

    nodes = [LNode(Input("x", dt), (), dt), LNode(Input("w", dt), (), dt),
             LNode(KernelGemv(num(n), num(k), num(k), dt), (0, 1), dt), LNode(Output("y"), (2,), dt)]  # fmt: skip
    ex = CudaExecutor(nodes)
    t = ex.profile({}, {"x": k, "w": n * k}, reps=reps, warmup=5)
    gbs = (n * k + k + n) * dt.itemsize / t / 1e9
    return {"gemv_us": t * 1e6, "gemv_gbs": gbs, "gemv_of_copy": gbs / (COPY_TBS * 1e3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json", type=str, default="")
    args = ap.parse_args()
    rows = [bench_shape(m, n, k, dt, args.reps) for dt in ("bf16", "f32") for m, n, k in SHAPES]
    cols = ("luminal us", 11), ("torch us", 9), ("lum TF/s", 9), ("torch TF/s", 10), ("torch/lum", 9), ("err", 8)
    print(f"{'shape':>18} {'dtype':>5} " + " ".join(f"{name:>{w}}" for name, w in cols))
    for r in rows:
        shape = f"{r['m']:>6}x{r['n']:>5}x{r['k']:>5}"
        times = f"{r['luminal_us']:>11.2f} {r['torch_us']:>9.2f} {r['luminal_tflops']:>9.1f} {r['torch_tflops']:>10.1f}"
        print(f"{shape} {r['dtype']:>5} {times} {r['ratio']:>9.3f} {r['rel_err']:>8.1e}")
    print(f"\nGEMV (m = 1) vs the {COPY_TBS} TB/s copy ceiling")
    for r in rows:
        if "gemv_gbs" in r:
            pct = 100 * r["gemv_of_copy"]
            gemv = f"KernelGemv {r['gemv_us']:8.2f} us {r['gemv_gbs']:8.0f} GB/s ({pct:.0f}% of copy)"
            print(f"  {r['n']:>5}x{r['k']:>5} {r['dtype']:>5}: {gemv}; cuBLASLt {r['luminal_us']:8.2f} us")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
