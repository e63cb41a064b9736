"""Fused decode GEMVs (GPU machine): KernelGemvFused plans against the unfused plans of the same blocks.

  python bench/gemv_fused.py [--json out.json] [--reps 30] [--dtype bf16] [--presets 1b,8b] [--blocks a,b]
                             [--schedules looped,ahead,early,early-ahead,pipe,wide,old,...]

Decode blocks (s = 1) at llama-3.2-1b and llama-3.1-8b shapes: RMSNorm -> q projection; RMSNorm ->
q/k/v (stacked GEMV + slices); RMSNorm -> gate/up/silu(gate)*up (gated); down projection +
residual; the whole MLP half-block; the final RMSNorm -> lm_head (128256 rows). Each block is
repeated L times with its own weights (>= 128 MB of weights per graph: the 50 MB L2 never holds
the weight being read) and planned twice from one e-graph: the search's first candidate with the
fused GEMVs, and without them (same rules, the fused ops not runnable). Both plans use the GEMV
kernel for every matmul (cuBLASLt left out) so the difference is the fusion. Timing:
CudaExecutor.profile (CUDA events around the replayed CUDA graph, after warm-up, ones-filled
inputs) / L. GB/s = bytes every input is read once + outputs written, over the time; % of a
device-to-device copy measured in the same run (bench/kernels.py).
Before timing, each plan of a one-copy graph runs on random inputs against the reference backend
(exit 1 when off). Prints one table; --json writes the rows. --schedules times the fused plan
again with other schedules of KernelGemvFused (SCHEDULES: `old` = before the looped schedule; ahead,
early, pipe, wide = gemv.py's knobs), each checked too; each row names the variants it timed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import luminal as lm  # noqa: E402
from luminal.backends.cuda.kernels.gemv import DEFAULT  # noqa: E402

PRESETS = {"1b": (2048, 8192, 512), "8b": (4096, 14336, 1024)}  # (dim, hidden, kv width)
VOCAB = 128256  # llama 3's lm_head rows
ROTATE_BYTES = 128 << 20  # 2.5x the L2: the weight being read was last touched 128 MB ago


def _norm(g, x, dt, i):
    w = g.tensor(f"nw{i}", (x.shape[-1],), dt).persist()
    return (x.cast(lm.f32).rms_norm(-1, 1e-5) * w.cast(lm.f32)).cast(dt)


def _lin(g, x, name, d_out, dt):
    return x @ g.tensor(name, (d_out, x.shape[-1]), dt).persist().T


class Acts:
    """The activations every copy of a block shares (one input each)."""

    def __init__(self, g: lm.Graph, dt):
        self.g, self.dt, self.made = g, dt, {}

    def __call__(self, name: str, width: int):
        if name not in self.made:
            self.made[name] = self.g.tensor(name, ("s", width), self.dt)
        return self.made[name]


def blocks(dim: int, hidden: int, kv: int):
    """name -> build(g, dt, i, acts) adding copy i of the block (its own weights, shared activations)."""

    def q(g, dt, i, act):
        _lin(g, _norm(g, act("x", dim), dt, i), f"Wq{i}", dim, dt).output(f"q{i}")

    def qkv(g, dt, i, act):
        x = _norm(g, act("x", dim), dt, i)
        for name, n in (("q", dim), ("k", kv), ("v", kv)):
            _lin(g, x, f"W{name}{i}", n, dt).output(f"{name}{i}")

    def gated(g, dt, i, act):
        x = _norm(g, act("x", dim), dt, i)
        (_lin(g, x, f"Wg{i}", hidden, dt).silu() * _lin(g, x, f"Wu{i}", hidden, dt)).output(f"a{i}")

    def down(g, dt, i, act):
        h, a = act("h", dim), act("a", hidden)
        (h + _lin(g, a, f"Wd{i}", dim, dt)).output(f"y{i}")

    def o_proj(g, dt, i, act):  # attention's output projection + the residual (dim x dim)
        h, o = act("h", dim), act("o", dim)
        (h + _lin(g, o, f"Wo{i}", dim, dt)).output(f"y{i}")

    def mlp(g, dt, i, act):
        h = act("h", dim)
        x = _norm(g, h, dt, i)
        a = _lin(g, x, f"Wg{i}", hidden, dt).silu() * _lin(g, x, f"Wu{i}", hidden, dt)
        (h + _lin(g, a, f"Wd{i}", dim, dt)).output(f"y{i}")

    def lm_head(g, dt, i, act):
        _lin(g, _norm(g, act("x", dim), dt, i), f"Wl{i}", VOCAB, dt).output(f"l{i}")

    return {"norm+q": q, "norm+qkv": qkv, "o_proj+residual": o_proj, "norm+gate/up/act": gated,
            "down+residual": down, "mlp": mlp,
            "norm+lm_head": lm_head}  # fmt: skip


def graph_of(build, dt, copies: int) -> lm.Graph:
    g = lm.Graph()
    acts = Acts(g, dt)
    for i in range(copies):
        build(g, dt, i, acts)
    return g


def backends():
    """(unfused, fused): the CUDA backend without library matmuls, less / with the fused GEMV ops."""
    from luminal.backends.cuda.backend import CudaBackend
    from luminal.backends.cuda.host import HostOp
    from luminal.backends.cuda.kernels.gemvfused import GEMV_FUSED_OPS

    kernels = tuple(c for c in CudaBackend.ops if not issubclass(c, HostOp))

    class Fused(CudaBackend):
        ops = kernels

    class Unfused(CudaBackend):
        ops = tuple(c for c in kernels if c not in GEMV_FUSED_OPS)

    return Unfused(), Fused()


def plan(g: lm.Graph, backend):
    from luminal.egraph.compile import build_egraph, preference

    view = build_egraph(g, backend, {"s": (1, 1)})
    return view.extract(view.repair(view.preferred_genome(preference(backend))))


def launches(llir) -> int:
    from luminal.backends.cuda.host import HostOp
    from luminal.backends.cuda.kernel import KernelOp

    return sum(isinstance(n.op, (KernelOp, HostOp)) and getattr(n.op, "alias", lambda: None)() is None
               for n in llir.nodes)  # fmt: skip


def reference(g: lm.Graph, dt) -> tuple[dict, dict]:
    """Random inputs (weights scaled by 1/sqrt(in)) and the reference backend's outputs on them."""
    rng = np.random.default_rng(0)
    feed = {}
    for name, sh in g.input_shapes.items():
        shape = tuple(1 if not d.is_num else d.value for d in sh)
        u = rng.random(shape, dtype=np.float32) * 2 - 1  # f32: the lm_head's 0.5-1 G values in seconds
        feed[name] = (u * (shape[-1] ** -0.5 if name.startswith("W") else 1)).astype(dt.np)
    return feed, g.compile("reference", cache=False).run(feed)


def check(llir, feed: dict, want: dict) -> float:
    """Max |got - want| / max |want| over the outputs of `llir` run on the device."""
    from luminal.backends.cuda.runtime import CudaExecutor

    got = CudaExecutor(llir.nodes).run(feed, {"s": 1})
    return max(float(np.max(np.abs(np.asarray(got[k], np.float64).reshape(w.shape) - w)) / np.max(np.abs(w)))
               for k, w in want.items())  # fmt: skip


# other schedules of the fused op, timed on the same plan (--schedules): the one before the looped
# schedule (a block per 2 rows, 4 warps a row, the plain GEMV's default), the looped one less one knob,
# and the looped one with gemv.py's module knobs on (a dict: knob -> value; session 6)
SCHEDULES = {
    "looped": None,
    "old": lambda op, v: DEFAULT[op.dtype],
    "no-prefetch": lambda op, v: replace(v, prefetch=0),
    "u-half": lambda op, v: replace(v, unroll=max(1, v.unroll // 2)),
    "waves2": lambda op, v: replace(v, waves=2),
    "plain": {},  # every knob off (EARLY is on by default since session 6)
    "ahead": {"AHEAD": True},
    "early": {"EARLY": True},
    "early-ahead": {"EARLY": True, "AHEAD": True},
    "pipe": {"PIPE": True},
    "wide": {"WIDE": True},
    "early-wide": {"EARLY": True, "WIDE": True},
}


KNOBS = ("AHEAD", "EARLY", "PIPE", "WIDE")


@contextmanager
def schedule(name: str):
    """KernelGemvFused renders with SCHEDULES[name] (the looped variant it would pick -> another, or
    the knobs set). The rendered-kernel cache keys on the variant's name (KernelGemvFused.render_salt),
    so each schedule renders and compiles its own kernel: `variant_names` checks it."""
    from luminal.backends.cuda.kernels import gemv
    from luminal.backends.cuda.kernels.gemvfused import KernelGemvFused

    pick, own = SCHEDULES[name], KernelGemvFused.variant
    knobs = {k: False for k in KNOBS} | pick if isinstance(pick, dict) else {}  # a dict names every knob on
    saved = {k: getattr(gemv, k) for k in knobs}
    if callable(pick):
        KernelGemvFused.variant = lambda op: pick(op, own(op))
    for k, val in knobs.items():
        setattr(gemv, k, val)
    try:
        yield
    finally:
        KernelGemvFused.variant = own
        for k, val in saved.items():
            setattr(gemv, k, val)


def variant_names(llir) -> list[str]:
    """The schedule each fused GEMV of a plan renders with now (distinct names: distinct kernels)."""
    from luminal.backends.cuda.kernels.gemvfused import KernelGemvFused

    return sorted({n.op.variant().name for n in llir.nodes if isinstance(n.op, KernelGemvFused)})


def bench(preset: str, dt, reps: int, ceiling: float, only=None, schedules=("looped",)) -> list[dict]:
    from luminal.backends.cuda.backend import input_extents
    from luminal.backends.cuda.runtime import CudaExecutor

    dim, hidden, kv = PRESETS[preset]
    rows = []
    for name, build in blocks(dim, hidden, kv).items():
        if only is not None and name not in only:
            continue
        one = graph_of(build, dt, 1)
        wbytes = sum(math.prod(d.value for d in sh) * dt.itemsize for n, sh in one.input_shapes.items() if n[0] == "W")
        copies = max(2, math.ceil(ROTATE_BYTES / wbytes))
        g = graph_of(build, dt, copies)
        env = {"s": 1}
        moved = sum(math.prod(1 if not d.is_num else d.value for d in sh) for sh in g.input_shapes.values())
        moved += sum(int(g.nodes[i].size.evaluate(env)) for i in g.outputs.values())
        moved *= dt.itemsize / copies
        feed, want = reference(one, dt)
        for kind, backend in zip(("unfused", "fused"), backends(), strict=True):
            small, llir = plan(one, backend), plan(g, backend)
            seen: dict[tuple, str] = {}
            for sched in ("looped",) if kind == "unfused" else schedules:
                with schedule(sched):
                    names = tuple(variant_names(llir))
                    if kind == "fused" and names in seen:  # the same kernels as a schedule timed already
                        print(f"    {sched}: the same variants as {seen[names]} ({', '.join(names)}): skipped")
                        continue
                    seen[names] = sched
                    err = check(small, feed, want)
                    ex = CudaExecutor(llir.nodes)
                t = ex.profile(env, input_extents(llir.nodes, env), reps=reps, warmup=5) / copies
                del ex
                label = kind if sched == "looped" else f"{kind}:{sched}"
                gbs = moved / t / 1e9
                ok = bool(err <= (2e-2 if dt.itemsize == 2 else 1e-4))
                rows.append({"preset": preset, "dtype": dt.value, "block": name, "plan": label, "us": t * 1e6,
                             "variants": list(names),
                             "gbs": gbs, "pct": 100 * gbs / ceiling, "launches": launches(llir) / copies,
                             "copies": copies, "rel_err": err, "ok": ok})  # fmt: skip
                r = rows[-1]
                print(f"{preset:>3} {dt.value:>5} {name:18} {label:17} {r['us']:9.2f} {gbs:8.0f} {r['pct']:6.1f}% "
                      f"{r['launches']:5.1f} {err:9.1e}{'' if r['ok'] else '  WRONG'}", flush=True)  # fmt: skip
    return rows


def main() -> None:
    from bench.kernels import copy_ceiling
    from luminal.backends.cuda import driver
    from luminal.dtype import DType

    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=str, default="")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--dtype", type=str, default="bf16")
    ap.add_argument("--presets", type=str, default="1b,8b")
    ap.add_argument("--blocks", type=str, default="", help="comma-separated block names (default: all)")
    ap.add_argument(
        "--schedules", type=str, default="looped", help=f"fused-op schedules to time: {','.join(SCHEDULES)}"
    )
    args = ap.parse_args()
    only = args.blocks.split(",") if args.blocks else None
    unknown = sorted(set(only or ()) - set(blocks(*PRESETS["1b"])) | set(args.schedules.split(",")) - set(SCHEDULES))
    if unknown:
        sys.exit(f"unknown block or schedule name(s): {unknown}")
    driver.device()
    ceiling = copy_ceiling(512 << 20)
    print(f"copy ceiling (torch d2d, 512 MB): {ceiling:.0f} GB/s")
    head = f"{'':>3} {'dtype':>5} {'block':18} {'plan':17} {'us':>9} {'GB/s':>8} {'% copy':>7}"
    print(head + f" {'kern':>5} {'rel err':>9}")
    rows = []
    for p in args.presets.split(","):
        rows += bench(p, DType(args.dtype), args.reps, ceiling, only, args.schedules.split(","))
    if args.json:
        Path(args.json).write_text(json.dumps({"copy_gbs": ceiling, "rows": rows}, indent=1))
    wrong = [f"{r['preset']} {r['block']} {r['plan']} (rel err {r['rel_err']:.1e})" for r in rows if not r["ok"]]
    if wrong:
        print("WRONG RESULTS:\n  " + "\n  ".join(wrong), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
