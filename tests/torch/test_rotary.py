"""luminal/torch/ops/rotary.py: Hugging Face's 16-bit rotary (`q * cos + rotate_half(q) * sin`)
translated in nn.rope's f32 form, and the CUDA backend's `paged-rope` rule (attention.egg) that
rotates q as KernelPagedAttentionRope loads it (one launch a layer less in an HF decode step:
tests/torch/test_bench_decode.py counts them). Values against eager within the 16-bit tolerance;
every sampled extraction of a bf16 HF decode step (fused or not) against the raw-HLIR oracle."""

from __future__ import annotations

import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from luminal.dtype import DType  # noqa: E402
from luminal.torch.translate import translate  # noqa: E402
from tests.torch.test_cache_attention import _decode_translation, floats_specialized  # noqa: E402, F401
from tests.torch.util import assert_close, compile_fn, trace  # noqa: E402


def _rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]), dim=-1)


def _apply(q, cos32, sin32):  # transformers' apply_rotary_pos_emb, tables cast to q's dtype
    cos, sin = cos32.to(q.dtype).unsqueeze(1), sin32.to(q.dtype).unsqueeze(1)
    return (q * cos) + (_rotate_half(q) * sin)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_hf_rotary_matches_eager(dtype):
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, 3, 16, generator=gen).to(dtype)
    ang = torch.rand(1, 3, 16, generator=gen) * 6
    args = (q, ang.cos(), ang.sin())
    got = compile_fn(_apply, args)(*args)[0]
    assert_close(got, _apply(*args), f"rotary {dtype}")
    g = translate(trace(_apply, args)).graph
    last = g.nodes[g.nodes[g.outputs["out0"]].inputs[0]]
    # 16-bit: nn.rope's form, an f32 sum rounded once (a Cast of an f32 Add); f32: HF's own ops
    sums = [g.nodes[i] for i in (last.inputs if type(last.op).__name__ == "Cast" else ())]
    assert [(type(n.op).__name__, n.dtype) for n in sums] == ([("Add", DType.f32)] if dtype != torch.float32 else [])


def test_every_sampled_extraction_of_the_bf16_hf_decode_step_agrees(floats_specialized):  # noqa: F811
    """A bf16 HF decode step: the preferred plan rotates q inside the paged attention; it and random
    extractions equal the raw-HLIR oracle on the same feed."""
    from luminal.egraph.compile import build_egraph, preference
    from tests.backends.cuda.test_lowering import CpuCudaBackend
    from tests.egraph.util import oracle
    from tests.helpers import assert_matches

    tr = _decode_translation(1, torch.bfloat16)
    env = {d: lo for d, (lo, hi) in tr.ranges.items()}
    rng = np.random.default_rng(3)
    feed = {}
    for s in tr.inputs:
        if s.kind != "tensor":
            continue
        shape = tuple(int(e.evaluate(env)) for e in s.shape)
        if s.dtype.is_floating_point:
            dt = np.float32 if s.dtype == torch.float32 else DType.bf16.np
            feed[s.name] = rng.uniform(-0.5, 0.5, shape).astype(dt)
        else:  # the token and the position counter
            feed[s.name] = np.full(shape, 7, np.int64) if not shape else rng.integers(0, 96, shape)
    g = tr.graph
    want = oracle(g, feed, env)
    view = build_egraph(g, CpuCudaBackend(), {d: r for d, r in tr.ranges.items() if d in g.dims()})
    seen, fused = set(), 0
    pick = random.Random(4)
    for gen in [view.preferred_genome(preference(CpuCudaBackend()))] + [view.random_genome(pick) for _ in range(6)]:
        llir = view.extract(view.repair(gen))
        if llir.fingerprint() in seen:
            continue
        seen.add(llir.fingerprint())
        fused += any(type(n.op).__name__ == "KernelPagedAttentionRope" for n in llir.nodes)
        got = CpuCudaBackend().load(llir).run(feed, env)
        for name, arr in want.items():
            a = np.asarray(got[name]).reshape(arr.shape)
            dt = {np.dtype(np.float32): DType.f32, np.dtype(np.int64): DType.i64, DType.bf16.np: DType.bf16}[arr.dtype]
            assert_matches(a, arr, dt, 2.0, f"{name} {llir.op_counts()}")
    assert fused >= 1 and len(seen) > fused, (fused, len(seen))
