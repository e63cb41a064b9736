"""Attention benchmark (GPU machine): KernelAttention next to torch's scaled_dot_product_attention
(flash and cuDNN backends) on the same tensors.

  python bench/attention.py [--json out.json] [--reps 30] [--quick] [--sweep] [--only decode|prefill]
  python bench/attention.py --dry [--sweep]   # CPU smoke: render + NVRTC (sm_90) + ptxas registers, no GPU

Decode: llama-3.1-8b heads (32 q, 8 kv, head_dim 128), bf16, batch 1, one query at context
1k / 4k / 16k / 32k (the cache is (8, ctx, 128) per k and v, torch gets the same buffers viewed as
(1, 8, ctx, 128) with enable_gqa); KV bytes read / time against the 4.25 TB/s copy bandwidth.
Prefill: the same heads, s = 512 / 2k / 8k tokens, causal, no past; TFLOP/s (4 s^2 d h / 2 for the
causal half) and the ratio to torch. Each luminal op is rendered by KernelAttention.render, compiled
with NVRTC and launched through the driver on torch's tensors (same primary context), every launch
of the op in order, as the runtime would; a CUDA graph of back-to-back calls is replayed `reps` times
between CUDA events, median per call. Decode calls cycle through copies of the cache (>= 256 MB in
all) so the 50 MB L2 never holds the KV a call reads; torch's calls cycle through the same copies.
Before timing, every output is checked against torch's math backend in f32 (max |diff| <= 2e-2 for
bf16 outputs of magnitude ~1); a mismatch exits 1.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

COPY_BW = 4.25e12  # bytes/s, measured device-to-device copy on the H200 (docs/perf.md)
N_Q, N_KV, HD = 32, 8, 128
DECODE_CTX = (1024, 4096, 16384, 32768)
PREFILL_S = (512, 2048, 8192)
LAUNCHES = 8  # calls per graph replay (at least)
ROTATE_BYTES = 256 << 20


def _op(cap: int, rows: int):
    """The op at `rows` query rows (a literal, as in the runtime's decode bucket: only the path that
    runs is rendered and compiled) over a cache of `cap` rows."""
    from luminal.backends.cuda.kernels.attention import KernelAttention
    from luminal.dtype import DType
    from luminal.shape.expr import num, var, z

    groups = N_Q // N_KV
    s, p = num(rows), var("p")
    q_st = (z * (groups * HD), z * HD, z * (N_Q * HD), z)  # q stored (s, 32, 128)
    kv_st = (z * (cap * HD), z * HD, z)  # cache (8, cap, 128)
    return KernelAttention(num(N_KV), num(groups), s, p + s, num(HD), q_st, kv_st, kv_st, True, p, 0, HD**-0.5, 0.0,
                           DType.bf16)  # fmt: skip


class Runner:
    """Every launch of one KernelAttention, one call per (out, q, k, v) pointer set, as a CUDA graph."""

    def __init__(self, op, env: dict, ptr_sets: list[tuple[int, int, int, int]], variant=None):
        from luminal.backends.cuda import driver, nvrtc
        from luminal.backends.cuda.kernel import source

        slots = {"p": 0, "s": 1, "!error": 2}
        kern = op.render(slots, variant)
        self.mod = driver.Module(nvrtc.compile_cubin(source([kern])))
        dims = np.array([env["p"], env["s"], 0, 0], np.int64)
        self.dims = driver.DeviceBuffer(dims.nbytes)
        self.dev = driver.device()
        driver.htod(self.dims.ptr, dims, self.dev.stream)
        scratch = int(op.scratch_bytes(variant).evaluate(env))
        self.scratch = driver.DeviceBuffer(max(scratch, 256))
        self.zeroed = driver.DeviceBuffer(max(op.zeroed_bytes(variant), 256))  # the decode kernel's tickets
        driver.memset8(self.zeroed.ptr, 0, self.zeroed.nbytes, self.dev.stream)
        self.params = [driver.Params([*ptrs, self.dims.ptr, self.scratch.ptr, self.zeroed.ptr]) for ptrs in ptr_sets]
        self.launches = [(self.mod.function(ln.name, ln.shared), max(1, int(ln.grid.evaluate(env))), ln.block,
                          ln.shared) for ln in kern.launches]  # fmt: skip
        self.calls = max(LAUNCHES, len(ptr_sets))
        self.graph = driver.Graph()
        for c in range(self.calls):
            for f, grid, block, shared in self.launches:
                p = self.params[c % len(self.params)]
                self.graph.add_kernel(driver.kernel_node_params(f, grid, block, shared, p))
        self.graph.instantiate()
        self.registers = {ln.name: _regs(self.mod.function(ln.name)) for ln in kern.launches}

    def once(self) -> None:
        from luminal.backends.cuda import driver

        for f, grid, block, shared in self.launches:
            driver.launch(f, grid, block, shared, self.params[0], self.dev.stream)

    def time(self, reps: int) -> float:
        from luminal.backends.cuda import driver

        for _ in range(3):
            self.graph.launch(self.dev.stream)
        evs = [(driver.Event(), driver.Event()) for _ in range(reps)]
        for a, b in evs:
            a.record(self.dev.stream)
            self.graph.launch(self.dev.stream)
            b.record(self.dev.stream)
        self.dev.synchronize()
        return float(np.median([b.elapsed_ms(a) for a, b in evs])) * 1e-3 / self.calls


def _regs(func) -> int:
    from luminal.backends.cuda import driver

    attr = driver._drv().CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS
    return int(driver.call("cuFuncGetAttribute", attr, func))


def _torch_time(fns: list, reps: int) -> float:
    import torch

    calls = max(LAUNCHES, len(fns))
    for fn in fns:
        fn()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in range(calls):
            fns[c % len(fns)]()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return float(np.median(ts)) * 1e-3 / calls


def _sdpa(backend, q, k, v, causal: bool):
    import torch
    from torch.nn.attention import sdpa_kernel

    def fn():
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    return fn


def bench_case(kind: str, size: int, reps: int, variants: tuple = ()) -> dict:
    """One decode (context `size`) or prefill (`size` tokens) case; `variants` (schedules,
    attention_decode.VARIANTS names) are timed next to the default."""
    import torch
    from torch.nn.attention import SDPBackend

    gen = torch.Generator(device="cuda").manual_seed(size)
    s, ctx = (1, size) if kind == "decode" else (size, size)
    q = torch.randn(s, N_Q, HD, device="cuda", dtype=torch.bfloat16, generator=gen)  # (s, heads, hd)
    kv_bytes = 2 * N_KV * ctx * HD * 2
    copies = min(64, math.ceil(ROTATE_BYTES / kv_bytes)) if kind == "decode" else 1
    ks = [torch.randn(N_KV, ctx, HD, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(copies)]
    vs = [torch.randn(N_KV, ctx, HD, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(copies)]
    k, v = ks[0], vs[0]
    out = torch.full((N_KV, N_Q // N_KV, s, HD), float("nan"), device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    env = {"s": s, "p": ctx - s}
    ptrs = [(out.data_ptr(), q.data_ptr(), a.data_ptr(), b.data_ptr()) for a, b in zip(ks, vs, strict=True)]
    run = Runner(_op(ctx, s), env, ptrs)
    run.once()
    torch.cuda.synchronize()
    tq = q.permute(1, 0, 2).unsqueeze(0)  # (1, 32, s, hd)
    tk, tv = k.unsqueeze(0), v.unsqueeze(0)  # (1, 8, ctx, hd)
    causal = kind == "prefill"  # decode: the one query sees the whole context
    ref = torch.nn.functional.scaled_dot_product_attention(
        tq.float(), tk.float(), tv.float(), is_causal=causal, enable_gqa=True
    )  # (1, 32, s, hd)
    got = out.reshape(1, N_Q, s, HD).float()
    err = float((got - ref).abs().max())
    row = {"kind": kind, "size": size, "max_err": err, "registers": run.registers}
    if not err <= 2e-2:
        row["error"] = f"max |luminal - torch math| = {err}"
        return row
    t = run.time(reps)
    row["luminal_us"] = t * 1e6
    from luminal.backends.cuda.kernels.attention_decode import VARIANTS

    for name in variants:
        alt = Runner(_op(ctx, s), env, ptrs, VARIANTS[name])
        out.fill_(float("nan"))
        alt.once()
        torch.cuda.synchronize()
        alt_err = float((out.reshape(1, N_Q, s, HD).float() - ref).abs().max())
        us = alt.time(reps) * 1e6 if alt_err <= 2e-2 else None
        row.setdefault("variants", {})[name] = {
            "us": us,
            "max_err": alt_err,
            "pct_copy": None if not us or kind != "decode" else 100 * kv_bytes / (us * 1e-6) / COPY_BW,
            "speedup": None if not us else row["luminal_us"] / us,
        }
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            fns = [_sdpa(be, tq, a.unsqueeze(0), b.unsqueeze(0), causal) for a, b in zip(ks, vs, strict=True)]
            row[f"{name}_us"] = _torch_time(fns, reps) * 1e6
        except Exception as e:  # noqa: BLE001 -- a backend torch cannot run here is reported, not fatal
            row[f"{name}_us"] = None
            row[f"{name}_error"] = str(e).splitlines()[0][:120]
    if kind == "decode":
        for name in ("luminal", "flash", "cudnn"):
            us = row.get(f"{name}_us")
            row[f"{name}_pct_copy"] = None if not us else 100 * kv_bytes / (us * 1e-6) / COPY_BW
    else:
        flops = 4 * s * s * HD * N_Q / 2  # causal: half the score matrix
        for name in ("luminal", "flash", "cudnn"):
            us = row.get(f"{name}_us")
            row[f"{name}_tflops"] = None if not us else flops / (us * 1e-6) / 1e12
        for name in ("flash", "cudnn"):
            row[f"ratio_vs_{name}"] = None if not row.get(f"{name}_us") else row[f"{name}_us"] / row["luminal_us"]
    return row


def sweep(kind: str) -> tuple[str, ...]:
    """The schedules (attention_decode.VARIANTS names) a case times next to the default: the decode
    rows those that change the decode kernels, the prefill rows those that change the prefill kernel."""
    from luminal.backends.cuda.kernels.attention_decode import DECODE, VARIANTS

    pre = DECODE.prefill
    if kind == "decode":
        return tuple(n for n, v in VARIANTS.items() if v != DECODE and v.prefill == pre)
    return tuple(n for n, v in VARIANTS.items() if v.prefill != pre)


def dry(cases: list, sweep_all: bool) -> int:
    """Without a GPU: every case's kernels (and with `sweep_all` the schedules it sweeps) rendered, compiled
    for sm_90 and their ptxas register / spill counts and grids printed."""
    from luminal.backends.cuda.kernels.attention_decode import DECODE, VARIANTS, splits
    from tests.backends.cuda.test_gemv import ptxas_usage

    slots = {"p": 0, "s": 1, "!error": 2}
    for kind, size in cases:
        s = 1 if kind == "decode" else size
        env = {"s": s, "p": size - s}
        op = _op(size, s)
        for v in [DECODE, *(VARIANTS[n] for n in (sweep(kind) if sweep_all else ()))]:
            kern = op.render(slots, v)
            use = ptxas_usage([kern])
            launches = "  ".join(
                f"{ln.name.rsplit('_', 1)[1]}: grid {int(ln.grid.evaluate(env))} x {ln.block}, "
                f"{use[ln.name][0]} regs, {use[ln.name][1]} B spilled"
                for ln in kern.launches
            )
            sched = f"{v.name} ({splits(op.spec(v))} splits)" if kind == "decode" else v.name
            print(f"{kind:7s} {size:6d}  {sched:28s} {launches}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="one decode and one prefill size")
    ap.add_argument("--sweep", action="store_true", help="also time every schedule (attention_decode.VARIANTS)")
    ap.add_argument("--dry", action="store_true", help="no GPU: compile every kernel, print registers and grids")
    ap.add_argument("--only", choices=("decode", "prefill"), help="the decode or the prefill cases only")
    ap.add_argument("--variants", help="with --sweep: only these schedules (comma-separated VARIANTS names)")
    args = ap.parse_args(argv)
    cases = [("decode", c) for c in DECODE_CTX] + [("prefill", s) for s in PREFILL_S]
    if args.quick:
        cases = [("decode", 4096), ("prefill", 2048)]
    cases = [c for c in cases if args.only in (None, c[0])]
    if args.dry:
        return dry(cases, args.sweep)
    from luminal.backends.cuda import driver

    driver.device()
    rows, bad = [], 0
    for kind, size in cases:
        names = sweep(kind) if args.sweep else ()
        if args.variants:
            names = tuple(n for n in names if n in args.variants.split(","))
        r = bench_case(kind, size, args.reps, names)
        rows.append(r)
        if "error" in r:
            bad += 1
            print(f"{kind:7s} {size:6d}  FAILED: {r['error']}", flush=True)
            continue
        fmt = lambda x, f: "   n/a" if x is None else format(x, f)  # noqa: E731
        if kind == "decode":
            print(f"decode  ctx={size:6d}  luminal {r['luminal_us']:8.1f} us {fmt(r['luminal_pct_copy'], '5.1f')}% copy"
                  f" | flash {fmt(r['flash_us'], '8.1f')} us {fmt(r['flash_pct_copy'], '5.1f')}%"
                  f" | cudnn {fmt(r['cudnn_us'], '8.1f')} us {fmt(r['cudnn_pct_copy'], '5.1f')}%"
                  f"  regs {r['registers']}", flush=True)  # fmt: skip
        else:
            print(f"prefill s={size:6d}  luminal {r['luminal_us']:8.1f} us {fmt(r['luminal_tflops'], '6.1f')} TFLOP/s"
                  f" | flash {fmt(r['flash_tflops'], '6.1f')} (x{fmt(r['ratio_vs_flash'], '.2f')})"
                  f" | cudnn {fmt(r['cudnn_tflops'], '6.1f')} (x{fmt(r['ratio_vs_cudnn'], '.2f')})"
                  f"  regs {r['registers']}", flush=True)  # fmt: skip
        for name, vr in r.get("variants", {}).items():
            print(f"        variant {name:24s} {fmt(vr['us'], '8.1f')} us {fmt(vr['pct_copy'], '5.1f')}% copy"
                  f"  x{fmt(vr['speedup'], '.2f')} vs default  (max err {vr['max_err']:.2e})", flush=True)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
