"""KernelGemvFused (kernels/gemvfused.py, gemvfused.egg): the decode GEMV fused with a row
normalization prologue, a residual / bias epilogue and the gated act(gate) * up of two GEMVs.

CPU: the preferred plan of each block at s = 1 is the expected number of launches with the fused
op in it (and none where the rules must not fire), every sampled extraction equals the reference,
the kernels compile with NVRTC for sm_90, plans survive the LLIR JSON round trip; a 1-layer
llama-3.2-1b-shaped decode graph uses the fused op and needs fewer launches than without it.
GPU (`cuda`): the same blocks and extractions against the reference on the device.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import replace

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.backend import CudaBackend
from luminal.backends.cuda.host import HostOp
from luminal.backends.cuda.kernel import KernelOp, source
from luminal.backends.cuda.kernels.gemvfused import GEMV_FUSED_OPS, KernelGemvFused, KernelSlice
from luminal.egraph.compile import build_egraph, preference
from luminal.egraph.llir import LLIRGraph
from luminal.egraph.search import sample_genomes
from luminal.hlir import HLIR_OPS
from luminal.shape.expr import num
from tests.backends.cuda.test_lowering import CpuCudaBackend
from tests.helpers import assert_matches

SLOTS = {"s": 0, "p": 1, "r": 2, "!error": 3}
D, H = 64, 96  # model dim, hidden


def _norm(g, x, dt, name="w"):
    return _norm_of(g, x, dt, name)


def _norm_of(g, x, dt, name):  # RMSNorm over x's last axis, any width
    w = g.tensor(name, (x.shape[-1],), dt).persist()
    return (x.cast(lm.f32).rms_norm(-1, 1e-5) * w.cast(lm.f32)).cast(dt)


def _lin(g, x, name, d_in, d_out, dt):
    return x @ g.tensor(name, (d_out, d_in), dt).persist().T


def _prologue(g, dt):
    x = g.tensor("x", ("s", D), dt)
    return _lin(g, _norm(g, x, dt), "W", D, H, dt)


def _residual(g, dt):
    x, h = g.tensor("x", ("s", D), dt), g.tensor("h", ("s", H), dt)
    return h + _lin(g, x, "W", D, H, dt)


def _bias_first(g, dt):
    x, b = g.tensor("x", ("s", D), dt), g.tensor("b", (H,), dt).persist()
    return b.unsqueeze(0) + _lin(g, x, "W", D, H, dt)


def _gated(g, dt, act="silu"):
    x = g.tensor("x", ("s", D), dt)
    a = getattr(_lin(g, x, "Wg", D, H, dt), act)()
    return a * _lin(g, x, "Wu", D, H, dt)


def _up_gated(g, dt):  # up * act(gate): the product the other way round
    x = g.tensor("x", ("s", D), dt)
    return _lin(g, x, "Wu", D, H, dt) * _lin(g, x, "Wg", D, H, dt).gelu_tanh()


def _gated_f32(g, dt, act="silu"):
    """nn.GatedMLP's product: act and gating in f32 between casts, rounded once to dt (the models)."""
    x = _norm(g, g.tensor("x", ("s", D), dt), dt)
    a = getattr(_lin(g, x, "Wg", D, H, dt).cast(lm.f32), act)() * _lin(g, x, "Wu", D, H, dt).cast(lm.f32)
    return a.cast(dt)


def _logits(g, dt):  # the models' lm_head: final norm, GEMV, logits cast to f32
    return _lin(g, _norm(g, g.tensor("x", ("s", D), dt), dt), "W", D, 300, dt).cast(lm.f32)


def _mlp_block(g, dt):
    """Llama's MLP half-block: h + down(silu(gate(norm(h))) * up(norm(h)))."""
    h = g.tensor("h", ("s", D), dt)
    x = _norm(g, h, dt)
    a = _lin(g, x, "Wg", D, H, dt).silu() * _lin(g, x, "Wu", D, H, dt)
    return h + _lin(g, a, "Wd", H, D, dt)


def _post(g, x, dt, name):  # Gemma's RMSNorm: weight stored as w - 1
    w = g.tensor(name, (x.shape[-1],), dt).persist()
    return (x.cast(lm.f32).rms_norm(-1, 1e-5) * (w.cast(lm.f32) + 1.0)).cast(dt)


def _gemma_mlp(g, dt, d=D, hidden=H, d_attn=H):
    """Gemma's residual around post-norms: s = h + norm(o_proj(a)), then its MLP half-block on s. The
    gated GEMV computes x = norm(s) from h and o (gemv-x-resnorm), so s is never stored."""
    h = g.tensor("h", ("s", d), dt).exp() * 0.5  # a computed stream value (an input is read as a leaf)
    s = h + _post(g, _lin(g, g.tensor("a", ("s", d_attn), dt), "Wo", d_attn, d, dt), dt, "wpa")
    x = _post(g, s, dt, "wpre")
    y = _lin(g, x, "Wg", d, hidden, dt).cast(lm.f32).gelu_tanh() * _lin(g, x, "Wu", d, hidden, dt).cast(lm.f32)
    return s + _post(g, _lin(g, y.cast(dt), "Wd", hidden, d, dt), dt, "wpost")


def _qkv(g, dt):
    """Three projections of one normalized x (widths 96, 32, 32): one stacked GEMV, three slices."""
    x = _norm(g, g.tensor("x", ("s", D), dt), dt)
    _lin(g, x, "Wk", D, 32, dt).output("k")
    (_lin(g, x, "Wv", D, 32, dt) * 2.0).output("v")
    return _lin(g, x, "Wq", D, H, dt)


def _odd_qkv(g, dt):
    """Stacked widths 37, 5, 3: no tile of rows lines up with a weight or with the end."""
    x = _norm(g, g.tensor("x", ("s", D), dt), dt)
    _lin(g, x, "Wk", D, 5, dt).output("k")
    _lin(g, x, "Wv", D, 3, dt).output("v")
    return _lin(g, x, "Wq", D, 37, dt)


def _odd_gated(g, dt):  # 37 rows: the last tile of the gated pair is partial
    x = _norm(g, g.tensor("x", ("s", D), dt), dt)
    return _lin(g, x, "Wg", D, 37, dt).silu() * _lin(g, x, "Wu", D, 37, dt)


def _lm_head(g, dt):  # the final norm and a (reduced) vocabulary: many tiles per block
    return _lin(g, _norm(g, g.tensor("x", ("s", D), dt), dt), "W", D, 300, dt)


def _plain(g, dt):  # x read from its buffer: nothing to fuse, the plain decode GEMV
    return _lin(g, g.tensor("x", ("s", D), dt), "W", D, H, dt)


# name -> (build, launches in the preferred plan at s = 1, of them KernelGemvFused)
BLOCKS = {
    "prologue": (_prologue, 1, 1),
    "residual": (_residual, 1, 1),
    "bias_first": (_bias_first, 1, 1),
    "gated_silu": (_gated, 1, 1),
    "gated_gelu_tanh": (lambda g, dt: _gated(g, dt, "gelu_tanh"), 1, 1),
    "up_gated": (_up_gated, 1, 1),
    "gated_f32_silu": (_gated_f32, 1, 1),
    "gated_f32_gelu_tanh": (lambda g, dt: _gated_f32(g, dt, "gelu_tanh"), 1, 1),
    "logits_f32": (_logits, 1, 1),
    # h * 1.5, o_proj, the gated GEMV (x from h and o), down, the output sum; o_proj and down have nothing to
    # fuse (their post-norms read the whole row) and run as plain KernelGemvFused (gemv-plain), not cuBLASLt
    "gemma_mlp": (_gemma_mlp, 5, 3),
    "mlp_block": (_mlp_block, 2, 2),
    "qkv": (_qkv, 2, 1),  # the stacked GEMV (slices alias it: no launch) and v's * 2
    "odd_qkv": (_odd_qkv, 1, 1),
    "odd_gated": (_odd_gated, 1, 1),
    "lm_head": (_lm_head, 1, 1),
    "plain": (_plain, 1, 1),  # gemv-plain: the fused kernel's schedule with x read from its buffer
}


def _graph(name: str, dt) -> lm.Graph:
    g = lm.Graph()
    BLOCKS[name][0](g, dt).output("y")
    return g


def _feed(g: lm.Graph, env: dict, seed: int) -> dict:
    """Uniform inputs; weight matrices (W*, (out, in)) scaled by 1/sqrt(in) as in trained models, so
    every value stays O(1) and a tolerance relative to it means what it says."""
    rng = np.random.default_rng(seed)
    out = {}
    for n, sh in g.input_shapes.items():
        shape = tuple(int(d.evaluate(env)) for d in sh)
        scale = shape[-1] ** -0.5 if n.startswith("W") else 1.0
        out[n] = (rng.uniform(-1, 1, shape) * scale).astype(g.nodes[g.inputs[n]].dtype.np)
    return out


def _preferred(g: lm.Graph, backend=None, bounds=None) -> LLIRGraph:
    b = backend or CpuCudaBackend()
    view = build_egraph(g, b, bounds if bounds is not None else {"s": (1, 1)})
    return view.extract(view.repair(view.preferred_genome(preference(b))))


def _launches(llir: LLIRGraph) -> list:
    """The ops that launch work: kernels and library calls, less aliases (a view of their input)."""
    return [n.op for n in llir.nodes if isinstance(n.op, (KernelOp, HostOp)) and getattr(n.op, "alias", _no)() is None]


def _no():
    return None


def _check(g: lm.Graph, llir: LLIRGraph, feed: dict, dt, what: str, run=None, tol: float = 1.0) -> None:
    """Every output of `llir` (run by reference semantics, or `run`) against the reference."""
    want = g.compile("reference", cache=False).run(feed)
    got = (run or CpuCudaBackend().load(llir).run)(feed, {"s": 1})
    for name, arr in want.items():
        a = np.asarray(got[name]).reshape(arr.shape)
        if arr.dtype != dt.np:  # a dt value cast at the end (f32 logits): its dt values, to dt's tolerance
            assert a.dtype == arr.dtype, (what, name, a.dtype, arr.dtype)
            a, arr = a.astype(dt.np), arr.astype(dt.np)
        assert_matches(a, arr, dt, tol, f"{what}/{name} {llir.op_counts()}")


def _compiles(ops) -> None:
    kernels = [op.render(SLOTS) for op in ops if isinstance(op, KernelOp)]
    assert nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"


@pytest.mark.parametrize("name", sorted(BLOCKS))
@pytest.mark.parametrize("dt", [lm.f32, lm.bf16], ids=str)
def test_preferred_plan_fuses_at_s1(name, dt):
    g = _graph(name, dt)
    llir = _preferred(g)
    ops = _launches(llir)
    _, want, want_fused = BLOCKS[name]
    fused = [op for op in ops if isinstance(op, KernelGemvFused)]
    assert (len(ops), len(fused)) == (want, want_fused), llir.op_counts()
    _compiles(ops)
    classes = {c.__name__: c for c in (*HLIR_OPS, *CudaBackend.ops)}
    assert LLIRGraph.from_json(llir.to_json(), classes).fingerprint() == llir.fingerprint()
    _check(g, llir, _feed(g, {"s": 1}, 3), dt, name)


@pytest.mark.parametrize("dt,dim,hidden", [(lm.bf16, 4096, 14336), (lm.f32, 8192, 2048), (lm.f16, 2048, 8192)],
                         ids=["bf16-8b", "f32-k8192", "f16-1b"])  # fmt: skip
def test_real_shapes_compile_for_sm90(dt, dim, hidden):
    """The MLP half-block at model shapes: a long computed x in shared memory (k = dim), its norm's
    reduction over more values than a thread keeps in registers, the gated pair and the down GEMV;
    and q/k/v stacked and a 128256-row lm_head after the norm of one h. Every kernel keeps the
    4-blocks-per-SM promise (64 registers) without spilling (ptxas's report)."""
    from tests.backends.cuda.test_gemv import ptxas_usage

    g = lm.Graph()
    h = g.tensor("h", ("s", dim), dt)
    w = g.tensor("w", (dim,), dt).persist()
    x = (h.cast(lm.f32).rms_norm(-1, 1e-5) * w.cast(lm.f32)).cast(dt)
    a = _lin(g, x, "Wg", dim, hidden, dt).silu() * _lin(g, x, "Wu", dim, hidden, dt)
    (h + _lin(g, a, "Wd", hidden, dim, dt)).output("y")
    ops = _launches(_preferred(g))
    assert [type(op).__name__ for op in ops] == ["KernelGemvFused"] * 2 and ops[0].x, ops
    g2 = lm.Graph()
    x = _norm_of(g2, g2.tensor("h", ("s", dim), dt), dt, "w")
    for name, n in (("q", dim), ("k", dim // 4), ("v", dim // 4)):
        _lin(g2, x, f"W{name}", dim, n, dt).output(name)
    _lin(g2, _norm_of(g2, g2.tensor("hl", ("s", dim), dt), dt, "wl"), "Wl", dim, 128256, dt).output("logits")
    more = _launches(_preferred(g2))
    assert sorted(len(op.ns) for op in more if isinstance(op, KernelGemvFused)) == [1, 3], more
    kernels = [op.render(SLOTS) for op in (*ops, *more) if isinstance(op, KernelGemvFused)]
    for name, (regs, spill) in ptxas_usage(kernels).items():
        assert spill == 0 and regs <= 64, (name, regs, spill)


def test_gemma_shapes_compile_for_sm90():
    """gemma-3-1b's MLP half-block (dim 1152, hidden 6912, 1024 attention features) in bf16: the
    gated GEMV's x computed from h and o_proj's product (two row reductions in the prologue) keeps
    the 64-register promise without spilling."""
    from tests.backends.cuda.test_gemv import ptxas_usage

    g = lm.Graph()
    _gemma_mlp(g, lm.bf16, 1152, 6912, 1024).output("y")
    fused = [op for op in _launches(_preferred(g)) if isinstance(op, KernelGemvFused)]
    gated = [op for op in fused if op.x]  # o_proj and down: plain (gemv-plain), x read from its buffer
    assert len(fused) == 3 and len(gated) == 1 and gated[0].base == gated[0].m + 2, fused  # x from the two loads
    for name, (regs, spill) in ptxas_usage([op.render(SLOTS) for op in fused]).items():
        assert spill == 0 and regs <= 64, (name, regs, spill)


_KNOB_SETS = [(), ("AHEAD",), ("EARLY",), ("EARLY", "AHEAD"), ("PIPE",), ("WIDE",), ("EARLY", "WIDE")]


@pytest.mark.parametrize("knobs", _KNOB_SETS, ids=lambda k: "-".join(k).lower() or "looped")
def test_knob_schedules_compile_for_sm90_and_render_anew(knobs, tmp_path, monkeypatch):
    """gemv.py's knobs at llama-3.2-1b shapes (norm + q/k/v, norm + gate/up/act, down + residual,
    bf16): each renders its own kernel through the rendered cache, on disk and in memory (the key
    holds the schedule: bench/gemv_fused.py once timed one kernel for every schedule), waits for
    the kernel before it before reading anything but an L2 prefetch, and keeps its occupancy
    promise without spilling (ptxas)."""
    from luminal.backends.cuda import rendered
    from luminal.backends.cuda.kernels import gemv
    from tests.backends.cuda.test_gemv import ptxas_usage
    from tests.backends.cuda.test_pdl import check_syncs

    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    dim, hidden, kv, dt = 2048, 8192, 512, lm.bf16
    g = lm.Graph()
    h = g.tensor("h", ("s", dim), dt)
    x = _norm_of(g, h, dt, "w")
    a = _lin(g, x, "Wg", dim, hidden, dt).silu() * _lin(g, x, "Wu", dim, hidden, dt)
    (h + _lin(g, a, "Wd", hidden, dim, dt)).output("y")
    x2 = _norm_of(g, g.tensor("h2", ("s", dim), dt), dt, "w2")
    for name, n in (("q", dim), ("k", kv), ("v", kv)):
        _lin(g, x2, f"W{name}", dim, n, dt).output(name)
    ops = [op for op in _launches(_preferred(g)) if isinstance(op, KernelGemvFused)]
    assert len(ops) == 3, ops
    for knob in ("AHEAD", "EARLY", "PIPE", "WIDE"):
        monkeypatch.setattr(gemv, knob, False)
    looped = [rendered.render(op, SLOTS) for op in ops]  # the knobs off: cached now
    for knob in knobs:
        monkeypatch.setattr(gemv, knob, True)
    kernels = [rendered.render(op, SLOTS) for op in ops]
    assert kernels == [op.render(SLOTS) for op in ops]
    assert all((k.code == lk.code) == (not knobs) for k, lk in zip(kernels, looped, strict=True))
    for kern in kernels:
        check_syncs(kern, gemv=True)
    occupancy = {op.render(SLOTS).launches[0].name: op.variant().occupancy for op in ops}
    for name, (regs, spill) in ptxas_usage(kernels).items():
        assert spill == 0 and regs <= 65536 // (256 * occupancy[name]), (name, regs, spill)


def test_bench_schedules_time_distinct_kernels():
    """bench/gemv_fused.py --schedules: under each schedule the plan's fused ops render another kernel
    (through the rendered cache) and the knobs are restored after it."""
    from bench.gemv_fused import SCHEDULES, schedule, variant_names
    from luminal.backends.cuda import rendered
    from luminal.backends.cuda.kernels import gemv

    llir = _preferred(_graph("mlp_block", lm.bf16))
    ops = [n.op for n in llir.nodes if isinstance(n.op, KernelGemvFused)]
    names, codes = {}, {}
    for name in SCHEDULES:
        with schedule(name):
            names[name] = tuple(variant_names(llir))
            codes[name] = tuple(rendered.render(op, SLOTS) for op in ops)  # code and launches (waves2: the grid)
    assert names["early"] == names["looped"]  # EARLY is the default (session 6: it won on the H200)
    del names["early"], codes["early"]
    assert len(set(names.values())) == len(names), names
    del codes["waves2"]  # at these 8-12 tiles a grid of two waves is the grid of one: the same kernel
    assert len(set(codes.values())) == len(codes)
    assert gemv.EARLY and not any(getattr(gemv, k) for k in ("AHEAD", "PIPE", "WIDE"))
    assert tuple(rendered.render(op, SLOTS) for op in ops) == codes["looped"]
    assert tuple(rendered.render(op, SLOTS) for op in ops) != codes["early-ahead"]


def test_what_each_fused_op_holds():
    (pro,) = [op for op in _launches(_preferred(_graph("prologue", lm.bf16))) if isinstance(op, KernelGemvFused)]
    assert len(pro.x) == 1 and not isinstance(pro.x[0].op, KernelGemvFused), pro  # x computed in the kernel
    kinds = {type(n.op).__name__ for n in pro.nodes()}
    assert {"KernelSumReduce", "KernelSqrt", "KernelRecip", "KernelAcc"} <= kinds, kinds
    (res,) = _launches(_preferred(_graph("residual", lm.bf16)))
    assert res.x == () and type(res.epi[0].op).__name__ == "KernelAdd", res  # x read from its buffer
    (gated,) = _launches(_preferred(_graph("gated_silu", lm.bf16)))
    assert len(gated.ns) == 2 and gated.out_size() is gated.ns[0], gated
    down = [op for op in _launches(_preferred(_graph("mlp_block", lm.bf16))) if op.epi and op.m == 1]
    assert len(down) == 1 and down[0].x == (), down  # the gated product is read, not recomputed per block


@pytest.mark.parametrize("name", ["gated_f32_silu", "gated_f32_gelu_tanh", "logits_f32"])
def test_cast_epilogues_equal_the_unfused_plan_bit_for_bit(name):
    """bf16 models round the GEMVs to bf16, compute the gating (or nothing) in f32 and cast: the
    fused epilogue reads each dot product through that cast (an exact operand: rounded to bf16
    first), so its values are the unfused plan's (the cast as a KernelFused of its own) bit for bit."""
    g = _graph(name, lm.bf16)
    view = build_egraph(g, CpuCudaBackend(), {"s": (1, 1)})
    fused = view.repair(view.preferred_genome(preference(CpuCudaBackend())))
    plain = list(fused)
    for c in view.classes:
        names = [view._op_name(m) for m in view.choices[c]]
        if names[fused[view.index[c]]] == "KernelGemvFused" and "KernelCast" in names:
            plain[view.index[c]] = names.index("KernelFused")
    after, before = view.extract(fused), view.extract(view.repair(plain))
    assert [type(op).__name__ for op in _launches(after)] == ["KernelGemvFused"], after.op_counts()
    assert before.op_counts()["KernelFused"] == 1 and len(_launches(before)) == 2, before.op_counts()
    for seed in (1, 2):
        feed = _feed(g, {"s": 1}, seed)
        got, want = (CpuCudaBackend().load(p).run(feed, {"s": 1})["y"] for p in (after, before))
        assert np.asarray(got).dtype == np.asarray(want).dtype
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=f"{name} seed {seed}")
    _compiles(_launches(after))


def test_a_kept_slice_aliases_the_stacked_product_without_a_launch(fake):
    """A plan that keeps a KernelSlice (sampled, kernels only: the stacked q/k/v read through slices)
    gives it the stacked buffer's bytes at its offset (alias()) and launches nothing for it; the
    values are the reference's on the fake device, where a missing alias would read garbage."""
    from luminal.backends.cuda import runtime

    assert KernelSlice(num(3), num(5), lm.bf16).render(SLOTS).launches == ()
    g = _graph("qkv", lm.bf16)
    plans = [p for p in sample_genomes(build_egraph(g, CpuCudaBackend(), {"s": (1, 1)}), 24, seed=5)
             if "KernelSlice" in p.op_counts() and not any(isinstance(n.op, HostOp) for n in p.nodes)]  # fmt: skip
    assert plans
    for llir in plans[:2]:
        ex = runtime.CudaExecutor(llir.nodes)
        fake.bind(ex)
        assert not any(isinstance(llir.nodes[s.node].op, KernelSlice) for s in ex.steps), llir.op_counts()
        _check(g, llir, _feed(g, {"s": 1}, 4), lm.bf16, "kept slices", ex.run)


def test_rules_do_not_fire_off_decode():
    """s unbounded (prefill): no m = 1 GEMV, so no fused GEMV; the kernel plan stays correct."""
    for name in ("prologue", "residual", "gated_silu"):
        g = _graph(name, lm.f32)
        llir = _preferred(g, bounds={})
        assert not any(isinstance(op, KernelGemvFused) for op in _launches(llir)), (name, llir.op_counts())


@pytest.mark.parametrize("name", ["prologue", "residual", "gated_silu", "up_gated", "mlp_block", "qkv"])
def test_every_sampled_extraction_matches_the_reference(name):
    g = _graph(name, lm.f32)
    view = build_egraph(g, CpuCudaBackend(), {"s": (1, 1)})
    feed = _feed(g, {"s": 1}, 1)
    llirs = sample_genomes(view, 32, seed=5)  # 32: every fused read of a stacked slice is one more choice
    assert any(isinstance(n.op, KernelGemvFused) for ll in llirs for n in ll.nodes)
    assert any(not any(isinstance(n.op, KernelGemvFused) for n in ll.nodes) for ll in llirs)  # unfused too
    for llir in llirs:
        _check(g, llir, feed, lm.f32, name)


class _Unfused(CpuCudaBackend):
    """The same rules, without the fused GEMV ops (extraction cannot choose them): the plan before."""

    ops = tuple(c for c in CpuCudaBackend.ops if c not in GEMV_FUSED_OPS)


def llama_layer_plans(dtype=lm.f32) -> tuple[LLIRGraph, LLIRGraph]:
    """The preferred decode plans (s = 1) of a 1-layer llama-3.2-1b-shaped graph (vocab 1024),
    without and with the fused GEMVs."""
    from luminal.models import llama

    cfg = replace(llama.CONFIGS["llama-3.2-1b"], n_layers=1, vocab_size=1024)
    g = llama.Transformer(cfg, 256).graph
    before, after = (_preferred(g, b, {"s": (1, 1), "r": (1, 1)}) for b in (_Unfused(), CpuCudaBackend()))
    return before, after


def launch_summary(llir: LLIRGraph) -> dict:
    """Ops that launch (`ops`), the kernel launches they render to plus one per library call
    (`launches`: a KernelScatter is three), and the op counts."""
    counts = {k: v for k, v in llir.op_counts().items() if k not in ("Input", "Output")}
    ops = _launches(llir)
    n = sum(len(op.render(SLOTS).launches) if isinstance(op, KernelOp) else 1 for op in ops)
    return {"ops": len(ops), "launches": n, **counts}


def test_llama_decode_layer_uses_fused_gemvs():
    before, after = llama_layer_plans()
    print(f"\nllama-3.2-1b, 1 layer, vocab 1024, s = 1 -- without fused GEMVs: {launch_summary(before)}\n"
          f"  after: {launch_summary(after)}")  # fmt: skip
    fused = [n.op for n in after.nodes if isinstance(n.op, KernelGemvFused)]
    shapes = sorted((tuple(int(e.value) for e in op.ns), bool(op.x), type(op.epi[0].op).__name__ if op.epi else None)
                    for op in fused)  # fmt: skip
    assert shapes == [
        ((1024,), True, "KernelAcc"),  # lm_head with the final norm
        ((2048,), False, "KernelAdd"),  # o_proj + residual (reads the attention output)
        ((2048,), False, "KernelAdd"),  # down_proj + residual (reads the gated product)
        ((2048, 512, 512), True, None),  # q, k, v stacked, with the attention norm
        ((8192, 8192), True, "KernelMul"),  # gate, up and silu(gate) * up, with the MLP norm
    ], shapes
    # every normalized x loads h (the residual stream) from its buffer; every residual is loaded too:
    # no op recomputes the stream inline, so its input count does not grow with depth
    assert all(op.n_inputs <= op.m + 3 for op in fused), [(op.m, op.n_inputs) for op in fused]
    assert sum(isinstance(n.op, KernelSlice) for n in after.nodes) == 0  # q, k, v read in place (fuse-slice)
    b, a = launch_summary(before), launch_summary(after)
    assert a["ops"] <= b["ops"] - 8 and a["launches"] <= b["launches"] - 8, (b, a)
    _compiles(_launches(after))


def test_the_cuda_runtime_runs_fused_plans_on_the_fake_device(monkeypatch):
    """The runtime's view of the fused ops (inputs, views, arena, launches, graph replay), on the
    fake driver (each launch runs the op's reference on the bytes behind its pointers)."""
    from luminal.backends.cuda import runtime
    from tests.backends.cuda import fake_driver

    monkeypatch.setattr(runtime, "driver", fake_driver)
    monkeypatch.setattr(runtime, "load_kernels", fake_driver.load_kernels)
    fake_driver.reset()
    try:
        for name in ("mlp_block", "qkv", "prologue"):
            g = _graph(name, lm.bf16)
            llir = _preferred(g)
            ex = runtime.CudaExecutor(llir.nodes)
            fake_driver.bind(ex)
            for seed in (1, 2):
                _check(g, llir, _feed(g, {"s": 1}, seed), lm.bf16, f"{name} fake device", ex.run)
    finally:
        fake_driver.reset()


# -- the generated C on the CPU (g++, one std::thread per CUDA thread: tests/backends/cuda/test_gemv.py) -----
_RUN = r"""
extern "C" void run_{name}(void** a, const long long* dims, int grid, int block) {{
  std::barrier<> bar(block); block_bar = &bar;  // one thread per CUDA thread, reused block after block
  gridDim.x = grid;
  for (int i = 0; i < block / 32; ++i) warp_bar[i] = new std::barrier<>(32);
  std::vector<std::thread> ts;
  for (int t = 0; t < block; ++t)
    ts.emplace_back([=, &bar] {{
      threadIdx.x = t;
      for (int b = 0; b < grid; ++b) {{ blockIdx.x = b; {name}({args}dims); bar.arrive_and_wait(); }}
    }});
  for (auto& t : ts) t.join();
  for (int i = 0; i < block / 32; ++i) delete warp_bar[i];
}}
"""
_CTYPE = {lm.f32: "float", lm.bf16: "__nv_bfloat16"}


class _OnCpu:
    """A KernelGemvFused whose `reference` runs its rendered CUDA C (compiled by g++) instead."""

    def __init__(self, op: KernelGemvFused, kernel, so):
        self.op, self.kernel, self.fn = op, kernel, getattr(so, f"run_{kernel.launches[0].name}")

    def __getattr__(self, name):  # alias(), inplace, ...: the op's own
        return getattr(self.op, name)

    def reference(self, ins, in_dtypes, env):
        import ctypes

        out = np.full(int(self.op.out_size().evaluate(env)) + 1, np.nan, self.op.out_dtype(in_dtypes).np)
        bufs = [out, *(np.ascontiguousarray(x) for x in ins)]
        ptrs = (ctypes.c_void_p * len(bufs))(*(b.ctypes.data for b in bufs))
        dims = np.array([env.get(k, 0) for k in sorted(SLOTS, key=SLOTS.get)], np.int64)
        (ln,) = self.kernel.launches
        self.fn(ptrs, ctypes.c_void_p(dims.ctypes.data), int(ln.grid.evaluate(env)), ln.block)
        assert np.isnan(out[-1].astype(np.float32)), "the kernel wrote past its output"
        return out[:-1]


_KNOBS = {"early-ahead": ("EARLY", "AHEAD"), "wide": ("WIDE",), "pipe": ("PIPE",)}  # gemv.py's session-6 knobs


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20) to run the CUDA C on the CPU")
@pytest.mark.parametrize("schedule", ["own", "split4", *_KNOBS])
def test_generated_kernels_compute_the_blocks_on_cpu(tmp_path, monkeypatch, schedule, dt=lm.bf16):
    """bf16 (the dtype the zoo decodes in; f32 differs only in the dot product, which test_gemv runs):
    the prologue, both epilogues, the gated pair, the stacked q/k/v, row counts that leave partial
    tiles and a long one. The grid is capped at 4 blocks (gemv.SMS = 1), so every block runs its
    prologue once and walks several tiles; `split4` renders each op with 4 warps per row (partials
    meet in shared memory, double-buffered across tiles) and one vector per lane per batch; the
    knob schedules (_KNOBS) render the looped schedule with gemv.py's knobs on."""
    import ctypes
    import subprocess
    from types import SimpleNamespace

    from luminal.backends.cuda.kernel import PRELUDE
    from luminal.backends.cuda.kernels import gemv
    from luminal.backends.reference.executor import ReferenceExecutor
    from tests.backends.cuda.test_gemv import _SHIM

    monkeypatch.setattr(gemv, "SMS", 1)
    for knob in _KNOBS.get(schedule, ()):
        monkeypatch.setattr(gemv, knob, True)
    names = ("prologue", "mlp_block", "odd_qkv", "odd_gated")  # each tile costs a few barriers of 256 threads
    names += ("up_gated", "qkv", "lm_head", "gated_f32_silu", "logits_f32", "gemma_mlp") if schedule == "own" else ()
    plans = {name: _preferred(_graph(name, dt)) for name in names}
    ops = list(dict.fromkeys(n.op for p in plans.values() for n in p.nodes if isinstance(n.op, KernelGemvFused)))
    pick = (lambda op: replace(op.variant(), split=4, unroll=1)) if schedule == "split4" else (lambda op: op.variant())
    kernels = {op: op.render(SLOTS, pick(op)) for op in ops}
    want = {"early-ahead": ("-a",), "wide": ("-o2-", "-d2"), "pipe": ("-d2",)}.get(schedule, ())
    assert all(t in pick(op).name for op in ops for t in want), [pick(op).name for op in ops]
    if schedule == "early-ahead":  # early where it won on the H200: a one-load prologue or long rows
        assert any("-a-e-d2" in pick(op).name for op in ops), [pick(op).name for op in ops]
    assert any(k.launches[0].grid.evaluate({"s": 1}) * pick(op).rows_per_block < op.out_size().evaluate({"s": 1})
               for op, k in kernels.items()), "no block walks more than one tile"  # fmt: skip
    runs = ""
    for op, k in kernels.items():
        params = [op.out_dtype((op.dtype,) * op.base + op.leaf_dtypes()), *(op.dtype,) * op.base, *op.leaf_dtypes()]
        args = "".join(f"({'' if j == 0 else 'const '}{_CTYPE[d]}*)a[{j}], " for j, d in enumerate(params))
        runs += _RUN.format(name=k.launches[0].name, args=args)
    src, lib = tmp_path / "gemvfused.cpp", tmp_path / "gemvfused.so"
    src.write_text(_SHIM + PRELUDE + "".join(dict.fromkeys(k.code for k in kernels.values())) + runs)
    done = subprocess.run(["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", "-o", str(lib), str(src)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    so = ctypes.CDLL(str(lib))
    for name, llir in plans.items():
        g = _graph(name, dt)
        nodes = [SimpleNamespace(op=_OnCpu(n.op, kernels[n.op], so), inputs=n.inputs, dtype=n.dtype)
                 if isinstance(n.op, KernelGemvFused) else n for n in llir.nodes]  # fmt: skip
        _check(g, llir, _feed(g, {"s": 1}, 7), dt, f"{name} on cpu", ReferenceExecutor(nodes, llir.outputs).run)


# -- GPU ------------------------------------------------------------------------------------------------
_ODD = ("odd_qkv", "odd_gated", "lm_head")  # partial tiles and long walks: bf16 only (the tiling is dtype-blind)
_GPU_CASES = [(n, dt) for n in sorted(BLOCKS) if n not in _ODD for dt in (lm.f32, lm.bf16)]
_GPU_CASES += [("mlp_block", lm.f16), ("qkv", lm.f16)] + [(n, lm.bf16) for n in _ODD]


@pytest.mark.cuda
@pytest.mark.parametrize("name,dt", _GPU_CASES, ids=[f"{n}-{d}" for n, d in _GPU_CASES])
def test_fused_gemv_blocks_on_the_gpu(name, dt):
    """The preferred (fused) plan and the plan search picks, on the device, against the reference."""
    g = _graph(name, dt)
    backend = CudaBackend()
    llir = _preferred(g, backend)
    m = g.compile("cuda", cache=False, buckets={"s": [(1, 1)]})
    for seed in range(3):
        feed = _feed(g, {"s": 1}, seed)
        _check(g, llir, feed, dt, f"{name} preferred", backend.load(llir).run, 2.0)
        _check(g, m.plans[0], feed, dt, f"{name} searched", lambda f, env: m.run(f), 2.0)


@pytest.mark.cuda
@pytest.mark.parametrize("knobs", [("AHEAD",), ("EARLY", "AHEAD"), ("PIPE",), ("WIDE",), ("EARLY", "WIDE")],
                         ids=lambda k: "-".join(k).lower())  # fmt: skip
@pytest.mark.parametrize("name", ["mlp_block", "qkv", "odd_gated", "lm_head"])
def test_knob_schedules_on_the_gpu(name, knobs, monkeypatch):
    """gemv.py's session-6 knobs (bench/gemv_fused.py --schedules): the preferred plan against the
    reference, rendered anew (the rendered cache keys on the schedule)."""
    from luminal.backends.cuda.kernels import gemv

    for knob in knobs:
        monkeypatch.setattr(gemv, knob, True)
    g, dt = _graph(name, lm.bf16), lm.bf16
    backend = CudaBackend()
    llir = _preferred(g, backend)
    for seed in range(2):
        _check(g, llir, _feed(g, {"s": 1}, seed), dt, f"{name} {knobs}", backend.load(llir).run, 2.0)


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["prologue", "residual", "gated_silu", "mlp_block", "qkv"])
def test_every_sampled_extraction_agrees_on_the_gpu(name):
    g = _graph(name, lm.bf16)
    backend = CudaBackend()
    view = build_egraph(g, backend, {"s": (1, 1)})
    feed = _feed(g, {"s": 1}, 5)
    rng = random.Random(0)
    seen = set()
    for gen in [view.preferred_genome(preference(backend))] + [view.random_genome(rng) for _ in range(12)]:
        llir = view.extract(view.repair(gen))
        if llir.fingerprint() in seen:
            continue
        seen.add(llir.fingerprint())
        _check(g, llir, feed, lm.bf16, name, backend.load(llir).run, 2.0)


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["lm_head", "gated"])
@pytest.mark.parametrize("rows", [20003, 5003])
def test_long_walks_on_the_gpu(kind, rows):
    """More tiles than one wave of blocks holds (each block walks several, prologue once), the
    last tile partial: an lm_head and a gated pair with `rows` outputs, against the reference."""
    g, dt = lm.Graph(), lm.bf16
    x = _norm(g, g.tensor("x", ("s", D), dt), dt)
    if kind == "lm_head":
        y = _lin(g, x, "W", D, rows, dt)
    else:
        y = _lin(g, x, "Wg", D, rows, dt).silu() * _lin(g, x, "Wu", D, rows, dt)
    y.output("y")
    backend = CudaBackend()
    llir = _preferred(g, backend)
    (op,) = [op for op in _launches(llir) if isinstance(op, KernelGemvFused)]
    grid = op.render(SLOTS).launches[0].grid.evaluate({"s": 1})
    assert grid * op.variant().rows_per_block < rows, (grid, op.variant())
    for seed in range(2):
        _check(g, llir, _feed(g, {"s": 1}, seed), dt, f"{kind} {rows}", backend.load(llir).run, 2.0)
