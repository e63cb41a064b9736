"""The prefill plan's KV-cache writes (kernels/inplace.egg, inplace.py): the one-block in-place
scatter is offered only where the bucket bounds the index count by 4096 (an interval fact, the
rule `kernel-scatter-inplace-block`), so a 512-token prefill writes its rows grid-wide; a write
whose values reduce over rows (qwen3's k-norm) runs a warp per head row in both launch shapes;
the plans agree with the HLIR on the CPU (reference semantics, every sampled extraction) and on
the GPU (`cuda`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.host import HostOp
from luminal.backends.cuda.kernel import source
from luminal.backends.cuda.kernels.fused import KernelFused
from luminal.backends.cuda.kernels.inplace import KernelScatterFused, KernelScatterInplace, KernelScatterPair
from luminal.backends.cuda.kernels.reduce import KernelReduce
from luminal.backends.reference import ReferenceExecutor
from luminal.egraph.compile import build_egraph, preference
from luminal.egraph.search import sample_genomes
from luminal.models import llama
from luminal.models.common import random_weights
from tests.backends.cuda.test_gemvfused import _preferred
from tests.backends.cuda.test_inplace import SLOTS
from tests.backends.cuda.test_launches import PRESETS
from tests.backends.cuda.test_lowering import CpuCudaBackend
from tests.helpers import assert_matches

CAP = 1024
PREFILL = {"s": (2, 512), "r": (1, 1), "p": (0, CAP - 512)}  # a prompt of up to 512 tokens
DECODE = {"s": (1, 1), "r": (1, 1), "p": (0, CAP - 1)}


def _model(name: str):
    """The small bf16 one-layer step of a preset (qwen3 keeps head_dim 128), cache capacity CAP."""
    mod, preset = PRESETS[name]
    cfg = replace(mod.CONFIGS[preset], n_layers=1, vocab_size=256, dim=512, hidden=1024, n_heads=8, n_kv_heads=2)
    return getattr(mod, "Transformer", llama.Transformer)(cfg, CAP, "bf16")


def _writes(llir) -> list:
    return [n.op for n in llir.nodes if isinstance(n.op, (KernelScatterFused, KernelScatterInplace, KernelScatterPair))]


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_prefill_writes_the_cache_grid_wide(name):
    """At s <= 512 the k and v writes run on the whole grid (the one-block form is not offered: its
    index count is bounded by 2 * 512 * head_dim > 4096, nor is the pair of one-block writes); a
    decode step keeps the one-block form, both writes in one launch (KernelScatterPair)."""
    model = _model(name)
    prefill, decode = (_preferred(model.graph, None, b) for b in (PREFILL, DECODE))
    assert len(_writes(prefill)) == 2 and all(op.wide for op in _writes(prefill)), prefill.op_counts()
    assert [type(op) for op in _writes(decode)] == [KernelScatterPair], decode.op_counts()
    kernels = [op.render(SLOTS) for op in _writes(prefill) + _writes(decode)]
    assert nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_prefill_o_proj_is_a_library_matmul(name):
    """The attention output (heads, s, d) read as (s, heads * d) by o_proj is copied contiguously
    (matmul_flatten.egg `copy-a`) and multiplied by cuBLASLt, not by one reduction block per output
    element; the decode step (s = 1) keeps o_proj in its GEMV."""
    model = _model(name)
    prefill, decode = (_preferred(model.graph, None, b) for b in (PREFILL, DECODE))
    reductions = [n.op for n in prefill.nodes if isinstance(n.op, KernelFused) and isinstance(n.op.root, KernelReduce)]
    assert not reductions, reductions
    libs = [n for n in prefill.nodes if isinstance(n.op, HostOp)]
    assert len(libs) >= 4, prefill.op_counts()  # q/k/v, o_proj, gate/up, down (lm_head: one row, the GEMV)
    assert not [n for n in decode.nodes if isinstance(n.op, HostOp)], decode.op_counts()


def test_a_short_prompt_bucket_keeps_the_one_block_form():
    """The gate is the bound, not the prefill: s <= 8 gives 2 * 8 * 128 = 2048 index positions."""
    llir = _preferred(_model("qwen3").graph, None, {"s": (2, 8), "r": (1, 1), "p": (0, CAP - 8)})
    assert len(_writes(llir)) == 2 and not any(op.wide for op in _writes(llir)), llir.op_counts()


@pytest.mark.parametrize("bounds", [PREFILL, DECODE], ids=["prefill", "decode"])
def test_normed_k_write_is_row_level(bounds):
    """qwen3's k write (k-norm then rotary) is a warp per head row at both buckets: its rendered
    write phase shuffles the row's sum of squares; no element computes it alone (lane = 0)."""
    (normed,) = [
        op for op in _writes(_preferred(_model("qwen3").graph, None, bounds)) if "iters" in op.render(SLOTS).code
    ]
    code = normed.render(SLOTS).code
    assert "__shfl_down_sync" in code and "const int lane = 0;" not in code, code


def _feed(model, s: int, p: int, seed: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    weights = {**random_weights(model.weight_shapes(), seed=seed, std=0.05), **model.extra_inputs()}
    caches = {n: rng.uniform(-1, 1, sh).astype(lm.bf16.np) for n, sh in model.cache_shapes.items()}
    feed = {"tokens": rng.integers(0, 256, s).astype(np.int32), "rows": np.array([s - 1], np.int32),
            **weights, **caches}  # fmt: skip
    return feed, {"s": s, "p": p, "r": 1}


def _check(model, feed: dict, dims: dict, got: dict, want: dict, what: str) -> None:
    s, p = dims["s"], dims["p"]
    for label, arr in want.items():
        a = np.asarray(got[label]).reshape(arr.shape).astype(lm.bf16.np)
        assert_matches(a, np.asarray(arr).astype(lm.bf16.np), lm.bf16, 2.0, f"{what} {label}")
    for label, shape in model.cache_shapes.items():  # the s new rows landed at p; nothing else moved
        new = np.asarray(got[label]).reshape(shape)
        np.testing.assert_array_equal(new[:, :p], feed[label][:, :p], err_msg=f"{what} {label}")
        np.testing.assert_array_equal(new[:, p + s :], feed[label][:, p + s :], err_msg=f"{what} {label}")


def test_every_sampled_prefill_extraction_agrees_with_the_reference():
    model = _model("qwen3")
    g = model.graph
    view = build_egraph(g, CpuCudaBackend(), PREFILL)
    feed, dims = _feed(model, 7, 5, seed=4)
    want = ReferenceExecutor(g.nodes, g.outputs).run({k: v.copy() for k, v in feed.items()}, dims)
    wide = set()
    preferred = view.extract(view.repair(view.preferred_genome(preference(CpuCudaBackend()))))  # copy-a + cuBLASLt
    for llir in [preferred, *sample_genomes(view, 5, seed=3)]:
        wide.update(op.wide for op in _writes(llir))
        got = ReferenceExecutor(llir.nodes, llir.outputs).run({k: v.copy() for k, v in feed.items()}, dims)
        _check(model, feed, dims, got, want, "qwen3 prefill sampled")
    assert wide == {True}, wide


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_prefill_and_decode_on_the_gpu(name):
    """The preferred prefill plan (s = 300: 600 head rows, 19 blocks of 32 warps) and decode plan on
    the device against the HLIR: logits and the caches' new rows, nothing else written."""
    from luminal.backends.cuda.backend import CudaBackend

    model = _model(name)
    backend = CudaBackend()
    for bounds, s, p in ((PREFILL, 300, 17), (PREFILL, 2, 0), (DECODE, 1, 317)):
        ex = backend.load(_preferred(model.graph, backend, bounds))
        feed, dims = _feed(model, s, p, seed=s + p)
        want = ReferenceExecutor(model.graph.nodes, model.graph.outputs).run(
            {k: v.copy() for k, v in feed.items()}, dims
        )
        got = ex.run({k: v.copy() for k, v in feed.items()}, dims)
        _check(model, feed, dims, {k: np.asarray(v).copy() for k, v in got.items()}, want, f"{name} s={s} p={p}")
