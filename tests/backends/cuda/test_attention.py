"""The attention rules (kernels/attention.egg): KernelAttention is in the preferred plan of every zoo
attention (llama GQA, qwen3 q/k norm, gemma sliding window and query_pre_attn_scalar, whisper
encoder, decoder self- and cross-attention) with the fields the block means; near misses keep the
unfused plan; the fused plan and every sampled extraction of an attention block equal the raw-HLIR
oracle (CPU, by reference semantics). GPU (`cuda`): numerics of the compiled op against the
reference backend and f64 numpy over odd sizes, masks and dtypes; sampled extractions agree."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import numpy as np
import pytest

import luminal as lm
from luminal import nn
from luminal.backends.cuda.kernels.attention import KernelAttention
from luminal.egraph.compile import CompileOptions, build_egraph, compile_plans, preference
from luminal.models import gemma, llama, qwen, whisper
from luminal.shape.expr import dim
from tests.backends.cuda.test_lowering import CpuCudaBackend
from tests.egraph.util import oracle
from tests.helpers import assert_matches


def _preferred(g: lm.Graph):
    _, (llir,), _ = compile_plans(g, CpuCudaBackend(), CompileOptions(cache=False, search_budget=1))
    return llir


def _fused(llir) -> list[KernelAttention]:
    return [n.op for n in llir.nodes if isinstance(n.op, KernelAttention)]


def _feed(g: lm.Graph, env: dict, seed: int, scale: float = 0.5) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in g.input_shapes.items():
        dt = g.nodes[g.inputs[name]].dtype
        sh = tuple(int(d.evaluate(env)) for d in shape)
        if dt.is_float:
            out[name] = (rng.standard_normal(sh) * scale).astype(dt.np)
        else:
            out[name] = rng.integers(0, 16, sh).astype(dt.np)
    return out


# -- the zoo: small configs of every model -----------------------------------------------------------
LLAMA = llama.Config(vocab_size=64, dim=128, n_layers=1, n_heads=4, n_kv_heads=2, hidden=96, head_dim=64)
QWEN3 = replace(qwen.CONFIGS["qwen3-0.6b"], vocab_size=64, dim=128, n_layers=1, n_heads=4, n_kv_heads=2,
                hidden=96, head_dim=64)  # fmt: skip
GEMMA = gemma.Config(vocab_size=64, dim=128, n_layers=2, n_heads=4, n_kv_heads=1, hidden=96, head_dim=64,
                     query_pre_attn_scalar=48, sliding_window=5,
                     layer_types=("sliding_attention", "full_attention"))  # fmt: skip
WHISPER = whisper.Config(vocab_size=64, n_mels=8, dim=128, enc_layers=1, dec_layers=1, heads=2, ffn=96, audio_ctx=12,
                         text_ctx=16)  # fmt: skip


def test_fused_attention_in_llama_and_qwen3():
    for cfg in (LLAMA, QWEN3):
        ops = _fused(_preferred(llama.Transformer(cfg, 32).graph))
        assert len(ops) == 1, cfg
        (op,) = ops
        assert (op.n_kv.value, op.groups.value, op.head_dim.value) == (2, 2, 64)
        assert op.causal and op.window == 0 and op.past == dim("p") and op.scale == pytest.approx(64**-0.5)


def test_fused_attention_in_gemma_sliding_and_full_layers():
    ops = _fused(_preferred(gemma.Transformer(GEMMA, 32).graph))
    assert sorted(op.window for op in ops) == [0, 5], ops
    assert all(op.groups.value == 4 and op.scale == pytest.approx(48**-0.5) for op in ops)


def test_fused_attention_in_whisper_encoder_and_decoder():
    enc = _fused(_preferred(whisper.encoder_graph(WHISPER)))
    assert len(enc) == 1 and not enc[0].causal and enc[0].t.value == 12
    dec = _fused(_preferred(whisper.decoder_graph(WHISPER)))
    assert sorted(op.causal for op in dec) == [False, True], dec  # cross- and self-attention


@dataclass(frozen=True)
class _Cache(nn.KVCache):
    """A KV cache of any dtype (nn.KVCache's is the model dtype; this keeps the tests independent of it)."""

    dt: object = lm.f32

    def state(self, g):
        shape = (self.n_kv, self.capacity, self.head_dim)
        return tuple(g.tensor(f"{self.name}.{kv}", shape, self.dt).persist() for kv in "kv")


def _block(dt=lm.f32, window=None, hd=64, cap=24, cache=True, groups=2, n_kv=2, rope=False) -> lm.Graph:
    """The attention of nn.Attention on q/k/v inputs: cache update, causal mask, GQA, attend; `rope`:
    q rotated first (nn.RoPE, as the models do)."""
    g = lm.Graph()
    s, p = dim("s"), dim("p")
    if rope:  # q projected (a matmul's output, as llama's q), then rotated
        w = g.tensor("wq", (32, n_kv * groups * hd), dt)
        q = (g.tensor("xq", ("s", 32), dt) @ w).reshape(s, n_kv * groups, hd)
        q = nn.RoPE(g, "rope", hd, p if cache else lm.shape.expr.ZERO, s)(q)
    else:
        q = g.tensor("q", ("s", n_kv * groups, hd), dt)
    k, v = (g.tensor(n, ("s", n_kv, hd), dt).permute(1, 0, 2) for n in "kv")  # (n_kv, s, hd)
    past = p if cache else lm.shape.expr.ZERO
    if cache:
        k, v = _Cache("cache.0", n_kv, cap, hd, dt=dt).update(g, k, v, p)
    q = q.reshape(s, n_kv, groups, hd).permute(1, 2, 0, 3)  # (n_kv, groups, s, hd)
    mask = nn.causal_mask(g, s, past, k.shape[1], window)
    nn.attend(q, k, v, mask, hd**-0.5).output("y")
    return g


@pytest.mark.parametrize(
    "kw",
    [dict(hd=48), dict(dt=lm.f64), dict(hd=64, groups=1, cache=False)],
    ids=["head-dim-48", "f64", "no-cache-control"],
)
def test_near_misses_keep_the_unfused_plan(kw):
    llir = _preferred(_block(**kw))
    want = 1 if kw.get("hd") == 64 else 0  # the last case is a control: it does fuse
    assert len(_fused(llir)) == want, llir.op_counts()


@pytest.mark.parametrize("window", [None, 3])
def test_fused_plan_equals_the_oracle(window):
    g = _block(window=window)
    llir = _preferred(g)
    assert len(_fused(llir)) == 1
    for s, p in ((5, 0), (1, 7), (3, 20)):  # prefill, decode, and a context clamped at the capacity
        env = {"s": s, "p": p}
        feed = _feed(g, env, seed=s + p)
        got = CpuCudaBackend().load(llir).run(feed, env)
        want = oracle(g, feed, env)
        for name, arr in want.items():
            assert_matches(np.asarray(got[name]).reshape(arr.shape), arr, lm.f32, 1.0, f"{name} s={s} p={p}")


def _sampled_plans_agree(g, env, feed_seed: int, rng_seed: int, dt, ulps: float) -> list:
    """The preferred extraction and 14 random ones of g, each distinct plan run on the fake device
    against the oracle; returns the distinct plans."""
    view = build_egraph(g, CpuCudaBackend())
    feed = _feed(g, env, seed=feed_seed)
    want = oracle(g, feed, env)["y"]
    rng = random.Random(rng_seed)
    plans: dict[str, object] = {}
    gens = [view.preferred_genome(preference(CpuCudaBackend()))] + [view.random_genome(rng) for _ in range(14)]
    for gen in gens:
        llir = view.extract(view.repair(gen))
        if llir.fingerprint() in plans:
            continue
        plans[llir.fingerprint()] = llir
        got = CpuCudaBackend().load(llir).run(feed, env)["y"]
        assert_matches(np.asarray(got).reshape(want.shape), want, dt, ulps, str(llir.op_counts()))
    return list(plans.values())


def test_every_sampled_extraction_agrees():
    plans = _sampled_plans_agree(_block(window=4), {"s": 4, "p": 3}, 9, 0, lm.f32, 1.0)
    fused = sum(bool(_fused(llir)) for llir in plans)
    assert fused >= 1 and len(plans) - fused >= 1, (fused, len(plans))  # both plans were sampled


def test_q_rotary_loads_inside_attention():
    """attn-rope: a bf16 q rotated by nn.RoPE is loaded rotated by KernelAttentionRope (no launch of
    its own); the plan equals the oracle, prefill and decode. llama's too; not qwen3's (normed first)."""
    g = _block(dt=lm.bf16, rope=True)
    llir = _preferred(g)
    assert [type(op).__name__ for op in _fused(llir)] == ["KernelAttentionRope"], llir.op_counts()
    for s, p in ((5, 0), (1, 7), (3, 20)):
        env = {"s": s, "p": p}
        feed = _feed(g, env, seed=s + p)
        got, want = CpuCudaBackend().load(llir).run(feed, env), oracle(g, feed, env)
        assert_matches(np.asarray(got["y"]).reshape(want["y"].shape), want["y"], lm.bf16, 2.0, f"s={s} p={p}")
    for cfg, want in ((LLAMA, "KernelAttentionRope"), (QWEN3, "KernelAttention")):  # qwen3: its q-norm rotates
        assert [type(op).__name__ for op in _fused(_preferred(llama.Transformer(cfg, 32, "bf16").graph))] == [want]


def test_every_sampled_extraction_of_a_rotated_q_agrees():
    plans = _sampled_plans_agree(_block(dt=lm.bf16, rope=True, window=4), {"s": 3, "p": 6}, 4, 3, lm.bf16, 2.0)
    kinds = set().union(*({type(op).__name__ for op in _fused(llir)} or {"unfused"} for llir in plans))
    assert "KernelAttentionRope" in kinds and len(kinds) >= 2, kinds


# -- GPU -------------------------------------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize(
    "dt,window,rope",
    [(lm.f32, None, False), (lm.f16, 5, False), (lm.bf16, None, False), (lm.bf16, 7, True), (lm.f16, None, True)],
    ids=["f32", "f16-window", "bf16", "bf16-window-rope", "f16-rope"],
)
def test_attention_block_on_the_gpu(dt, window, rope):
    """The compiled block (fused; `rope`: q rotated in attention's load) against the reference backend,
    prefill and decode, odd sizes."""
    g = _block(dt=dt, window=window, hd=128, cap=4200, rope=rope)
    m, ref = g.compile("cuda", cache=False), g.compile("reference", cache=False)
    kinds = [type(op).__name__ for op in _fused(m.plans[0])]
    assert kinds == ["KernelAttentionRope" if rope else "KernelAttention"], m.plans[0].op_counts()
    for s, p in ((127, 0), (3, 17), (1, 4096), (17, 50), (1, 0)):
        feed = _feed(g, {"s": s, "p": p}, seed=s + p, scale=0.3)
        got, want = m.run(feed, dims={"p": p}), ref.run(feed, dims={"p": p})
        assert_matches(got["y"], want["y"], dt, 2.0, f"y s={s} p={p}")


@pytest.mark.cuda
def test_decode_steps_replay_the_graph_with_self_resetting_tickets():
    """Decode steps replayed from one CUDA graph: the split decode kernel's tickets must be back at
    zero after every step (else a later step merges early or never), so every step equals the reference."""
    g = _block(dt=lm.bf16, hd=128, cap=4200)
    m, ref = g.compile("cuda", cache=False), g.compile("reference", cache=False)
    for k, p in enumerate((4000, 4000, 2100, 4000, 300, 300, 4000)):
        feed = _feed(g, {"s": 1, "p": p}, seed=k, scale=0.3)
        got, want = m.run(feed, dims={"p": p}), ref.run(feed, dims={"p": p})
        assert_matches(got["y"], want["y"], lm.bf16, 2.0, f"y step {k} p={p}")


@pytest.mark.cuda
def test_every_sampled_extraction_agrees_on_the_gpu():
    from luminal.backends.cuda.backend import CudaBackend

    g = _block(dt=lm.bf16, window=4, hd=64)
    backend = CudaBackend()
    view = build_egraph(g, backend)
    env = {"s": 9, "p": 5}
    feed = _feed(g, env, seed=3, scale=0.3)
    want = oracle(g, feed, env)["y"]
    rng = random.Random(1)
    seen = set()
    for gen in [view.preferred_genome(preference(backend))] + [view.random_genome(rng) for _ in range(10)]:
        llir = view.extract(view.repair(gen))
        if llir.fingerprint() in seen:
            continue
        seen.add(llir.fingerprint())
        got = backend.load(llir).run(feed, env)["y"]
        assert_matches(got.reshape(want.shape), want, lm.bf16, 2.0, str(llir.op_counts()))


@pytest.mark.cuda
def test_paged_batched_decode_on_the_gpu():
    """B = 1..8 sequences of different lengths in one step, cuda against the reference backend."""
    from luminal.nn.attention import PagedKV

    g = lm.Graph()
    x = g.tensor("x", ("s", 96))
    nn.Attention(g, "a", 96, 4, 2, 64, nn.KVCache("cache.0", 2, 128, 64, paged=True))(
        x, None, paged=PagedKV.inputs(g)
    ).output("y")
    m, ref = g.compile("cuda", cache=False), g.compile("reference", cache=False)
    rng = np.random.default_rng(0)
    for b in range(1, 9):
        lens = rng.integers(1, 14, b)
        table = np.zeros((b, lens.max()), np.int32)
        table[np.arange(lens.max()) < lens[:, None]] = rng.permutation(128)[: lens.sum()]
        env = {"s": b, "b": b, "pages": int(lens.max())}
        feed = _feed(g, env, seed=b)
        feed |= {"kv.table": table, "kv.seq": np.arange(b, dtype=np.int32), "kv.pos": (lens - 1).astype(np.int32)}
        got, want = m.run(feed), ref.run(feed)
        for name in ("y", "cache.0.k", "cache.0.v"):
            # the absolute tolerance on the output's scale, the relative one unchanged (both sides
            # divided by it): y's entries reach ~50 (random weights), so one near 0 carries the
            # rounding of its ~50-sized terms (7e-6 at -0.18 on the H100, session 10)
            scale = max(1.0, float(np.abs(want[name]).max()) / 10)
            assert_matches(got[name] / np.float32(scale), want[name] / scale, lm.f32, 1.0, f"{name} B={b}")
