"""GEMV schedule sweep (GPU machine): every GemvVariant preset of kernels/gemv.py on decode shapes.

  python bench/gemv_variants.py [--json out.json] [--reps 30] [--dtypes f32,bf16] [--variants a,b]

For each dtype and (m = 1) x n x k in LLM decode shapes, each preset in gemv.VARIANTS is rendered
by the one generator (KernelGemv.render(slots, variant)), compiled once per shape with NVRTC and
launched through the driver. Random inputs (uniform in [-1, 1], never zeros); the output buffer is
filled with NaN first and a result whose max |y - ref| / max |ref| (ref in f64 by numpy) is over
the dtype's tolerance fails the run (exit 1). Timing: a CUDA graph of back-to-back launches that
cycle through enough copies of W (>= 256 MB) that the 50 MB L2 never holds the W being read,
replayed `reps` times between CUDA events after warm-up; the median per launch gives GB/s =
(n k + k + n) * bytes / t, against a device-to-device copy measured in the same run (bench/kernels.py).
Prints one table (plus registers and resident blocks per SM of each variant) and the variant
whose worst shape is best per dtype; --json writes the rows. Switch the production schedule with
gemv.DEFAULT.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

SHAPES = [(1, 2048, 8192), (1, 8192, 2048), (1, 4096, 4096), (1, 4096, 14336), (1, 14336, 4096), (1, 128256, 2048)]
ROTATE_BYTES = 256 << 20  # W copies cycled per graph: well past the 50 MB L2
LAUNCHES = 16  # kernel launches per graph replay (at least one per W copy)
TOL = {"f32": 1e-4, "bf16": 1e-2, "f16": 2e-3}  # max |y - ref| / max |ref|


def graph_of(func, grid: int, block: int, ptr_sets: list[list[int]]):
    """A chain of launches of `func`, one per pointer set (the Params must outlive the graph)."""
    from luminal.backends.cuda import driver

    g = driver.Graph()
    params = [driver.Params(p) for p in ptr_sets]
    for p in params:
        g.add_kernel(driver.kernel_node_params(func, grid, block, 0, p))
    g.instantiate()
    return g, params


def time_graph(g, stream, reps: int, per_replay: int) -> float:
    """Median seconds per launch of a graph holding `per_replay` launches."""
    from luminal.backends.cuda import driver

    for _ in range(3):
        g.launch(stream)
    evs = [(driver.Event(), driver.Event()) for _ in range(reps)]
    for a, b in evs:
        a.record(stream)
        g.launch(stream)
        b.record(stream)
    driver.call("cuStreamSynchronize", stream)
    return float(np.median([b.elapsed_ms(a) for a, b in evs])) * 1e-3 / per_replay


def bench_shape(dt, n: int, k: int, variants: dict, reps: int, ceiling: float) -> list[dict]:
    from luminal.backends.cuda import driver, nvrtc
    from luminal.backends.cuda.kernel import source
    from luminal.backends.cuda.kernels.gemv import KernelGemv
    from luminal.shape.expr import num

    dev, drv = driver.device(), driver._drv()
    rng = np.random.default_rng(n * 100003 + k)
    x = (rng.random(k, dtype=np.float32) * 2 - 1).astype(dt.np)
    w = (rng.random((n, k), dtype=np.float32) * 2 - 1).astype(dt.np)
    ref = w.astype(np.float64) @ x.astype(np.float64)
    wbytes = w.nbytes
    pitch = -(-wbytes // 256) * 256
    copies = max(2, math.ceil(ROTATE_BYTES / wbytes))
    wbuf, xbuf = driver.DeviceBuffer(pitch * copies), driver.DeviceBuffer(x.nbytes)
    ybuf, dims = driver.DeviceBuffer(n * dt.itemsize), driver.DeviceBuffer(8)
    driver.htod(wbuf.ptr, w, dev.stream)
    for c in range(1, copies):
        driver.dtod(wbuf.ptr + c * pitch, wbuf.ptr, wbytes, dev.stream)
    driver.htod(xbuf.ptr, x, dev.stream)
    op = KernelGemv(num(n), num(k), num(k), dt)
    kernels = {name: op.render({}, v) for name, v in variants.items()}
    mod = driver.Module(nvrtc.compile_cubin(source(list(kernels.values()))))
    launches = copies * max(1, -(-LAUNCHES // copies))
    moved = (n * k + k + n) * dt.itemsize
    rows = []
    for name, kern in kernels.items():
        (ln,) = kern.launches
        func, grid = mod.function(ln.name), int(ln.grid.evaluate({}))
        regs = driver.call("cuFuncGetAttribute", drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, func)
        occ = driver.call("cuOccupancyMaxActiveBlocksPerMultiprocessor", func, ln.block, 0)
        driver.memset8(ybuf.ptr, 0xFF, ybuf.nbytes, dev.stream)  # NaN in f32 / f16 / bf16
        ptrs = [[ybuf.ptr, xbuf.ptr, wbuf.ptr + (i % copies) * pitch, dims.ptr] for i in range(launches)]
        g, _params = graph_of(func, grid, ln.block, ptrs)
        g.launch(dev.stream)
        got = np.empty(n, dt.np)
        driver.dtoh(got, ybuf.ptr, dev.stream)
        dev.synchronize()
        err = float(np.max(np.abs(got.astype(np.float64) - ref)) / np.max(np.abs(ref)))
        ok = bool(err <= TOL[dt.value])  # False for NaN too
        t = time_graph(g, dev.stream, reps, launches)
        g.destroy()
        gbs = moved / t / 1e9
        rows.append({"dtype": dt.value, "m": 1, "n": n, "k": k, "variant": name, "us": t * 1e6, "gbs": gbs,
                     "pct": 100 * gbs / ceiling, "regs": int(regs), "blocks_per_sm": int(occ), "grid": grid,
                     "rel_err": err, "ok": ok})  # fmt: skip
        r = rows[-1]
        print(f"{r['dtype']:>5} {n:>6}x{k:<6} {name:22} {r['us']:9.2f} {gbs:8.0f} {r['pct']:6.1f}% "
              f"{r['regs']:5d} {r['blocks_per_sm']:4d} {err:9.1e}{'' if ok else '  WRONG'}", flush=True)  # fmt: skip
    return rows


def main() -> None:
    from bench.kernels import copy_ceiling
    from luminal.backends.cuda import driver
    from luminal.backends.cuda.kernels.gemv import DEFAULT, VARIANTS
    from luminal.dtype import DType

    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=str, default="")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--dtypes", type=str, default="f32,bf16")
    ap.add_argument("--variants", type=str, default="", help="comma-separated preset names (default: all)")
    args = ap.parse_args()
    variants = {v: VARIANTS[v] for v in args.variants.split(",")} if args.variants else VARIANTS
    driver.device()
    ceiling = copy_ceiling(512 << 20)
    print(f"copy ceiling (torch d2d, 512 MB): {ceiling:.0f} GB/s")
    cols = f"{'dtype':>5} {'n x k':13} {'variant':22} {'us':>9} {'GB/s':>8} {'% copy':>7}"
    print(cols + f" {'regs':>5} {'b/SM':>4} {'rel err':>9}")
    rows = []
    for d in args.dtypes.split(","):
        dt = DType(d)
        for _, n, k in SHAPES:
            rows += bench_shape(dt, n, k, variants, args.reps, ceiling)
    print("\nper dtype, variants by their worst shape (% of copy):")
    summary = {}
    for d in args.dtypes.split(","):
        worst = {v: min(r["pct"] for r in rows if r["dtype"] == d and r["variant"] == v) for v in variants}
        ranked = sorted(worst.items(), key=lambda kv: -kv[1])
        summary[d] = ranked
        default = DEFAULT[DType(d)].name
        print(f"  {d:>5} (default now: {default}): " + ", ".join(f"{v} {p:.1f}%" for v, p in ranked))
    wrong = [f"{r['dtype']} {r['n']}x{r['k']} {r['variant']} (rel err {r['rel_err']:.1e})" for r in rows if not r["ok"]]
    if args.json:
        Path(args.json).write_text(json.dumps({"copy_gbs": ceiling, "rows": rows, "worst_shape": summary}, indent=1))
    if wrong:
        print("WRONG RESULTS:\n  " + "\n  ".join(wrong), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
