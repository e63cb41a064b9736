"""KernelAttentionNormRope (kernels/attention_norm.py, rule attn-qnorm): qwen3's / gemma 3's per-head
q RMSNorm and rotary computed in the decode attention kernel's q staging. The rule fires in the
decode bucket (s <= DECODE_ROWS) of both models and not in the prefill bucket; the fused decode plan
and every sampled extraction equal the HLIR oracle; on the CPU (g++ emulation) the kernel equals the
numpy reference for bf16 / f16 / f32 at head_dim 64 / 128 / 256, and the reference is the unfused
chain; NVRTC compiles it for sm_90 without spills."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import replace

import numpy as np
import pytest

import luminal as lm
from luminal import nn
from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.kernel import source
from luminal.backends.cuda.kernels.attention import KernelAttention
from luminal.backends.cuda.kernels.attention_decode import DecodeVariant
from luminal.backends.cuda.kernels.attention_decode_tc import register_budget
from luminal.backends.cuda.kernels.attention_norm import KernelAttentionNormRope
from luminal.dtype import DType
from luminal.egraph.compile import build_egraph, preference
from luminal.errors import BackendError
from luminal.models import gemma, llama
from luminal.shape.expr import dim, num, z
from tests.backends.cuda.test_attention import GEMMA, QWEN3, _Cache, _feed
from tests.backends.cuda.test_attention_kernels import SLOTS, make_rope_op, needs_gxx, rope_inputs
from tests.backends.cuda.test_lowering import CpuCudaBackend
from tests.egraph.util import oracle
from tests.helpers import assert_matches

DECODE = {"s": (1, 1)}


def _plan(g: lm.Graph, bounds=None, rng=None):
    view = build_egraph(g, CpuCudaBackend(), bounds)
    gen = view.preferred_genome(preference(CpuCudaBackend())) if rng is None else view.random_genome(rng)
    return view, view.extract(view.repair(gen))


def _kinds(llir) -> list[str]:
    return [type(n.op).__name__ for n in llir.nodes if isinstance(n.op, KernelAttention)]


def _block(dt=lm.bf16, hd=64, offset=False, cap=24) -> lm.Graph:
    """A projected q (s, heads, hd) RMS-normed per head (nn.RMSNorm; gemma's (1 + w) with `offset`),
    rotated (nn.RoPE), attending over a KV cache, as qwen3 / gemma 3 do."""
    g = lm.Graph()
    s, p, n_kv, groups = dim("s"), dim("p"), 2, 2
    w = g.tensor("wq", (32, n_kv * groups * hd), dt)
    q = (g.tensor("xq", ("s", 32), dt) @ w).reshape(s, n_kv * groups, hd)
    q = nn.RMSNorm(g, "qn", hd, 1e-6, offset, dtype=dt)(q)
    q = nn.RoPE(g, "rope", hd, p, s)(q)
    k, v = (g.tensor(n, ("s", n_kv, hd), dt).permute(1, 0, 2) for n in "kv")
    k, v = _Cache("cache.0", n_kv, cap, hd, dt=dt).update(g, k, v, p)
    q = q.reshape(s, n_kv, groups, hd).permute(1, 2, 0, 3)
    nn.attend(q, k, v, nn.causal_mask(g, s, p, k.shape[1], None), hd**-0.5).output("y")
    return g


@pytest.mark.parametrize("offset", [False, True], ids=["qwen3-w", "gemma-1+w"])
def test_normed_q_loads_inside_decode_attention(offset):
    """attn-qnorm: in the decode bucket the normed, rotated q is computed by the attention kernel and
    the plan equals the oracle over several contexts; the prefill bucket keeps the unfused q."""
    g = _block(offset=offset)
    _, llir = _plan(g, DECODE)
    assert _kinds(llir) == ["KernelAttentionNormRope"], llir.op_counts()
    (op,) = (n.op for n in llir.nodes if isinstance(n.op, KernelAttentionNormRope))
    assert op.offset == offset and op.count == 64.0 and op.eps == pytest.approx(1e-6)
    for p in (0, 7, 23):
        env = {"s": 1, "p": p}
        feed = _feed(g, env, seed=p + offset)
        got, want = CpuCudaBackend().load(llir).run(feed, env), oracle(g, feed, env)
        assert_matches(np.asarray(got["y"]).reshape(want["y"].shape), want["y"], lm.bf16, 2.0, f"p={p}")
    _, pre = _plan(g, {"s": (1, 64)})
    assert "KernelAttentionNormRope" not in _kinds(pre), pre.op_counts()


def test_every_sampled_extraction_of_a_normed_q_agrees():
    g = _block(offset=True)
    env = {"s": 1, "p": 6}
    view = build_egraph(g, CpuCudaBackend(), DECODE)
    feed = _feed(g, env, seed=4)
    want = oracle(g, feed, env)["y"]
    rng = random.Random(3)
    gens = [view.preferred_genome(preference(CpuCudaBackend()))] + [view.random_genome(rng) for _ in range(14)]
    kinds, seen = set(), set()
    for gen in gens:
        llir = view.extract(view.repair(gen))
        if llir.fingerprint() in seen:
            continue
        seen.add(llir.fingerprint())
        kinds |= set(_kinds(llir)) or {"unfused"}
        got = CpuCudaBackend().load(llir).run(feed, env)["y"]
        assert_matches(np.asarray(got).reshape(want.shape), want, lm.bf16, 2.0, str(llir.op_counts()))
    assert "KernelAttentionNormRope" in kinds and len(kinds) >= 2, kinds


def test_qwen3_and_gemma3_decode_steps_norm_q_in_attention():
    for cfg, mod in ((QWEN3, llama), (GEMMA, gemma)):
        _, llir = _plan(mod.Transformer(cfg, 32, "bf16").graph, DECODE)
        kinds = _kinds(llir)
        assert kinds and set(kinds) == {"KernelAttentionNormRope"}, (cfg, llir.op_counts())


# -- the kernel on the CPU ---------------------------------------------------------------------------------
def make_norm_op(offset=False, eps=1e-6, **kw) -> KernelAttentionNormRope:
    """make_rope_op's attention with x RMS-normed per head first, the weight (hd,) broadcast."""
    rope = make_rope_op(**kw)
    hd = rope.head_dim.value
    fields = [getattr(rope, f.name) for f in dataclasses.fields(rope)]
    return KernelAttentionNormRope(*fields, (num(0), num(0), z), float(np.float32(eps)), float(hd), offset)


def norm_inputs(op: KernelAttentionNormRope, env: dict, seed: int):
    x, k, v, cos, sin = rope_inputs(op, env, seed)
    x = (x.astype(np.float32) * np.random.default_rng(seed).uniform(0.1, 3.0, x.shape)).astype(op.dtype.np)
    w = np.random.default_rng(seed + 1).uniform(-1.5, 1.5, op.head_dim.value).astype(op.dtype.np)
    return x, k, v, cos, sin, w


NORM_CASES = {  # decode with several splits, several query rows, GQA chunks, every head_dim and dtype (sharper
    # softmaxes where scale is given: a wrong q moves the output more)
    "bf16-hd64-s1": (dict(scale=3.0), 1, 300),
    "bf16-hd128-s1-offset": (dict(hd=128, offset=True), 1, 40),
    "bf16-hd256-s1-g4": (dict(hd=256, n_kv=1, groups=4, offset=True), 1, 90),
    "f16-hd128-s2": (dict(dt=DType.f16, hd=128), 2, 90),
    "f16-hd64-s1-window": (dict(dt=DType.f16, window=20, scale=2.0), 1, 60),
    "f16-hd256-s1": (dict(dt=DType.f16, hd=256, n_kv=1, groups=2), 1, 5),
    "f32-hd64-s3": (dict(dt=DType.f32, scale=2.0), 3, 3),
    "f32-hd128-s1-offset": (dict(dt=DType.f32, hd=128, offset=True), 1, 70),
    "f32-hd256-s1": (dict(dt=DType.f32, hd=256, n_kv=1, groups=2), 1, 33),
    "bf16-s12-prefill-path": (dict(), 12, 4),  # s > DECODE_ROWS: the decode kernel, one split a row
}


def test_norm_reference_is_the_unfused_chain():
    """The reference: x normed as nn/norm.py's HLIR (f64 mean, f32 sqrt / reciprocal, rounded to dt),
    then rotated from the normed values: KernelAttentionRope's reference on that normed x."""
    op = make_norm_op(hd=64, dt=DType.bf16, offset=True)
    env = {"s": 2, "p": 5}
    x, k, v, cos, sin, w = norm_inputs(op, env, seed=2)
    xq = x.reshape(2, -1)[:, : 4 * 64].reshape(2, 4, 64).astype(np.float32)
    ms = ((xq * xq).sum(-1, dtype=np.float32).astype(np.float64) / 64.0).astype(np.float32)
    n = (xq / np.sqrt(ms + np.float32(1e-6))[..., None] * (w.astype(np.float32) + 1)).astype(op.dtype.np)
    rope = make_rope_op(hd=64, dt=DType.bf16)
    xr = np.zeros((2, 4 * 64 + 64), op.dtype.np)
    xr[:, : 4 * 64] = n.reshape(2, -1)
    want = rope.reference([xr.reshape(-1), k, v, cos, sin], (op.dtype,) * 3 + (DType.f32,) * 2, env)
    got = op.reference([x, k, v, cos, sin, w], (op.dtype,) * 3 + (DType.f32,) * 2 + (op.dtype,), env)
    assert_matches(got, want, op.dtype, 1.0, "reference")


@needs_gxx
@pytest.mark.parametrize("variant", [DecodeVariant(), DecodeVariant(tc=8, stages=2)], ids=["cuda-core", "tc"])
def test_norm_kernels_compute_attention_on_cpu(variant, tmp_path):
    from tests.backends.cuda.attention_emu import Emulated

    ops = {name: make_norm_op(**kw) for name, (kw, _, _) in NORM_CASES.items()}
    emu = Emulated(list(ops.values()), SLOTS, tmp_path, variant)
    for name, (_, s, p) in NORM_CASES.items():
        op, env = ops[name], {"s": s, "p": p}
        ins = norm_inputs(op, env, seed=len(name))
        want = op.reference(list(ins), (op.dtype,) * 3 + (DType.f32,) * 2 + (op.dtype,), env)
        assert_matches(emu.run(op, *ins, env=env), want, op.dtype, 1.0, name)


def test_spec_refuses_a_partner_outside_the_row():
    op = make_norm_op()
    bad = replace(op, rot=z + 64)  # the next head's element
    with pytest.raises(BackendError, match="partner"):
        bad.render(SLOTS)


def test_norm_kernels_compile_for_sm90_without_spills(no_cache):
    from tests.backends.cuda.test_gemv import ptxas_usage

    shapes = ((64, DType.bf16), (128, DType.f16), (128, DType.bf16), (256, DType.bf16), (256, DType.f32))
    kernels = [make_norm_op(n_kv=8, groups=2, hd=hd, dt=dt, offset=hd == 256).render(SLOTS) for hd, dt in shapes]
    assert nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"
    usage = ptxas_usage(kernels)
    for ln in (ln for k in kernels for ln in k.launches):
        regs, spill = usage[ln.name]
        assert ln.name.startswith("attnn_") and spill == 0 and regs <= register_budget(ln.shared), (ln, regs, spill)


@pytest.mark.parametrize("name", ["qwen3", "gemma3"])
def test_decode_step_plan_equals_the_unfused_q(name, fake):
    """The decode step (gemma 3: sliding and full layers, (1 + w) norms, query_pre_attn_scalar) with q
    normed and rotated in attention, on the fake CUDA device (reference semantics), bit for bit the
    plan with the unfused q (KernelAttention switched back in): logits and caches. (Against the HLIR
    oracle, gemma3's 2-layer step is 1/256 logits off bf16's tolerance in both plans: main's too.)"""
    from tests.backends.cuda.test_launches import BOUNDS, _feed, _run, _switch, step

    model = step(name, 2, small=True)
    view = build_egraph(model.graph, CpuCudaBackend(), BOUNDS)
    gen = view.repair(view.preferred_genome(preference(CpuCudaBackend())))
    fused = view.extract(gen)
    plain = view.extract(view.repair(_switch(view, gen, ("KernelAttentionNormRope",), "KernelAttention")))
    assert _kinds(fused) == ["KernelAttentionNormRope"] * 2 and _kinds(plain) == ["KernelAttention"] * 2
    feed, dims = _feed(model)
    got, want = (_run(llir, feed, dims) for llir in (fused, plain))
    assert set(got) == set(want)
    for label in want:
        np.testing.assert_array_equal(np.asarray(got[label]), np.asarray(want[label]), err_msg=f"{name} {label}")


def test_zoo_decode_ops_compile_for_sm90_without_spills(no_cache):
    """The ops of qwen3-0.6b's and gemma-3-1b's decode steps (real head counts and head_dim, one layer)
    render with the plan's dims slots and compile for sm_90 within 128 registers, without spills."""
    from luminal.backends.cuda.rendered import plan_slots
    from tests.backends.cuda.test_gemv import ptxas_usage
    from tests.backends.cuda.test_launches import BOUNDS, step

    kernels = []
    for name in ("qwen3", "gemma3"):
        _, llir = _plan(step(name, 1).graph, BOUNDS)
        ops = [n.op for n in llir.nodes if isinstance(n.op, KernelAttentionNormRope)]
        assert len(ops) == 1, llir.op_counts()
        kernels.append(ops[0].render(plan_slots(llir.nodes)))
        assert [ln.name.rsplit("_", 1)[1] for ln in kernels[-1].launches] == ["dec"]  # s = 1: the decode kernel only
    assert nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"
    usage = ptxas_usage(kernels)
    for ln in (ln for k in kernels for ln in k.launches):
        regs, spill = usage[ln.name]
        assert spill == 0 and regs <= register_budget(ln.shared), (ln, regs, spill)


# -- GPU -------------------------------------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("hd,offset", [(128, False), (256, True)], ids=["qwen3-hd128", "gemma-hd256-1+w"])
def test_normed_q_decode_block_on_the_gpu(hd, offset):
    """The decode bucket's preferred plan (q normed and rotated in attention) and the searched one, on
    the device, against the reference backend over contexts that use one and several KV splits."""
    from luminal.backends.cuda.backend import CudaBackend

    g = _block(hd=hd, offset=offset, cap=4200)
    backend = CudaBackend()
    view = build_egraph(g, backend, DECODE)
    llir = view.extract(view.repair(view.preferred_genome(preference(backend))))
    assert _kinds(llir) == ["KernelAttentionNormRope"], llir.op_counts()
    m, ref = g.compile("cuda", cache=False, buckets={"s": [(1, 1)]}), g.compile("reference", cache=False)
    ex = backend.load(llir)
    for p in (0, 17, 700, 4100):
        env = {"s": 1, "p": p}
        feed = _feed(g, env, seed=p, scale=0.3)
        want = ref.run(feed, dims={"p": p})["y"]
        for what, got in (
            ("preferred", ex.run({k: v.copy() for k, v in feed.items()}, env)["y"]),
            ("searched", m.run(feed, dims={"p": p})["y"]),
        ):
            assert_matches(np.asarray(got).reshape(want.shape), want, lm.bf16, 2.0, f"{what} p={p}")
