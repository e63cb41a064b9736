"""A Hugging Face StaticCache decode step through the frontend (luminal/torch/ops/cache_attention.py,
the `cat` view in ops/shape.py): SDPA against the whole cache under the position mask becomes
nn.attention's paged graph and the CUDA backend's paged-attention rule fuses it; the plan's launches
per layer, counted by the CUDA runtime over the fake driver, are close to the zoo llama's (9,
tests/backends/cuda/test_launches.py); the fused plan runs on the fake device and matches eager
for several steps with one compile; a cache of another capacity is refused, not miscomputed."""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import luminal.torch as lt  # noqa: E402
from luminal.errors import InputError  # noqa: E402
from luminal.torch import dynamo, program  # noqa: E402
from tests.backends.cuda.test_gemvfused import _preferred  # noqa: E402
from tests.models.test_engine import fake_cuda  # noqa: E402, F401  (fixture)
from tests.torch.test_device import device_fake  # noqa: E402, F401  (fixture)
from tests.torch.test_hf import LM, _close, _decode, _model  # noqa: E402
from tests.torch.util import decode_program, record_programs, state_in_place  # noqa: E402

# head_dim 64: a size the attention kernels take (docs/attention.md)
LM64 = {**LM, "hidden_size": 128, "head_dim": 64}
# launches per layer of the HF decode step: the stacked q/k/v GEMV with the attention norm, q's
# rotary, k's rotary written into the cache, v written into the cache, the paged attention (one
# launch: at one query row the plan keeps only its split-KV decode path, as KernelAttention's),
# o_proj + residual, gate/up with the MLP norm and silu(gate) * up, down + residual, and the layer's
# own position counter (transformers' StaticCache layers each keep one: `+ 1`, state). The zoo's
# llama has 7 (tests/backends/cuda/test_launches.py): its attention rotates q as it loads it, and
# it has no per-layer counter.
PER_LAYER = 9


def _llama(layers: int = 1, dtype=torch.float32):
    cfg = transformers.LlamaConfig(**{**LM64, "num_hidden_layers": layers})
    return _model(lambda: transformers.LlamaForCausalLM(cfg)).to(dtype)


@pytest.fixture
def floats_specialized():
    """As bench/torch_frontend.py runs: floats as guarded constants (docs/torch.md, "Floats")."""
    cfg = torch._dynamo.config
    before, cfg.specialize_float = cfg.specialize_float, True  # (monkeypatch's undo would hide it)
    torch._dynamo.reset()
    yield
    cfg.specialize_float = before
    torch._dynamo.reset()


def _decode_translation(layers: int, dtype=torch.float32):
    """The translated decode graph of a StaticCache decode through torch.compile."""
    got = []
    translate = dynamo.translate

    def record(fx, *a, **k):
        got.append(translate(fx, *a, **k))
        return got[-1]

    m = _llama(layers, dtype)
    dynamo.translate = record
    try:
        torch._dynamo.reset()
        fast = torch.compile(m, backend="luminal", dynamic=True, options={"backend": "reference"})
        with torch.no_grad():
            _decode(fast, m.config, torch.randint(0, LM["vocab_size"], (1, 5)), steps=1)
    finally:
        dynamo.translate = translate
    return got[-1]


def _launches(llir) -> Counter:
    from luminal.backends.cuda import runtime
    from tests.backends.cuda import fake_driver

    ex = runtime.CudaExecutor(llir.nodes)
    fake_driver.bind(ex)
    return Counter(type(llir.nodes[s.node].op).__name__ for s in ex.steps)


def test_hf_decode_plan_launches_per_layer_are_close_to_the_zoo(fake_cuda, floats_specialized):  # noqa: F811
    # compiled as the Program compiles it: at its fixed dims (one query row, the cache capacity)
    trs = [_decode_translation(n) for n in (1, 2)]
    plans = [_preferred(tr.graph, None, {d: r for d, r in tr.ranges.items() if d in tr.graph.dims()}) for tr in trs]
    c1, c2 = (_launches(p) for p in plans)
    per = c2 - c1
    print(f"\nHF llama decode: 1 layer {c1.total()} launches, per layer {per.total()} {dict(per)}")
    assert per.total() <= PER_LAYER, dict(per)
    ops = Counter(type(n.op).__name__ for n in plans[1].nodes)
    assert ops["KernelPagedAttention"] == 2, dict(ops)  # one fused attention per layer
    assert "KernelScatter" not in ops, dict(ops)  # no concat left (RoPE's cat is a view)
    assert ops["KernelGemvFused"] == 9, dict(ops)  # 4 per layer + lm_head: every projection fused


def test_fused_decode_matches_eager_on_the_device_path(device_fake):  # noqa: F811
    """The plan with the paged-attention kernel (its reference semantics on the fake device): logits
    and cache equal eager's for several steps, one decode compile, one CUDA-graph build."""
    _, programs = device_fake
    m = _llama(2)
    fast = torch.compile(m, backend="luminal", dynamic=True, options={"backend": "cuda-fake"})
    ids = torch.randint(0, LM["vocab_size"], (1, 5), generator=torch.Generator().manual_seed(11))
    before = lt.counters["compiles"]
    with torch.no_grad():
        got, got_cache = _decode(fast, m.config, ids, steps=6)
        want, want_cache = _decode(m, m.config, ids, steps=6)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        _close(g, w, f"step {k}")
    for lg, lw in zip(got_cache.layers, want_cache.layers, strict=True):
        _close(lg.keys, lw.keys, "key cache")
        _close(lg.values, lw.values, "value cache")
    assert lt.counters["compiles"] - before == 2  # prefill + decode, nothing per token
    dec = decode_program(programs)
    ops = Counter(type(n.op).__name__ for n in dec.model.plans[0].nodes)
    assert ops["KernelPagedAttention"] == 2, dict(ops)
    assert dec.model.stats["runtime"]["graph_builds"] == 1
    # the StaticCache's index_copy_ is the zoo's cache write: a scatter into the bound cache, in place
    caches = {s.name for s in dec.inputs if s.state and len(s.shape) == 4}
    assert len(caches) == 4 and caches <= state_in_place(dec), (caches, state_in_place(dec))


def test_another_capacity_is_refused(monkeypatch):
    """The pool size is specialized (the rules need a literal): the decode Program called with a
    cache of another capacity is an InputError naming the dim, never a plan reading wrong slots."""
    programs = record_programs(monkeypatch)
    calls = []
    monkeypatch.setattr(program.Program, "__call__", _recording(program.Program.__call__, calls))
    m = _llama(1)
    torch._dynamo.reset()
    fast = torch.compile(m, backend="luminal", dynamic=True, options={"backend": "reference"})
    gen = torch.Generator().manual_seed(12)
    with torch.no_grad():
        ids = torch.randint(0, LM["vocab_size"], (1, 4), generator=gen)
        got, _ = _decode(fast, m.config, ids, steps=2)
        want, _ = _decode(m, m.config, ids, steps=2)
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            _close(g, w, f"step {k}")
    dec = next(p for p in programs if p.ranges)
    assert set(dec.ranges.values()) == {(16, 16), (1, 1)}, dec.ranges  # the pool size and the query rows
    args = next(a for p, a in calls if p is dec)
    other = [
        torch.zeros(*a.shape[:2], 24, a.shape[3], dtype=a.dtype)
        if isinstance(a, torch.Tensor) and s.state and a.ndim == 4
        else 24
        if s.kind == "sym" and int(a) == 16
        else a
        for s, a in zip(dec.inputs, args, strict=True)
    ]
    with pytest.raises(InputError, match="compiled for"):
        dec(*other)
    torch._dynamo.reset()


def _recording(call, calls):
    def wrapped(self, *args):
        calls.append((self, args))
        return call(self, *args)

    return wrapped


def test_every_sampled_extraction_of_the_hf_decode_step_agrees(floats_specialized):
    """The translated decode graph (paged attention and the `cat` views inside): the preferred plan
    and random extractions, fused or not, equal the raw-HLIR oracle on the same feed."""
    import random

    import numpy as np

    from luminal.dtype import DType
    from luminal.egraph.compile import build_egraph, preference
    from tests.backends.cuda.test_lowering import CpuCudaBackend
    from tests.egraph.util import oracle
    from tests.helpers import assert_matches

    tr = _decode_translation(1)
    env = {str(s.expr.args[0]): 16 for s in tr.inputs if s.kind == "sym"}  # the cache capacity
    env |= {d: lo for d, (lo, hi) in tr.ranges.items()}
    rng = np.random.default_rng(3)
    feed = {}
    for s in tr.inputs:
        if s.kind != "tensor":
            continue
        shape = tuple(int(e.evaluate(env)) for e in s.shape)
        if s.dtype.is_floating_point:
            feed[s.name] = rng.uniform(-0.5, 0.5, shape).astype(np.float32)
        else:  # the token (< vocab) and the position counter (< capacity)
            feed[s.name] = np.full(shape, 7, np.int64) if not shape else rng.integers(0, LM["vocab_size"], shape)
    g = tr.graph
    want = oracle(g, feed, env)
    view = build_egraph(g, CpuCudaBackend())
    seen, fused = set(), 0
    pick = random.Random(4)
    for gen in [view.preferred_genome(preference(CpuCudaBackend()))] + [view.random_genome(pick) for _ in range(6)]:
        llir = view.extract(view.repair(gen))
        if llir.fingerprint() in seen:
            continue
        seen.add(llir.fingerprint())
        fused += any(type(n.op).__name__ == "KernelPagedAttention" for n in llir.nodes)
        got = CpuCudaBackend().load(llir).run(feed, env)
        for name, arr in want.items():
            a = np.asarray(got[name]).reshape(arr.shape)
            dt = {np.dtype(np.float32): DType.f32, np.dtype(np.int64): DType.i64}[arr.dtype]
            assert_matches(a, arr, dt, 1.0, f"{name} {llir.op_counts()}")
    assert fused >= 1 and len(seen) > fused, (fused, len(seen))
