"""GPU: the decode engine on the H200 against the reference backend. For Llama / Qwen3 / Gemma 3 presets
cut to 2 layers (real widths and vocabularies, random weights, the zoo's dtype: bf16 where the zoo has
it), 32 teacher-forced decode steps give the reference's logits within the dtype's tolerance, greedy
generation picks the reference's token wherever its top-2 margin exceeds that tolerance, the decode
plan replays one CUDA graph (graph_builds == 1), moves no cache bytes, and the device sampler draws
what luminal/sampling.py draws from the same logits."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest

from luminal.models import gemma, llama, qwen
from luminal.models.common import random_weights
from luminal.models.engine import Decoder
from luminal.sampling import Sampler, sample

pytestmark = pytest.mark.cuda

PRESETS = {"llama-3.2-1b": (llama, llama), "qwen3-0.6b": (qwen, llama), "gemma-3-1b": (gemma, gemma)}
CAP, STEPS, PROMPT = 64, 32, [11, 402, 7, 1999, 23, 5]
_PAIRS: dict = {}


def pair(name: str):
    """(cuda Decoder, reference Decoder, tolerance) on the same random weights."""
    if name not in _PAIRS:
        mod, arch = PRESETS[name]
        cfg = replace(mod.CONFIGS[name], n_layers=2)
        bf16 = "dtype" in {f.name for f in fields(cfg)}
        if bf16:
            cfg = replace(cfg, dtype="bf16")
        model = arch.Transformer(cfg, CAP)
        w = {**random_weights(model.weight_shapes(), seed=0), **model.extra_inputs()}
        mk = lambda be: Decoder(model.graph, model.cache_shapes, CAP, w, be, model.extra_inputs(), cfg.vocab_size)  # noqa: E731
        tol = 3e-2 if bf16 else 2e-3  # of the logits' scale (docs/numerics.md)
        _PAIRS[name] = (mk("cuda"), mk("reference"), tol)
    return _PAIRS[name]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_teacher_forced_decode_matches_the_reference(name):
    cu, ref, tol = pair(name)
    rng = np.random.default_rng(1)
    toks = [int(t) for t in rng.integers(0, 5000, STEPS)]
    for d in (cu, ref):
        d.reset()
    a, b = cu.step(PROMPT), ref.step(PROMPT)
    scale = float(np.abs(b).max())
    np.testing.assert_allclose(a, b, atol=tol * scale, rtol=0, err_msg=f"{name} prefill")
    for k, t in enumerate(toks):
        a, b = cu.step([t]), ref.step([t])
        np.testing.assert_allclose(a, b, atol=tol * scale, rtol=0, err_msg=f"{name} decode step {k}")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_decode_replays_one_graph_and_updates_caches_in_place(name):
    cu, _, _ = pair(name)
    cu.reset()
    tok = cu.next(PROMPT, Sampler())
    before = dict(cu.model.stats["runtimes"][0])
    for _ in range(STEPS):
        tok = cu.next([tok], Sampler())
    decode = cu.model.stats["runtimes"][0]
    ops = str(cu.model.stats["llir_ops"][0])  # in place: reading the new rows, or computing them (k's rotary)
    assert any(w in ops for w in ("KernelScatterInplace", "KernelScatterFused", "KernelScatterPair")), ops
    assert decode["d2d_bytes"] == 0 and decode["pinned"], decode  # the caches were updated in place
    # host ops whose shapes follow p (cuBLASLt attention matmuls of the unfused plan) are re-captured
    # into their child node each token; the graph itself is built once and its kernel nodes never change
    assert decode["graph_patches"] == before["graph_patches"], decode
    assert decode["graph_builds"] == 1, (decode, decode["host_captures"] - before["host_captures"])


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_greedy_generation_follows_the_reference_where_it_is_decided(name):
    cu, ref, tol = pair(name)
    for d in (cu, ref):
        d.reset()
    tok = cu.next(PROMPT, Sampler())
    logits = ref.step(PROMPT)[0]
    decided = 0
    for _ in range(STEPS // 2):  # the reference's real-vocab head is slow on the CPU: half the steps
        top2 = np.sort(logits)[-2:]
        if top2[1] - top2[0] > 2 * tol * float(np.abs(logits).max()):
            assert tok == int(np.argmax(logits)), name
            decided += 1
        logits = ref.step([tok])[0]  # the reference follows cuda's choice (teacher forcing)
        tok = cu.next([tok], Sampler())
    assert decided > 0, decided
    decode = cu.model.stats["runtimes"][0]
    dims = 8 * (len(cu.model._plans[0][1].slots) + 2)
    assert decode["h2d_bytes"] <= 4 + dims and decode["d2h_bytes"] == 24, decode  # token + dims; error pair + id


def test_device_sampler_draws_what_the_numpy_sampler_draws():
    cu, _, _ = pair("llama-3.2-1b")
    cu.reset()
    logits = cu.step(PROMPT)  # (1, vocab) f32, also left on the device by the run
    for s in (Sampler(), Sampler(1.0, seed=3), Sampler(0.7, top_k=40, seed=4), Sampler(1.1, top_p=0.9, seed=5),
              Sampler(0.8, top_k=100, top_p=0.95, seed=6)):  # fmt: skip
        for pos in range(40):
            assert cu.model.sample("logits", s, pos)[0] == sample(logits, s, pos)[0], (s, pos)
