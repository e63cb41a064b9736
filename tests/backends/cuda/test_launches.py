"""Kernel launches of a decode step (s = 1) in the CUDA backend's preferred plan (docs/perf.md,
"Launches per decode step"), counted by the runtime itself: CudaExecutor over the fake driver
(fake_driver.py) turns the plan into its launch steps exactly as on a GPU. The per-layer count is
the 2-layer plan's minus the 1-layer plan's. Every plan counted here also runs, on the same fake
device, against the HLIR reference."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda import runtime
from luminal.backends.reference import ReferenceExecutor
from luminal.egraph.compile import build_egraph, preference
from luminal.egraph.search import sample_genomes
from luminal.models import gemma, llama, qwen
from luminal.models.common import random_weights
from tests.backends.cuda import fake_driver
from tests.backends.cuda.test_gemvfused import _preferred, launch_summary
from tests.backends.cuda.test_lowering import CpuCudaBackend
from tests.helpers import assert_matches

CAP = 256
BOUNDS = {"s": (1, 1), "r": (1, 1), "p": (0, CAP - 1)}  # the decode bucket (models/engine.py step_buckets)
PRESETS = {"llama": (llama, "llama-3.2-1b"), "qwen3": (qwen, "qwen3-0.6b"), "gemma3": (gemma, "gemma-3-1b")}
# launches per layer: llama / qwen3 -- the stacked q/k/v GEMV (with the attention norm), q's rotary
# (none: attention loads q rotated, KernelAttentionRope; qwen3 / gemma3 normed and rotated,
# KernelAttentionNormRope, qnorm7), k's rotary
# (+ q/k-norm) and v written into their caches by one launch (KernelScatterPair), attention (one split-KV decode
# launch: the last split to finish merges them), o-proj + residual, gate/up with the MLP norm and
# silu(gate) * up as its epilogue (gemv-gated through the bf16 casts), down + residual.
# gemma3: the same less the MLP's residual, plus o_proj and down_proj on their own (a post-norm
# reads their whole row) and one stored residual sum: h + norm(o) is recomputed by the gated GEMV's
# prologue (gemv-x-resnorm), h + norm(o) + norm(down) stored by one fused kernel.
# (kvpair7, session 7: the pair replaced the two one-block writes, -1 a layer, ~3 us of fixed launch
# cost a layer on the H200)
PER_LAYER = {"llama": 6, "qwen3": 6, "gemma3": 7}
# launches per step outside the layers: the embedding's gather, the rows' gather, the lm_head GEMV
# (the final norm as its prologue, the f32 cast of the logits as its epilogue: gemv-cast); gemma3
# also scales the embedding by sqrt(dim) in a kernel of its own; llama computes the rotary's cos and
# sin tables (which every layer's attention reads) in two small kernels, and so do qwen3 and gemma3
# since their attention norms and rotates q (qnorm7: +2 a step, -1 a layer)
BEYOND = {"llama": 5, "qwen3": 5, "gemma3": 6}


def step(name: str, layers: int, small: bool = False):
    """The bf16 decoder step of a preset (vocab 1024), or a scaled-down one of the same structure."""
    mod, preset = PRESETS[name]
    cfg = replace(mod.CONFIGS[preset], n_layers=layers, vocab_size=1024)
    if small:
        cfg = replace(cfg, vocab_size=256, dim=512, hidden=1024, n_heads=8, n_kv_heads=2)
    return getattr(mod, "Transformer", llama.Transformer)(cfg, CAP, "bf16")


def launches(llir) -> Counter:
    """Launch steps of the plan on the CUDA runtime, by the op that owns them."""
    ex = runtime.CudaExecutor(llir.nodes)
    fake_driver.bind(ex)
    return Counter(type(llir.nodes[s.node].op).__name__ for s in ex.steps)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_decode_step_launches_per_layer(name, fake):
    one, two = (_preferred(step(name, n).graph, None, BOUNDS) for n in (1, 2))
    c1, c2 = launches(one), launches(two)
    per = c2 - c1
    print(f"\n{name}: 1 layer {c1.total()} launches, 2 layers {c2.total()}; per layer {per.total()} {dict(per)}")
    assert per.total() <= PER_LAYER[name], dict(per)
    assert c1.total() - per.total() <= BEYOND[name], dict(c1)
    for llir in (one, two):
        ops = launch_summary(llir)
        # the stacked GEMV's products are read where they are used, never copied out (llama's q is an
        # input of KernelAttentionRope: a KernelSlice that aliases the stacked buffer, no launch)
        roped = ops.get("KernelAttentionRope", 0) + ops.get("KernelAttentionNormRope", 0)
        assert "KernelSlice" not in launches(llir) and ops.get("KernelSlice", 0) <= roped, ops
        # k's rotary (and q/k-norm) and v are computed by the launch that writes them both into the
        # caches; each cache's new value is an alias of its buffer after that launch
        attention = sum(ops.get(k, 0) for k in ("KernelAttention", "KernelAttentionRope", "KernelAttentionNormRope"))
        assert "KernelScatterInplace" not in ops and "KernelScatterFused" not in ops, ops
        assert ops["KernelScatterPair"] == attention and ops["KernelAliasAfter"] == 2 * attention, ops
        pairs = [[llir.nodes[i].op.label for i in n.inputs[:2]] for n in llir.nodes
                 if type(n.op).__name__ == "KernelScatterPair"]  # fmt: skip
        assert sorted(pairs) == [[f"cache.{i}.k", f"cache.{i}.v"] for i in range(attention)], pairs  # a layer's own
    # attention: the decode kernel only (the prefill kernel is not part of an s = 1 plan)
    # llama: q rotated at its load; qwen3 / gemma3: normed and rotated at its load
    rope = "KernelAttentionRope" if name == "llama" else "KernelAttentionNormRope"
    assert per[rope] == 1 and per.total() == PER_LAYER[name] and per["KernelScatterPair"] == 1, dict(per)


def _switch(view, genome, frm: tuple[str, ...], to: str, only: int | None = None):
    """`genome` with the IR classes that chose an op of `frm` switched to their `to` node (`only`:
    the only-th such class alone, in class order)."""
    g, k = list(genome), 0
    for c in view.classes:
        names = [view._op_name(m) for m in view.choices[c]]
        if view.class_sort[c] == "IR" and names[g[view.index[c]]] in frm:
            if only is None or k == only:
                g[view.index[c]] = names.index(to)
            k += 1
    return g


def _unfused_scatters(view, genome):
    """`genome` with every cache write (the pair's aliases, a KernelScatterFused) replaced by a
    KernelScatterInplace of its class: the k rotary (and q/k-norm) in a kernel of its own, v read
    from a KernelSlice of the stacked GEMV."""
    return _switch(view, genome, ("KernelScatterFused", "KernelAliasAfter"), "KernelScatterInplace")


P = 37  # past length of the checked step


def _feed(model) -> tuple[dict, dict]:
    """Weights, token, row and caches holding P random rows, and the dims of one decode step."""
    rng = np.random.default_rng(3)
    weights = {**random_weights(model.weight_shapes(), seed=1, std=0.05), **model.extra_inputs()}
    caches = {}
    for n, shape in model.cache_shapes.items():
        c = np.zeros(shape, np.float32)
        c[:, :P] = rng.uniform(-1, 1, (shape[0], P, shape[2]))
        caches[n] = c.astype(lm.bf16.np)
    feed = {"tokens": np.array([5], np.int32), "rows": np.array([0], np.int32), **weights, **caches}
    return feed, {"p": P, "s": 1, "r": 1}


def _check(name: str, model, feed: dict, got: dict, want: dict) -> None:
    for label, arr in want.items():  # the logits are bf16 values (cast to f32 at the end)
        a = np.asarray(got[label]).reshape(arr.shape).astype(lm.bf16.np)
        assert_matches(a, arr, lm.bf16, 2.0, f"{name} {label}")
    for label, shape in model.cache_shapes.items():  # the new row landed at position P; nothing else moved
        new = np.asarray(got[label]).reshape(shape)
        np.testing.assert_array_equal(new[:, :P], feed[label][:, :P])
        np.testing.assert_array_equal(new[:, P + 1 :], feed[label][:, P + 1 :])


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_decode_step_plan_agrees_with_the_reference(name, fake):
    """The preferred decode plan on the fake CUDA device against the HLIR (logits and both caches),
    and bit for bit against the plan that writes the caches from buffers (what the fused scatter and
    the slice reads replace: same values, rounded at the same places)."""
    model = step(name, 1, small=True)
    g = model.graph
    view = build_egraph(g, CpuCudaBackend(), BOUNDS)
    genome = view.repair(view.preferred_genome(preference(CpuCudaBackend())))
    llir, before = view.extract(genome), view.extract(view.repair(_unfused_scatters(view, genome)))
    counts = llir.op_counts()  # (q: a KernelSlice aliasing the stacked buffer, read by KernelAttention(Norm)Rope)
    roped = counts.get("KernelAttentionRope", 0) + counts.get("KernelAttentionNormRope", 0)
    assert counts.get("KernelSlice", 0) == roped == 1 and counts["KernelScatterPair"] == 1
    assert before.op_counts()["KernelScatterInplace"] == 2 and "KernelSlice" in before.op_counts()
    assert "KernelSlice" not in launches(before)  # a kept slice aliases the stacked buffer: no launch
    feed, dims = _feed(model)
    want = ReferenceExecutor(g.nodes, g.outputs).run({k: v.copy() for k, v in feed.items()}, dims)
    got, old = ({k: np.asarray(v).copy() for k, v in _run(plan, feed, dims).items()} for plan in (llir, before))
    _check(name, model, feed, got, want)
    for label in want:
        np.testing.assert_array_equal(got[label], old[label], err_msg=f"{name} {label}")
    # the pair for one cache, that cache's own one-block write for the other: the pair writes it
    # again (same rows, same values), on the fake device and on the reference executor alike
    given = {label: feed[label].copy() for label in model.cache_shapes}
    for only in (0, 1):
        mixed = view.extract(view.repair(_switch(view, genome, ("KernelAliasAfter",), "KernelScatterFused", only)))
        ops = mixed.op_counts()
        assert ops["KernelScatterPair"] == ops["KernelAliasAfter"] == ops["KernelScatterFused"] == 1, ops
        assert launches(mixed).total() == launches(llir).total() + 1
        for res in (_run(mixed, feed, dims), ReferenceExecutor(mixed.nodes, mixed.outputs).run(dict(feed), dims)):
            for label in want:
                np.testing.assert_array_equal(np.asarray(res[label]), got[label], err_msg=f"{name} {only} {label}")
    for label, arr in given.items():  # the executors wrote their own copies, never the caller's arrays
        np.testing.assert_array_equal(feed[label], arr, err_msg=label)


def test_gemma_decode_plan_recomputes_every_other_residual_sum():
    """Gemma's residual stream h + norm(o) (post-attention and post-feedforward norms): the gated
    GEMV of each layer computes its x from h and o (gemv-x-resnorm: KernelLoad 0 and 1), so only
    the layer's output sum is stored; the 2-layer plan (reference semantics of every kernel, on
    the CPU: cuBLASLt calls included) agrees with the HLIR."""
    model = step("gemma3", 2, small=True)
    g = model.graph
    llir = _preferred(g, None, BOUNDS)
    gated = [n.op for n in llir.nodes if type(n.op).__name__ == "KernelGemvFused" and n.op.m == 2 and n.op.epi]
    assert len(gated) == 2 and all(op.base == op.m + 2 for op in gated), gated  # x from the two loads
    fused = [n.op for n in llir.nodes if type(n.op).__name__ == "KernelFused"]
    sums = [op for op in fused if type(op.root).__name__ == "KernelAdd"]
    assert len(sums) == 2, sums  # one stored residual sum per layer (the layer's output)
    feed, dims = _feed(model)
    want = ReferenceExecutor(g.nodes, g.outputs).run({k: v.copy() for k, v in feed.items()}, dims)
    got = ReferenceExecutor(llir.nodes, llir.outputs).run({k: v.copy() for k, v in feed.items()}, dims)
    # the logits to docs/numerics.md's row-scaled bf16 tolerance (3e-2 of the row's max |logit|:
    # Gemma's logits reach ~14 here, so an elementwise bf16 bound is tighter than the models' own);
    # the caches like the other models' plans
    a, b = (np.asarray(x["logits"], np.float64).reshape(-1) for x in (got, want))
    assert np.abs(a - b).max() <= 3e-2 * np.abs(b).max(), (np.abs(a - b).max(), np.abs(b).max())
    _check("gemma3", model, feed, got, {k: v for k, v in want.items() if k != "logits"})
    assert llir.op_counts()["KernelScatterPair"] == 2  # (its CUDA C on the CPU: test_inplace.py)


def test_every_sampled_decode_extraction_agrees_with_the_reference():
    """Random extractions of the decode step (each class's choice at random: fused scatters and
    gathers with their bodies computed or read, slices read inline or copied) against the HLIR."""
    model = step("qwen3", 1, small=True)
    g = model.graph
    view = build_egraph(g, CpuCudaBackend(), BOUNDS)
    feed, dims = _feed(model)
    want = ReferenceExecutor(g.nodes, g.outputs).run({k: v.copy() for k, v in feed.items()}, dims)
    seen = Counter()
    for llir in sample_genomes(view, 6, seed=11):
        seen.update(llir.op_counts())
        got = ReferenceExecutor(llir.nodes, llir.outputs).run({k: v.copy() for k, v in feed.items()}, dims)
        _check("qwen3 sampled", model, feed, got, want)
    assert {"KernelScatterFused", "KernelScatterInplace", "KernelGatherFused", "KernelScatterPair"} <= set(seen), seen


def _run(llir, feed: dict, dims: dict) -> dict:
    ex = runtime.CudaExecutor(llir.nodes)
    fake_driver.bind(ex)
    return ex.run({k: v.copy() for k, v in feed.items()}, dims)


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_decode_step_on_the_gpu(name):
    """The preferred decode plan on the device: its launches, and its values against the HLIR."""
    from luminal.backends.cuda.backend import CudaBackend

    model = step(name, 1, small=True)
    backend = CudaBackend()
    llir = _preferred(model.graph, backend, BOUNDS)
    ex = backend.load(llir)
    assert ex.stats["launches"] <= BEYOND[name] + PER_LAYER[name], ex.stats  # 12 on the CPU count (test above)
    feed, dims = _feed(model)
    want = ReferenceExecutor(model.graph.nodes, model.graph.outputs).run({k: v.copy() for k, v in feed.items()}, dims)
    got = ex.run({k: v.copy() for k, v in feed.items()}, dims)
    _check(name, model, feed, {k: np.asarray(v).copy() for k, v in got.items()}, want)


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_engine_buckets_keep_the_decode_plan(name, fake):
    """The decode plan compiled beside the prefill bucket (the engine's two buckets, one shared
    saturation) launches what it launches compiled alone: the one-block cache writes. The shared
    phases once ran buffer_reuse before the bucket's facts, so its grid-wide write (chosen where the
    index count is unbounded) stayed in the decode e-graph and the search took it: 4 extra launches a
    layer on the H200 (session 7)."""
    from luminal.egraph.compile import CompileOptions, compile_plans
    from luminal.models.engine import step_buckets

    g = step(name, 1, small=True).graph
    buckets = [{d: b for d, b in plan.items() if d in g.dims()} for plan in step_buckets(CAP)]
    opts = CompileOptions.from_kwargs({"cache": False, "buckets": buckets})
    _, plans, stats = compile_plans(g, CpuCudaBackend(), opts)
    alone = _preferred(g, None, buckets[0])
    assert launches(plans[0]) == launches(alone), (launches(plans[0]), launches(alone))
    ops = plans[0].op_counts()  # the layer's one-block pair; the prefill bucket's grid-wide writes, no pair
    assert ops["KernelScatterPair"] == 1 and "KernelScatterFused" not in ops, ops
    writes = [n.op for n in plans[1].nodes if type(n.op).__name__ == "KernelScatterFused"]
    assert len(writes) == 2 and all(w.wide for w in writes), plans[1].op_counts()
    assert "KernelScatterPair" not in plans[1].op_counts()


def test_every_decode_op_is_priceable_alone(fake):
    """The search prices an op by running it alone (costs.one_op_plan), its inputs sized by the views
    that read them (backend.input_extents). KernelAliasAfter reads nothing: with no view its cache
    input had 0 bytes, the one-op plan failed, and on the H200 every plan holding the k/v pair was
    unpriceable -- the search took plain three-launch writes beside the pair (10 launches a layer)."""
    from luminal.backends.cuda.backend import input_extents
    from luminal.egraph.costs import one_op_plan

    llir = _preferred(step("llama", 1, small=True).graph, None, BOUNDS)
    env = {"s": 1, "r": 1, "p": P}
    aliases = [i for i, n in enumerate(llir.nodes) if type(n.op).__name__ == "KernelAliasAfter"]
    assert len(aliases) == 2, llir.op_counts()
    for i in aliases:
        plan = one_op_plan(llir, i)
        want = int(np.prod([int(d.evaluate(env)) for d in llir.nodes[i].op.shape]))
        assert input_extents(plan.nodes, env)["in0"] == want, (llir.nodes[i].op, input_extents(plan.nodes, env))
