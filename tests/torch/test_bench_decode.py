"""The HF decode step at bench/torch_frontend.py's settings (issue 14), on the CPU: bf16, llama-3.2-1b's
attention shapes (32 query / 8 kv heads, head_dim 64, llama3 RoPE, tied embeddings, eps 1e-5), a
StaticCache of prompt + new + 8 = 104 slots, `dynamic=True` (the bench's --dynamic: the harder
case, one capacity symbol per layer), floats specialized, the CUDA runtime
over the fake driver; a few layers and a small vocab.

The decode graph's dims are the cache capacity (specialized to 104 by cache_attention.py) and the
decode row `luminal_query_rows` (fixed to 1). The Program compiles that graph with those values as
its bucket: before, the compiler saw them unbounded, so the search priced every candidate at its
default size for a free dim (64 rows against a 64-slot cache: a prefill) and the H200 picked that
shape's plan for the one-row step (320 launches per step against the zoo's 197, session 6). The CPU
cost model (elements written) prefers the fused plan at either size, so here the launch count alone
did not show it: the test checks the dims every candidate was priced at."""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from luminal.torch.ops.cache_attention import QUERY_ROWS  # noqa: E402
from tests.models.test_engine import FakeCuda, fake_cuda  # noqa: E402, F401  (fixture)
from tests.torch.test_cache_attention import PER_LAYER, floats_specialized  # noqa: E402, F401  (fixture)
from tests.torch.test_device import device_fake  # noqa: E402, F401  (fixture)
from tests.torch.test_hf import _model  # noqa: E402
from tests.torch.util import assert_close, decode_program, expected_step_bytes, state_in_place  # noqa: E402

PROMPT, NEW = 32, 64
CAP = PROMPT + NEW + 8  # bench/torch_frontend.py's cache_len
ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}  # fmt: skip
BENCH = dict(vocab_size=96, hidden_size=128, intermediate_size=64, num_attention_heads=32, num_key_value_heads=8,
             head_dim=64, max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=True,
             rope_parameters=ROPE)  # fmt: skip


def _decode_run(programs, monkeypatch, layers: int, steps: int = 2):
    """Prefill PROMPT tokens and decode `steps` through torch.compile on the fake device, as the
    bench does; (the decode Program, the dims every searched candidate was priced at, logits, eager's)."""
    envs: list[dict] = []
    profile = FakeCuda.profile
    monkeypatch.setattr(FakeCuda, "profile", lambda self, llir, env: envs.append(dict(env)) or profile(self, llir, env))
    torch._dynamo.reset()
    del programs[:]
    cfg = transformers.LlamaConfig(**{**BENCH, "num_hidden_layers": layers})
    m = _model(lambda: transformers.LlamaForCausalLM(cfg)).to(torch.bfloat16)
    fast = torch.compile(m, backend="luminal", dynamic=True, options={"backend": "cuda-fake"})
    ids = torch.randint(0, BENCH["vocab_size"], (1, PROMPT), generator=torch.Generator().manual_seed(21))
    out = []
    with torch.no_grad():
        for model in (fast, m):
            cache = transformers.StaticCache(config=m.config, max_cache_len=CAP)
            r = model(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=torch.arange(PROMPT))
            logits = []
            for pos in range(PROMPT, PROMPT + steps):
                tok = r.logits[:, -1:].argmax(-1)
                r = model(input_ids=tok, past_key_values=cache, use_cache=True, cache_position=torch.tensor([pos]))
                logits.append(r.logits)
            out.append(logits)
    dec = decode_program(programs)
    decode_envs = [e for e in envs if QUERY_ROWS in e]
    torch._dynamo.reset()
    return dec, decode_envs, out[0], out[1]


def _launches(dec) -> Counter:
    plan, ex = dec.model.plans[0], dec.model._plans[0][1]
    return Counter(type(plan.nodes[s.node].op).__name__ for s in ex.steps)


def test_decode_plan_at_the_bench_settings(device_fake, floats_specialized, monkeypatch):  # noqa: F811
    _, programs = device_fake
    dec2, envs, got, want = _decode_run(programs, monkeypatch, 3)
    dec3, _, _, _ = _decode_run(programs, monkeypatch, 4)
    # the search priced the decode candidates at the decode's own dims: one row, the 104-slot cache
    fixed = {d: lo for d, (lo, hi) in dec2.ranges.items() if lo == hi}
    assert fixed[QUERY_ROWS] == 1 and set(fixed.values()) == {1, CAP}, fixed
    assert envs, "the decode graph's candidates were priced"
    for env in envs:
        assert {d: env[d] for d in fixed if d in env} == {d: v for d, v in fixed.items() if d in env}, env
    # the capacity dims are numbers in the graph (translate.py), so the plan's one bucket is the decode row
    assert [b["bounds"] for b in dec2.model.stats["buckets"]] == [{QUERY_ROWS: (1, 1)}]
    assert not {d for d, v in fixed.items() if v == CAP} & dec2.model._dims
    # the layers are rolled: one body compiled once, for every layer but the first (whose position
    # counter HF reads before the layers, for the mask: it is not like the others)
    for dec, layers in ((dec2, 3), (dec3, 4)):
        bodies = dec.model.stats["rolled"]["bodies"]
        assert [b["layers"] for b in bodies] == [layers - 1] and bodies[0]["nodes"] > 100, bodies
    # launches per layer (4-layer plan minus 3-layer plan) as close to the zoo's as at the tiny test
    # model's settings, the attention fused
    c2, c3 = _launches(dec2), _launches(dec3)
    per = c3 - c2
    print(f"\nHF llama decode, bench settings: 3 layers {c2.total()} launches, per layer {per.total()} {dict(per)}")
    # the zoo's 6 (tests/backends/cuda/test_launches.py) and the layer's StaticCache position counter:
    # one launch step of the paged attention a layer (its prefill path's grid is a literal 0 at one
    # query row: no launch; before, 2 steps), q rotated as it loads q (HF's bf16 rotary translated in
    # nn.rope's form, luminal/torch/ops/rotary.py: before, a kernel of its own), and the k and v rows
    # written by one KernelScatterPair (inplace.egg scatter-pair; the zoo's 6 since)
    assert per.total() == PER_LAYER - 2 == 7 and per["KernelScatterPair"] == 1, dict(per)
    assert per["KernelPagedAttentionRope"] == 1 and per["KernelFused"] == 1 and "KernelScatter" not in per, dict(per)
    # outside the layers (the zoo's 5: embedding gather, rows gather, lm_head GEMV, cos / sin tables):
    # the embedding gather, lm_head, the f32 cos / sin tables, the page table's slots (one Iota: before,
    # an Iota and a Gather), the query positions cast to i32
    # (+ 6: the first layer is compiled in the outer region, which computes its own casts of the rope
    # tables and cache positions next to the ones the rolled layers share: egraph/unroll.py)
    assert c2.total() - 3 * per.total() == 6 + 6, dict(c2)
    # the KV caches are written in place; per step on the device: the token, the logits and the
    # layers' 0-d position counters, no cache bytes
    caches = {s.name for s in dec2.inputs if s.state and len(s.shape) == 4}
    assert len(caches) == 6 and caches <= state_in_place(dec2)
    rt = dec2.model.stats["runtime"]
    want_bytes = expected_step_bytes(dec2)
    assert {k: rt[k] for k in want_bytes} == want_bytes
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_close(g, w, f"decode step {k}", scale=4.0)
