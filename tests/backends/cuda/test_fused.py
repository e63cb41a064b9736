"""Fused kernels (kernels/fused.py, emit.py, the fusion_grow rules).

CPU: the preferred plan of each block is the expected number of fused kernels in the expected
layout, its kernels compile with NVRTC for sm_90, every sampled extraction (fused or not, any
cut) equals the reference, and plans survive the LLIR JSON round trip.
GPU (`cuda`): fused plans and every sampled extraction against the reference, odd and symbolic
row lengths, dtypes, dims changing between runs."""

from __future__ import annotations

import random

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.backend import CudaBackend
from luminal.backends.cuda.kernel import KernelOp, source
from luminal.backends.cuda.kernels import KernelFused
from luminal.egraph.compile import CompileOptions, build_egraph, compile_plans, preference
from luminal.egraph.llir import LLIRGraph
from luminal.egraph.search import sample_genomes
from luminal.hlir import HLIR_OPS
from tests.backends.cuda.test_lowering import CpuCudaBackend
from tests.helpers import assert_matches

SLOTS = {"s": 0, "n": 1, "!error": 2}


def _attention(g, dt):
    q, k, v = (g.tensor(n, ("s", 4, 16), dt) for n in "qkv")
    scores = (q.permute(1, 0, 2) @ k.permute(1, 2, 0)) * 0.25  # (4, s, s)
    return (scores.softmax(-1) @ v.permute(1, 0, 2)).permute(1, 0, 2)


def _mlp(g, dt):
    x, w, b = g.tensor("x", ("s", 32), dt), g.tensor("w", (32, 48), dt), g.tensor("b", (48,), dt)
    return ((x @ w) + b).gelu_tanh()


def _rms_affine(g, dt):
    x, w = g.tensor("x", ("s", 96), dt), g.tensor("w", (96,), dt)
    return x.rms_norm() * w


# name -> (build(g, dtype) -> output tensor, fused kernels in the preferred plan, row kernels among them)
BLOCKS = {
    "exp": (lambda g, dt: g.tensor("x", ("s", 64), dt).exp(), 1, 0),
    "gelu": (lambda g, dt: g.tensor("x", ("s", 64), dt).gelu(), 1, 0),
    "silu_bcast": (lambda g, dt: g.tensor("x", ("s", 64), dt).silu() * g.tensor("y", (64,), dt), 1, 0),
    "softmax": (lambda g, dt: g.tensor("x", ("s", 300), dt).softmax(-1), 1, 1),
    "log_softmax": (lambda g, dt: g.tensor("x", ("s", 70), dt).log_softmax(-1), 1, 1),
    "layer_norm": (lambda g, dt: g.tensor("x", ("s", 2048), dt).layer_norm(), 1, 1),
    "rms_affine": (_rms_affine, 1, 1),
    "sum_exp": (lambda g, dt: g.tensor("x", ("s", "n"), dt).exp().sum(axis=1), 1, 0),
    "softmax_symbolic": (lambda g, dt: g.tensor("x", ("s", "n"), dt).softmax(-1), 1, 1),
}


def _graph(name: str, dt) -> lm.Graph:
    g = lm.Graph()
    BLOCKS[name][0](g, dt).output("y")
    return g


def _feed(g: lm.Graph, env: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {n: rng.uniform(-2, 2, tuple(int(d.evaluate(env)) for d in sh)).astype(g.nodes[g.inputs[n]].dtype.np)
            for n, sh in g.input_shapes.items()}  # fmt: skip


def _preferred(g: lm.Graph) -> LLIRGraph:
    _, (llir,), _ = compile_plans(g, CpuCudaBackend(), CompileOptions(cache=False, search_budget=1))
    return llir


@pytest.mark.parametrize("name", sorted(BLOCKS))
@pytest.mark.parametrize("dt", [lm.f32, lm.bf16], ids=str)
def test_preferred_plan_is_fused(name, dt, no_cache):
    g = _graph(name, dt)
    llir = _preferred(g)
    kernels = [n.op for n in llir.nodes if isinstance(n.op, KernelOp)]
    fused = [k for k in kernels if isinstance(k, KernelFused)]
    _, want_fused, want_rows = BLOCKS[name]
    assert len(kernels) == len(fused) == want_fused, llir.op_counts()
    rendered = [k.render(SLOTS) for k in kernels]
    rows = [r for r in rendered if "out[row * ncol + " in r.code]
    assert len(rows) == want_rows, [r.code for r in rendered]
    for r in rows:  # a row kernel: reductions over the row group's lanes, then one loop over the columns
        assert r.code.index("= lane") < r.code.index("const long long ncol"), r.code
        if "symbolic" not in name:  # a literal row length: the values stay in per-thread registers
            assert "for (int j = 0; j <" in r.code and "[j] = " in r.code, r.code
    assert nvrtc.compile_cubin(source(rendered), arch="sm_90")[:4] == b"\x7fELF"
    classes = {c.__name__: c for c in (*HLIR_OPS, *CudaBackend.ops)}
    assert LLIRGraph.from_json(llir.to_json(), classes).fingerprint() == llir.fingerprint()


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "rms_affine", "silu_bcast", "sum_exp"])
def test_every_sampled_extraction_matches_the_reference(name):
    g = _graph(name, lm.f32)
    view = build_egraph(g, CpuCudaBackend())
    env = {"s": 3, "n": 5}
    feed = _feed(g, env, 1)
    want = g.compile("reference", cache=False).run(feed)["y"]
    llirs = sample_genomes(view, 12, seed=3)
    assert any(isinstance(n.op, KernelFused) for ll in llirs for n in ll.nodes)
    for llir in llirs:
        got = CpuCudaBackend().load(llir).run(feed, env)["y"]
        assert_matches(np.asarray(got).reshape(want.shape), want, lm.f32, 1.0, f"{name} {llir.op_counts()}")


def test_attention_and_mlp_fuse_around_their_matmuls():
    for build, most in ((_attention, 4), (_mlp, 3)):
        g = lm.Graph()
        build(g, lm.f32).output("y")
        llir = _preferred(g)
        kernels = [n.op for n in llir.nodes if isinstance(n.op, KernelOp)]
        assert len(kernels) <= most, llir.op_counts()
        feed = _feed(g, {"s": 5}, 2)
        want = g.compile("reference", cache=False).run(feed)["y"]
        got = CpuCudaBackend().load(llir).run(feed, {"s": 5})["y"]
        assert_matches(np.asarray(got).reshape(want.shape), want, lm.f32, 1.0, build.__name__)


def _rope(g, dt):
    from luminal import nn
    from luminal.shape.expr import dim

    rope = nn.RoPE(g, "rope", 16, dim("p"), dim("s"))
    return rope(g.tensor("x", ("s", 3, 16), dt))


def test_a_gather_through_an_iota_is_read_inline():
    """The rotary's x[..., h:] is a Gather by an Iota: fused kernels read it as a strided view
    (fused.egg fuse-gather-iota), so no gather kernel is left, and every extraction agrees."""
    g = lm.Graph()
    _rope(g, lm.f32).output("y")
    llir = _preferred(g)
    names = [type(n.op).__name__ for n in llir.nodes if isinstance(n.op, KernelOp)]
    assert "KernelGather" not in names, names
    assert nvrtc.compile_cubin(source([n.op.render({"s": 0, "p": 1, "!error": 2}) for n in llir.nodes
                                       if isinstance(n.op, KernelOp)]), arch="sm_90")[:4] == b"\x7fELF"  # fmt: skip
    env = {"s": 3, "p": 5}
    feed = {"x": np.random.default_rng(0).uniform(-2, 2, (3, 3, 16)).astype(np.float32),
            "rope.inv_freq": (1.0 / 10000 ** (np.arange(0, 16, 2) / 16)).astype(np.float32)}  # fmt: skip
    want = g.compile("reference", cache=False).run(feed, dims={"p": 5})["y"]
    view = build_egraph(g, CpuCudaBackend())
    for ll in [llir, *sample_genomes(view, 10, seed=2)]:
        got = CpuCudaBackend().load(ll).run(feed, env)["y"]
        assert_matches(np.asarray(got).reshape(want.shape), want, lm.f32, 1.0, f"rope {ll.op_counts()}")


# -- GPU ------------------------------------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("cols", [1, 3, 127, 4097])
@pytest.mark.parametrize("dt", [lm.f32, lm.f16, lm.bf16], ids=str)
def test_row_kernels_on_the_gpu(cols, dt):
    g = lm.Graph()
    x = g.tensor("x", ("s", cols), dt)
    w = g.tensor("w", (cols,), dt)
    x.softmax(-1).output("sm")
    x.log_softmax(-1).output("lsm")
    (x.layer_norm() * w).output("ln")
    x.exp().sum(axis=1).output("se")
    m, ref = g.compile("cuda", cache=False), g.compile("reference", cache=False)
    assert any(isinstance(n.op, KernelFused) for n in m.plans[0].nodes)
    for k, s in enumerate((5, 1, 33, 0, 5)):
        feed = _feed(g, {"s": s}, k)
        got, want = m.run(feed), ref.run(feed)
        for name, arr in want.items():
            assert_matches(got[name], arr, dt, 2.0, f"{name} cols={cols} s={s}")


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["softmax_symbolic", "layer_norm", "rms_affine", "gelu", "silu_bcast", "sum_exp"])
def test_every_sampled_extraction_agrees_on_the_gpu(name):
    g = _graph(name, lm.bf16)
    backend = CudaBackend()
    view = build_egraph(g, backend)
    env = {"s": 7, "n": 129}
    feed = _feed(g, env, 5)
    want = g.compile("reference", cache=False).run(feed)["y"]
    rng = random.Random(0)
    seen = set()
    for gen in [view.preferred_genome(preference(backend))] + [view.random_genome(rng) for _ in range(10)]:
        llir = view.extract(view.repair(gen))
        if llir.fingerprint() in seen:
            continue
        seen.add(llir.fingerprint())
        got = backend.load(llir).run(feed, env)["y"]
        assert_matches(got.reshape(want.shape), want, lm.bf16, 2.0, f"{name} {llir.op_counts()}")
